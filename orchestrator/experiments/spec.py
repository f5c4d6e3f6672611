"""A sweep file: the workloads, the settings every run shares, and the axes whose every combination is a run.

    [sweep]
    workloads = ["traces/*.lwf"]          # files or globs: one run per file (and per combination of the axes)

    [[sweep.workloads]]                   # or, one table each: a base trace with injected leases,
    path = "blue.swf.gz"                  #   one run per injected file,
    inject = ["ars/*.lwf.gz"]
    inject_fields = "work_{work}-dur_{duration}h"   # with columns taken from the injected file's name

    [scheduling]                 # settings every run shares: the configuration file's own tables
    [simulation]                 #   ([scheduling], [simulation], [workload.swf]), checked the same way
    [workload.swf]

    [axes.scheduling]            # the values to sweep; every combination, with every workload, is a run
    suspension = ["none", "all"]
    backfilling = ["aggressive", "conservative"]

The whole file is checked before anything runs, so a sweep never stops half-way on a typo: every axis value
as the configuration checks it, every combination as a whole configuration, every workload and injected
file read and parsed. Errors are `ConfigError`s naming the sweep file and the key.

A run's id is a digest of what decides its result (the workload files' names and bytes, the whole
configuration), so a resumed sweep recognises the runs it already finished, and a changed sweep file
reruns exactly the runs it changed.
"""

from __future__ import annotations

import copy
import difflib
import glob
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Iterator, Mapping

from drivers.files import UserFileError, read_user_file
from orchestrator.workloads.files import MAX_PACKED
from orchestrator.config import config_from_dict, read_toml, resolve_site, value_kind
from orchestrator.model.errors import ConfigError, InvalidRequest
from orchestrator.model.workload import Workload
from orchestrator.workloads import workload_from_bytes
from orchestrator.workloads.files import decompressed
from orchestrator.workloads.injected import inject

#: the configuration tables an axis may vary (a table path and where it sits in the TOML document)
AXIS_TABLES = {"scheduling": ("scheduling",), "simulation": ("simulation",), "workload.swf": ("workload", "swf")}
_SETTINGS_TABLES = ("scheduling", "simulation", "workload")
_TOP_LEVEL = ("sweep", "axes") + _SETTINGS_TABLES
_WORKLOAD_KEYS = ("path", "inject", "inject_fields")
#: the table's first columns, before the inject fields, the axes and the metrics
FIXED_COLUMNS = ("run", "workload", "inject")


@dataclass(frozen=True)
class WorkloadFile:
    """A workload file as the sweep names it (relative to the sweep file), with its bytes as on disk."""

    name: str
    path: Path
    raw: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


@dataclass(frozen=True)
class Axis:
    table: str            # "scheduling", "simulation" or "workload.swf"
    key: str              # also the results table's column
    values: tuple


@dataclass(frozen=True)
class Run:
    """One simulation of the sweep: a workload (and maybe injected leases) under one configuration."""

    id: str
    workload: WorkloadFile
    inject: WorkloadFile | None
    fields: tuple[tuple[str, Any], ...]       # taken from the injected file's name
    settings: tuple[tuple[str, Any], ...]     # each axis key and its value in this run
    config: Mapping[str, Any]                 # the configuration document (`config_from_dict` reads it)

    def row(self) -> dict[str, Any]:
        """The run's columns of the results table, before its metrics."""
        row = {"run": self.id, "workload": self.workload.name, "inject": self.inject.name if self.inject else ""}
        row.update(self.fields)
        row.update((key, plain(value)) for key, value in self.settings)
        return row


@dataclass(frozen=True)
class Sweep:
    path: Path
    runs: tuple[Run, ...]
    axes: tuple[Axis, ...]
    field_names: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return [*FIXED_COLUMNS, *self.field_names, *(axis.key for axis in self.axes)]


def plain(value: Any) -> Any:
    """A TOML value as JSON and CSV hold it (dates and times as ISO 8601 text)."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return value


def load_sweep(path: str | Path) -> Sweep:
    """Read and check the whole sweep file (see the module docstring); one `ConfigError` for the first fault."""
    path = Path(path)
    data = read_toml(path)   # its errors name the file (and the line) already
    try:
        return _Reader(path).sweep(data)
    except InvalidRequest as exc:
        if exc.where:
            raise
        raise ConfigError(exc.field, exc.problem, where=str(path)) from None


def _unknown(key: str, allowed: tuple[str, ...], what: str) -> ConfigError:
    hint = difflib.get_close_matches(key.rsplit(".", 1)[-1], allowed, n=1, cutoff=0.6)
    extra = f" (did you mean {hint[0]}?)" if hint else f" (expected {', '.join(allowed)})"
    return ConfigError(key, f"unknown {what}{extra}")


def _nested(table: str, key: str, value: Any) -> dict[str, Any]:
    """`{"workload": {"swf": {key: value}}}` for the table path "workload.swf"."""
    doc: dict[str, Any] = {key: value}
    for part in reversed(AXIS_TABLES[table]):
        doc = {part: doc}
    return doc


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        self.folder = path.parent
        self.parsed: dict[tuple[Path, str], Workload] = {}
        self.checked: set[tuple[Path, Path | None, str]] = set()

    # -- the document ------------------------------------------------------------------------------------
    def sweep(self, data: dict[str, Any]) -> Sweep:
        for key, value in data.items():
            if key not in _TOP_LEVEL:
                raise _unknown(key, _TOP_LEVEL, "table" if isinstance(value, dict) else "key")
        base = {key: data[key] for key in _SETTINGS_TABLES if key in data}
        config_from_dict(base)   # the shared settings alone, so their errors name their own key
        sweep_table = data.get("sweep")
        if not isinstance(sweep_table, dict):
            raise ConfigError("sweep", "missing: a sweep file needs a [sweep] table with its workloads"
                              if sweep_table is None else f"must be a table, written [sweep] (got {value_kind(sweep_table)})")
        for key in sweep_table:
            if key != "workloads":
                raise _unknown(f"sweep.{key}", ("workloads",), "key")
        axes = self.axes(data.get("axes", {}), base)
        workloads = self.workloads(sweep_table.get("workloads"))
        field_names: list[str] = []
        for _, _, fields in workloads:
            for name in fields.names:
                if name in {axis.key for axis in axes}:
                    raise ConfigError(fields.key, f"the field {name!r} is also an axis: name it otherwise")
                if name not in field_names:
                    field_names.append(name)
        runs = self.runs(workloads, axes, base)
        return Sweep(path=self.path, runs=tuple(runs), axes=tuple(axes), field_names=tuple(field_names))

    # -- axes --------------------------------------------------------------------------------------------------
    def axes(self, table: object, base: Mapping[str, Any]) -> list[Axis]:
        if not isinstance(table, dict):
            raise ConfigError("axes", f"must be a table, written [axes.scheduling] (got {value_kind(table)})")
        found: list[Axis] = []
        for name, body in self._axis_tables(table):
            for key, values in body.items():
                field = f"axes.{name}.{key}"
                if not isinstance(values, list):
                    raise ConfigError(field, f"must be an array of the values to sweep (got {value_kind(values)})")
                if not values:
                    raise ConfigError(field, "is empty: an axis needs at least one value")
                for i, value in enumerate(values):
                    if value in values[:i]:
                        raise ConfigError(field, f"{value!r} is given twice")
                    try:
                        config_from_dict(_nested(name, key, value))
                    except ConfigError as exc:
                        raise ConfigError(f"axes.{exc.field}", exc.problem) from None
                fixed = base
                for part in AXIS_TABLES[name]:
                    fixed = fixed.get(part, {}) if isinstance(fixed, dict) else {}
                if key in fixed:
                    raise ConfigError(field, f"is also set in [{name}]: give it in one place")
                found.append(Axis(table=name, key=key, values=tuple(values)))
        return found

    def _axis_tables(self, table: dict) -> Iterator[tuple[str, dict]]:
        for name, body in table.items():
            if name == "workload" and isinstance(body, dict):
                for sub, sub_body in body.items():
                    if sub != "swf":
                        raise _unknown(f"axes.workload.{sub}", ("swf",), "table")
                    yield "workload.swf", self._table(f"axes.workload.{sub}", sub_body)
                continue
            if name not in AXIS_TABLES:
                raise _unknown(f"axes.{name}", tuple(AXIS_TABLES), "table")
            yield name, self._table(f"axes.{name}", body)

    @staticmethod
    def _table(field: str, body: object) -> dict:
        if not isinstance(body, dict):
            raise ConfigError(field, f"must be a table of axes, written [{field}] (got {value_kind(body)})")
        return body

    # -- workloads ---------------------------------------------------------------------------------------------
    def workloads(self, items: object) -> list[tuple[list[WorkloadFile], list[WorkloadFile | None], "_Fields"]]:
        if items is None:
            raise ConfigError("sweep.workloads", "missing: name at least one workload file or glob")
        if not isinstance(items, list) or not items:
            raise ConfigError("sweep.workloads", "must be a non-empty array of files or globs "
                                                 f"(got {value_kind(items) if items != [] else 'an empty array'})")
        result = []
        for i, item in enumerate(items):
            key = f"sweep.workloads[{i}]"
            if isinstance(item, str):
                item = {"path": item}
            if not isinstance(item, dict):
                raise ConfigError(key, f"must be a file or glob, or a table with path and inject (got {value_kind(item)})")
            for name in item:
                if name not in _WORKLOAD_KEYS:
                    raise _unknown(f"{key}.{name}", _WORKLOAD_KEYS, "key")
            if "path" not in item:
                raise ConfigError(f"{key}.path", "missing: the workload file or glob")
            bases = self.files(f"{key}.path", item["path"])
            injected: list[WorkloadFile | None] = [None]
            if "inject" in item:
                patterns = item["inject"]
                if not isinstance(patterns, list) or not patterns:
                    raise ConfigError(f"{key}.inject", "must be a non-empty array of files or globs "
                                                       f"(got {value_kind(patterns) if patterns != [] else 'an empty array'})")
                injected = [f for n, pattern in enumerate(patterns) for f in self.files(f"{key}.inject[{n}]", pattern)]
            fields = _Fields(f"{key}.inject_fields", item.get("inject_fields"))
            if fields.names and "inject" not in item:
                raise ConfigError(f"{key}.inject_fields", "names fields of injected files, but there is no inject")
            for found in injected:
                if found is not None:
                    fields.of(found.name)   # every injected file's name must match, before anything runs
            result.append((bases, injected, fields))
        return result

    def files(self, key: str, pattern: object) -> list[WorkloadFile]:
        if not isinstance(pattern, str) or not pattern.strip():
            raise ConfigError(key, f"must be a file or glob (got {value_kind(pattern)})")
        full = self.folder / pattern
        if glob.has_magic(pattern):
            matched = sorted(Path(p) for p in glob.glob(str(full), recursive=True) if Path(p).is_file())
            if not matched:
                raise ConfigError(key, f"{pattern!r} matches no file")
        else:
            if not full.is_file():
                raise ConfigError(key, f"{pattern} does not exist" if not full.exists() else f"{pattern} is not a file")
            matched = [full]
        result = []
        for path in matched:
            try:
                raw = read_user_file(path, MAX_PACKED)
            except UserFileError as exc:
                raise ConfigError(key, f"cannot read {path} ({exc.problem})") from None
            name = str(path.relative_to(self.folder)) if not Path(pattern).is_absolute() else str(path)
            result.append(WorkloadFile(name=name, path=path, raw=raw))
        return result

    # -- runs --------------------------------------------------------------------------------------------------
    def runs(self, workloads, axes: list[Axis], base: Mapping[str, Any]) -> list[Run]:
        runs: list[Run] = []
        seen: dict[str, str] = {}
        for i, (bases, injected, fields) in enumerate(workloads):
            for trace in bases:
                for extra in injected:
                    for values in itertools.product(*(axis.values for axis in axes)):
                        document = copy.deepcopy(dict(base))
                        for axis, value in zip(axes, values):
                            table = document
                            for part in AXIS_TABLES[axis.table]:
                                table = table.setdefault(part, {})
                            table[axis.key] = value
                        config = config_from_dict(document)   # a combination may be wrong as a whole
                        self.check_workload(i, trace, extra, config, document)
                        run_id = _run_id(trace, extra, document)
                        what = trace.name + (f" with {extra.name}" if extra else "")
                        if run_id in seen:
                            raise ConfigError("sweep.workloads", f"{what} is in the sweep twice ({seen[run_id]})")
                        seen[run_id] = what
                        runs.append(Run(id=run_id, workload=trace, inject=extra,
                                        fields=fields.of(extra.name) if extra else (),
                                        settings=tuple((axis.key, value) for axis, value in zip(axes, values)),
                                        config=document))
        return runs

    def check_workload(self, index: int, trace: WorkloadFile, extra: WorkloadFile | None, config,
                       document: Mapping[str, Any]) -> None:
        """Parse each file once per configuration that changes how it is read (site, start, SWF mapping)."""
        key = f"sweep.workloads[{index}]"
        reading = json.dumps({k: document.get(k) for k in ("simulation", "workload")}, sort_keys=True, default=str)
        if (trace.path, extra.path if extra else None, reading) in self.checked:
            return
        self.checked.add((trace.path, extra.path if extra else None, reading))
        loaded = self._parsed(f"{key}.path", trace, config, reading)
        if extra is not None:
            loaded = inject(loaded, self._parsed(f"{key}.inject", extra, config, reading))
        try:
            resolve_site(loaded, config)
        except ConfigError as exc:
            raise ConfigError(f"{key}.path", f"{exc.field}: {exc.problem}") from None

    def _parsed(self, key: str, item: WorkloadFile, config, reading: str) -> Workload:
        cached = self.parsed.get((item.path, reading))
        if cached is None:
            try:
                cached = workload_from_bytes(decompressed(item.raw, item.name), item.path.name, config, source=item.name)
            except InvalidRequest as exc:
                raise ConfigError(key, str(exc)) from None
            self.parsed[(item.path, reading)] = cached
        return cached


class _Fields:
    """`inject_fields`: a pattern such as "work_{work}-dur_{duration}h" matched against an injected file's name
    (without its .gz and format suffixes); each {name} becomes a column, a number when it reads as one."""

    def __init__(self, key: str, pattern: object):
        self.key = key
        self.pattern = pattern
        self.names: list[str] = []
        self.regex: re.Pattern | None = None
        if pattern is None:
            return
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(key, f"must be a pattern such as \"work_{{work}}-dur_{{duration}}h\" (got {value_kind(pattern)})")
        parts = re.split(r"\{([^{}]*)\}", pattern)
        regex = ""
        for n, part in enumerate(parts):
            if n % 2 == 0:
                regex += re.escape(part)
                continue
            if not part.isidentifier():
                raise ConfigError(key, f"{{{part}}} is not a field name (letters, digits and _)")
            if part in self.names or part in FIXED_COLUMNS:
                raise ConfigError(key, f"the field {part!r} " + ("appears twice" if part in self.names else
                                                                  "is a column of its own: name it otherwise"))
            self.names.append(part)
            regex += f"(?P<{part}>.+?)"
        if not self.names:
            raise ConfigError(key, f"{pattern!r} names no field: write each as {{name}}")
        self.regex = re.compile(regex)

    def of(self, name: str) -> tuple[tuple[str, Any], ...]:
        if self.regex is None:
            return ()
        stem = Path(name).name
        for suffix in (".gz", ".lwf", ".xml", ".swf"):
            stem = stem.removesuffix(suffix)
        match = self.regex.fullmatch(stem)
        if match is None:
            raise ConfigError(self.key, f"{self.pattern!r} does not match the injected file {name}")
        return tuple((field, number_or_text(match.group(field))) for field in self.names)


def number_or_text(text: str) -> Any:
    """"05" is 5, "2.5" is 2.5, anything else stays text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _run_id(trace: WorkloadFile, extra: WorkloadFile | None, document: Mapping[str, Any]) -> str:
    what = {"workload": [trace.name, trace.digest], "inject": [extra.name, extra.digest] if extra else None,
            "config": document}
    text = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
