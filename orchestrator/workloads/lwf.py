"""Haizea's Lease Workload Format (LWF): an XML list of lease requests with their arrival times.

    <lease-workload name="...">
      <description>...</description>                                   optional
      <site>                                                           optional
        <resource-types names="CPU Memory"/>
        <nodes><node-set numnodes="4" properties="gpu=a100 rack=r1"><res type="CPU" amount="100"/>...</node-set></nodes>
      </site>
      <lease-requests>
        <lease-request arrival="DD:HH:MM:SS">                          relative to simulation.start
          <realduration time="DD:HH:MM:SS"/>                           optional (simulation: real run time)
          <lease id="1" preemptible="true" where="gpu=a100 !old" spread="true">   (or pack, exclusive)
            <nodes><node-set numnodes="1"><res type="CPU" amount="100"/>...</node-set></nodes>
            <start/> | <start><now/></start> | <start><exact time="..."/></start>
            <duration time="01:00:00"/>
            <software><disk-image id="foo.img" size="1024"/></software> | <software><none/></software>
          </lease>
        </lease-request>
      </lease-requests>
    </lease-workload>

Times are `[+][DD:]HH:MM:SS[.ff]`. An exact start in that form is relative to `simulation.start` (as
Haizea reads it, with or without the `+`); anything else is read as an absolute ISO 8601 time with a zone.
CPU is in percent of a core, Memory/Disk in MB (read as MiB), Net-in/Net-out in MB/s.

`properties` (a site's node-set: each of its hosts has them) and a lease's `where` (constraints, separated
by spaces), `spread`, `pack` and `exclusive` (true or false) are leasewise's extension of the format: the
same placement as `lease submit --where/--spread/--pack/--exclusive` (docs/simulation.md).

The file is parsed strictly: an unknown element or attribute is an error naming it, so a typo never
silently turns an advance reservation into a best-effort lease.
"""

from __future__ import annotations

import difflib
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Iterable
from xml.parsers import expat

from orchestrator.model.errors import InvalidRequest, WorkloadError
from orchestrator.model.lease import LeaseRequest, LeaseType, VMImage
from orchestrator.model.numbers import ascii_decimal, ascii_whole
from orchestrator.model.placement import PLACEMENT_KEYS, placement_of, properties_of, refusal, unknown_keys
from orchestrator.model.resources import Resources
from orchestrator.model.timeutil import MAX_DURATION, ZERO, duration_from_seconds, iso, parse_time
from orchestrator.config import MAX_SITE_HOSTS
from orchestrator.model.workload import Workload, check_fits_site

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.config import Config

_TIME = re.compile(r"^\s*(\+?)(?:(\d+):)?(\d+):(\d+):(\d+(?:\.\d*)?)\s*$", re.ASCII)

_RES_TYPES = {"cpu": "cpu", "memory": "memory", "disk": "disk", "net-in": "net_in", "net-out": "net_out"}
_RES_NAMES = ("CPU", "Memory", "Disk", "Net-in", "Net-out")


class _Located:
    """An element tree plus the line each element starts on (ElementTree keeps no positions)."""

    def __init__(self, root: ET.Element, lines: dict[ET.Element, int]):
        self.root = root
        self.lines = lines

    def line(self, elem: ET.Element) -> int:
        return self.lines.get(elem, 0)


def _parse_xml(data: bytes | str, source: str) -> _Located:
    parser = expat.ParserCreate()
    builder = ET.TreeBuilder()
    lines: dict[ET.Element, int] = {}

    def start(tag: str, attrs: dict[str, str]) -> None:
        lines[builder.start(tag, attrs)] = parser.CurrentLineNumber

    parser.buffer_text = True
    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(data, True)
        root = builder.close()
    except expat.ExpatError as exc:
        raise WorkloadError(f"{source}:{exc.lineno}", f"not well-formed XML ({expat.ErrorString(exc.code)})") from None
    except AssertionError:  # TreeBuilder.close() with nothing built
        raise WorkloadError(f"{source}:1", "not well-formed XML (no element found)") from None
    except LookupError as exc:   # an encoding Python does not know (encoding="x-evil")
        raise WorkloadError(f"{source}:1", f"not well-formed XML (an unknown encoding: {exc})") from None
    except RecursionError:
        raise WorkloadError(f"{source}:1", "not well-formed XML (nested too deeply)") from None
    return _Located(root, lines)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _suggest(word: str, options: Iterable[str]) -> str:
    hint = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean {hint[0]}?" if hint else "expected " + (" or ".join(options) or "nothing")


def parse_lwf_time(text: str, field: str) -> tuple[timedelta, bool]:
    """Parse `[+][DD:]HH:MM:SS[.ff]`; returns the offset and whether it had a leading `+`."""
    match = _TIME.match(text or "")
    if not match:
        raise InvalidRequest(field, f"{text!r} is not a time of the form [DD:]HH:MM:SS[.ff]")
    plus, days, hours, minutes, seconds = match.groups()
    if int(minutes) >= 60 or float(seconds) >= 60:
        raise InvalidRequest(field, f"{text!r}: minutes and seconds must be below 60")
    whole = ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60
    seconds = whole + float(seconds) if whole <= MAX_DURATION.total_seconds() else whole
    return duration_from_seconds(seconds, field), bool(plus)


class _Reader:
    """Walks the tree, checking every element and attribute against what the format allows."""

    def __init__(self, doc: _Located, config: "Config", source: str):
        self.doc = doc
        self.config = config
        self.source = source
        self.start = config.simulation.start
        self.where = source  # prefix of error messages, refined per lease

    # -- structure -------------------------------------------------------------------------------------------
    def fail(self, field: str, problem: str, elem: ET.Element | None = None) -> WorkloadError:
        where = self.where
        if where == self.source and elem is not None:
            where = f"{self.source}:{self.doc.line(elem)}"
        return WorkloadError(field, problem, where=where)

    def check(self, elem: ET.Element, path: str, attrs: tuple[str, ...] = (), children: tuple[str, ...] = (),
              required: tuple[str, ...] = (), text: bool = False) -> None:
        """Refuse unknown attributes/children, missing required attributes, stray text.

        `path` is the dotted field name of `elem` ("" for the <lease> itself, whose children are named
        directly: `duration`, `nodes.node-set.res.amount`)."""
        for name in elem.attrib:
            if name not in attrs:
                raise self.fail(_join(path, name), f"unknown attribute on <{elem.tag}> ({_suggest(name, attrs)})", elem)
        for name in required:
            if name not in elem.attrib:
                raise self.fail(_join(path, name), f"<{elem.tag}> needs a {name} attribute", elem)
        for child in elem:
            if child.tag not in children:
                if child.tag == "deadline" and elem.tag == "lease":
                    raise self.fail(_join(path, "deadline"), "deadline leases are not supported", child)
                raise self.fail(_join(path, child.tag), f"unknown element in <{elem.tag}> ({_suggest(child.tag, children)})", child)
        if not text and elem.text and elem.text.strip():
            raise self.fail(path or elem.tag, f"unexpected text {elem.text.strip()[:30]!r} in <{elem.tag}>", elem)
        for child in elem:
            if child.tail and child.tail.strip():
                raise self.fail(path or elem.tag, f"unexpected text {child.tail.strip()[:30]!r} in <{elem.tag}>", child)

    def one(self, elem: ET.Element, tag: str, path: str) -> ET.Element:
        """The one <tag> child `elem` must have."""
        found = self.optional_one(elem, tag, path)
        if found is None:
            raise self.fail(_join(path, tag), f"<{elem.tag}> needs a <{tag}> element", elem)
        return found

    def optional_one(self, elem: ET.Element, tag: str, path: str) -> ET.Element | None:
        """The <tag> child `elem` may have (one at most), or None."""
        found = elem.findall(tag)
        if len(found) > 1:
            raise self.fail(_join(path, tag), f"appears {len(found)} times in <{elem.tag}> (only one is allowed)", found[1])
        return found[0] if found else None

    def time(self, elem: ET.Element, attr: str, field: str) -> tuple[timedelta, bool]:
        try:
            return parse_lwf_time(elem.get(attr, ""), field)
        except InvalidRequest as exc:
            raise self.fail(exc.field, exc.problem, elem) from None

    def number(self, text: str, field: str, elem: ET.Element) -> float:
        value = ascii_decimal(text)
        if value is None:
            raise self.fail(field, f"{text!r} is not a number", elem)
        if value < 0:
            raise self.fail(field, f"must not be negative (got {text})", elem)
        return value

    def count(self, text: str, field: str, elem: ET.Element) -> int:
        value = ascii_whole(text)
        if value is None:
            raise self.fail(field, f"{text!r} is not a whole number", elem)
        if value < 1:
            raise self.fail(field, f"must be at least 1 (got {value})", elem)
        if value > MAX_SITE_HOSTS:
            raise self.fail(field, f"is too large (got {value}; a site has at most {MAX_SITE_HOSTS} hosts)", elem)
        return value

    # -- nodes (shared by the site and the leases) ---------------------------------------------------------
    def nodes(self, elem: ET.Element, path: str, declared: dict[str, str] | None,
              properties: list[dict[str, str]] | None = None) -> list[Resources]:
        """The nodes of every node-set; with `properties` (a site's), each node's properties appended there."""
        self.check(elem, path, children=("node-set",))
        sets = elem.findall("node-set")
        if not sets:
            raise self.fail(f"{path}.node-set", f"<{elem.tag}> needs at least one <node-set>", elem)
        result: list[Resources] = []
        for node_set in sets:
            sp = f"{path}.node-set"
            self.check(node_set, sp, attrs=("numnodes",) + (("properties",) if properties is not None else ()),
                       children=("res",), required=("numnodes",))
            numnodes = self.count(node_set.get("numnodes", ""), f"{sp}.numnodes", node_set)
            if properties is not None:
                try:
                    props = dict(properties_of([(key, value) if sep else (key, None) for key, sep, value
                                                in (p.partition("=") for p in node_set.get("properties", "").split())],
                                               f"{sp}.properties"))
                except InvalidRequest as exc:
                    raise self.fail(exc.field, exc.problem, node_set) from None
                properties.extend([props] * numnodes)
            amounts: dict[str, float] = {}
            for res in node_set.findall("res"):
                rp = f"{sp}.res"
                self.check(res, rp, attrs=("type", "amount"), required=("type", "amount"))
                rtype = res.get("type", "")
                key = _RES_TYPES.get(rtype.lower())
                if key is None:
                    hint = difflib.get_close_matches(rtype, _RES_NAMES, n=1, cutoff=0.5)
                    extra = f"did you mean {hint[0]}?" if hint else "expected " + ", ".join(_RES_NAMES)
                    raise self.fail(f"{rp}.type", f"unknown resource type {rtype!r} ({extra})", res)
                if declared is not None and rtype.lower() not in declared:
                    raise self.fail(f"{rp}.type", f"{rtype!r} is not one of the site's resource types "
                                                  f"({', '.join(declared.values())})", res)
                if key in amounts:
                    raise self.fail(f"{rp}.type", f"{rtype} is given twice in one <node-set>", res)
                amounts[key] = self.number(res.get("amount", ""), f"{rp}.amount", res)
            node = Resources(**amounts)
            result.extend([node] * numnodes)
        return result

    # -- the document ------------------------------------------------------------------------------------------
    def workload(self) -> Workload:
        root = self.doc.root
        if root.tag != "lease-workload":
            raise self.fail("lease-workload", f"the root element must be <lease-workload> (got <{root.tag}>)", root)
        self.check(root, "lease-workload", attrs=("name",), children=("description", "site", "lease-requests"))
        description = self.optional_one(root, "description", "lease-workload")
        if description is not None:
            self.check(description, "description", text=True)
        site_elem = self.optional_one(root, "site", "lease-workload")
        properties: list[dict[str, str]] = []
        site, declared = (None, None) if site_elem is None else self.site(site_elem, properties)
        requests_elem = self.one(root, "lease-requests", "lease-workload")
        self.check(requests_elem, "lease-requests", children=("lease-request",))

        hosts = self.config.simulation.hosts if self.config.simulation.site is not None else site
        if self.config.simulation.site is not None:
            declared = None  # the file's resource-type list describes the file's site, not the configured one
            properties = []  # (and its properties its hosts)
        by_host = {} if hosts is None else {name: p for (name, _), p in zip(hosts, properties or [{}] * len(hosts))}
        fit_cache: dict = {}
        first_line: dict[str, int] = {}
        requests: list[tuple[str, LeaseRequest]] = []
        for req_elem in requests_elem.findall("lease-request"):
            self.where = self.source
            lease_id, request = self.lease_request(req_elem, declared, first_line)
            if hosts is not None:
                check_fits_site(request, hosts, self.where, fit_cache)
                if request.placement is not None:
                    self.check_placement(request, hosts, by_host)
            requests.append((lease_id, request))
        self.where = self.source
        requests.sort(key=lambda item: item[1].submit_time)
        return Workload(
            requests=requests,
            site=site,
            properties=by_host if site is not None and properties else {},
            source=self.source,
            name=root.get("name", ""),
            description=" ".join((description.text or "").split()) if description is not None else "",
        )

    def check_placement(self, request: LeaseRequest, hosts: list[tuple[str, Resources]],
                        properties: dict[str, dict[str, str]]) -> None:
        """A lease's placement against the site: a key no host has, or no way to meet it, is an error."""
        assert request.placement is not None
        unknown = unknown_keys(request.placement, properties)
        if unknown:
            raise WorkloadError("where", f"no host of the site has a property {unknown[0]!r}", where=self.where)
        why = refusal(request.placement, request.nodes, properties, dict(hosts))
        if why is not None:
            raise WorkloadError("where", why, where=self.where)

    def site(self, elem: ET.Element, properties: list[dict[str, str]]) \
            -> tuple[list[tuple[str, Resources]], dict[str, str] | None]:
        self.check(elem, "site", children=("resource-types", "nodes"))
        declared: dict[str, str] | None = None
        types_elem = self.optional_one(elem, "resource-types", "site")
        if types_elem is not None:
            self.check(types_elem, "site.resource-types", attrs=("names",), required=("names",))
            names = types_elem.get("names", "").split()
            for name in names:
                if name.lower() not in _RES_TYPES:
                    raise self.fail("site.resource-types.names",
                                    f"unknown resource type {name!r} (expected {', '.join(_RES_NAMES)})", types_elem)
            declared = {n.lower(): n for n in names}  # lower-case -> as written
        nodes = self.nodes(self.one(elem, "nodes", "site"), "site.nodes", declared, properties)
        for capacity in nodes:
            try:
                capacity.validate("site.nodes")
            except InvalidRequest as exc:
                raise self.fail(exc.field, exc.problem, elem) from None
        return [(f"host{i}", capacity) for i, capacity in enumerate(nodes, start=1)], declared

    def lease_request(self, req: ET.Element, declared: dict[str, str] | None,
                      first_line: dict[str, int]) -> tuple[str, LeaseRequest]:
        lease = self.one(req, "lease", "lease-request")
        assert lease is not None
        if "id" not in lease.attrib:
            raise self.fail("id", "every <lease> needs an id attribute", lease)
        lease_id = lease.get("id", "").strip()
        if not lease_id:
            raise self.fail("id", "must not be empty", lease)
        self.where = f"{self.source}: lease {lease_id}"
        if lease_id in first_line:
            raise self.fail("id", f"duplicate lease id (first used on line {first_line[lease_id]}, again on line "
                                  f"{self.doc.line(lease)})", lease)
        first_line[lease_id] = self.doc.line(lease)

        self.check(req, "lease-request", attrs=("arrival",), children=("realduration", "lease"), required=("arrival",))
        arrival, _ = self.time(req, "arrival", "arrival")
        submit = self.start + arrival
        real_duration = None
        real_elem = self.optional_one(req, "realduration", "lease-request")
        if real_elem is not None:
            self.check(real_elem, "realduration", attrs=("time",), required=("time",))
            real_duration, _ = self.time(real_elem, "time", "realduration")
            if real_duration <= ZERO:
                raise self.fail("realduration", f"must be positive (got {real_elem.get('time')})", real_elem)

        self.check(lease, "", attrs=("id", "preemptible") + PLACEMENT_KEYS,
                   children=("nodes", "start", "duration", "software"))
        preemptible = True
        if "preemptible" in lease.attrib:
            text = lease.get("preemptible", "").strip().lower()
            if text not in ("true", "false"):
                raise self.fail("preemptible", f"must be true or false (got {lease.get('preemptible')!r})", lease)
            preemptible = text == "true"

        nodes = self.nodes(self.one(lease, "nodes", ""), "nodes", declared)

        duration_elem = self.one(lease, "duration", "")
        assert duration_elem is not None
        self.check(duration_elem, "duration", attrs=("time",), required=("time",))
        duration, _ = self.time(duration_elem, "time", "duration")

        start_elem = self.one(lease, "start", "")
        assert start_elem is not None
        lease_type, start = self.start_of(start_elem, submit)

        image = None
        software = self.optional_one(lease, "software", "")
        if software is not None:
            image = self.software(software)

        try:
            flags = {}
            for key in ("spread", "pack", "exclusive"):
                given = lease.get(key)
                if given is not None and given.strip().lower() not in ("true", "false"):
                    raise InvalidRequest(key, f"must be true or false (got {given!r})")
                flags[key] = None if given is None else given.strip().lower() == "true"
            hosts_named = lease.get("where")
            placement = placement_of(None if hosts_named is None else hosts_named.split(), **flags)
            request = LeaseRequest(
                type=lease_type, nodes=tuple(nodes), duration=duration, submit_time=submit, start=start,
                preemptible=preemptible, real_duration=real_duration, image=image, placement=placement,
            )
        except InvalidRequest as exc:
            raise self.fail(exc.field, exc.problem) from None
        return lease_id, request

    def start_of(self, elem: ET.Element, submit: datetime) -> tuple[LeaseType, datetime | None]:
        self.check(elem, "start", children=("now", "exact"))
        children = list(elem)
        if not children:
            return LeaseType.BEST_EFFORT, None
        if len(children) > 1:
            raise self.fail("start", "holds at most one of <now/> and <exact/>", children[1])
        child = children[0]
        if child.tag == "now":
            self.check(child, "start.now")
            return LeaseType.IMMEDIATE, None
        self.check(child, "start.exact", attrs=("time",), required=("time",))
        text = child.get("time", "")
        if _TIME.match(text):
            offset, _ = self.time(child, "time", "start")
            start = self.start + offset
        else:
            try:
                start = parse_time(text, "start")
            except InvalidRequest:
                try:
                    naive = datetime.fromisoformat(text.strip()).tzinfo is None
                except ValueError:
                    naive = False
                if naive:
                    problem = (f"{text!r} has no time zone (write e.g. {text.strip()}Z, "
                               "or +[DD:]HH:MM:SS from the simulation start)")
                else:
                    problem = (f"{text!r} is neither +[DD:]HH:MM:SS (from the simulation start) "
                               "nor an ISO 8601 time with a zone")
                raise self.fail("start", problem, child) from None
        if start < submit:
            raise self.fail("start", f"{text} ({iso(start)}) is before the lease arrives ({iso(submit)}): "
                                     "an advance reservation cannot start in the past", child)
        return LeaseType.ADVANCE_RESERVATION, start

    def software(self, elem: ET.Element) -> VMImage | None:
        self.check(elem, "software", children=("none", "disk-image"))
        children = list(elem)
        if len(children) != 1:
            raise self.fail("software", "needs exactly one of <none/> and <disk-image/>", elem)
        child = children[0]
        if child.tag == "none":
            self.check(child, "software.none")
            return None
        self.check(child, "software.disk-image", attrs=("id", "size"), required=("id", "size"))
        disk = child.get("id", "").strip()
        if not disk:
            raise self.fail("software.disk-image.id", "must not be empty", child)
        size = self.number(child.get("size", ""), "software.disk-image.size", child)
        return VMImage(disk=disk, size_mib=size)


def parse_lwf(data: bytes | str, config: "Config | None" = None, source: str = "<lwf>") -> Workload:
    """Parse LWF text (bytes or str) into a Workload; `source` names the file in error messages."""
    from orchestrator.config import Config

    return _Reader(_parse_xml(data, source), config or Config(), source).workload()


def load_lwf(path, config: "Config | None" = None) -> Workload:
    """Read an LWF file (see `load_workload` for format detection and gzip)."""
    from pathlib import Path

    from orchestrator.workloads.files import read_workload_file

    return parse_lwf(read_workload_file(Path(path)), config, source=str(path))
