"""Ray, as a sweep uses it: a local instance of its own (`--workers` CPUs) or a running cluster (`--address`),
one task per run, and Ray's own retries and dashboard.

Why Ray: a sweep is many independent, CPU-bound simulations of a few seconds to minutes, which is what Ray's
tasks are for; the same code runs on a laptop (a local instance started and stopped with the sweep) and on a
cluster, with Ray's dashboard to watch it and its fault handling (a task whose worker dies is retried on
another). The leasewise code goes to the workers as a runtime environment (`py_modules`), so workers run
exactly the driver's code, and the workload files go as objects, so a worker needs no copy of them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.experiments.task import simulate_run
from orchestrator.model.errors import LeasewiseError

SWEEP_INSTALL_HINT = "pip install 'leasewise[sweep]'"
#: how often Ray runs a task again whose worker died (a crash, the OOM killer), before the run fails
RETRIES = 3


class EngineError(LeasewiseError):
    """Ray is missing or could not be started or reached."""


class RunFailed(Exception):
    """A run raised (or its worker died RETRIES + 1 times); the message is the cause, on one line."""


def require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise EngineError(f"sweep needs Ray, which is not installed: {SWEEP_INSTALL_HINT}") from None


def _code_paths() -> list[str]:
    """The packages a worker imports, as the driver has them."""
    import drivers
    import orchestrator

    return [str(Path(orchestrator.__file__).parent), str(Path(drivers.__file__).parent)]


class RayEngine:
    """A context manager: Ray started (or joined) on entry, shut down on exit, whatever happened."""

    def __init__(self, *, workers: int | None = None, address: str | None = None, dashboard: bool = False):
        self.workers = workers
        self.address = address
        self.dashboard = dashboard
        self.slots = workers or 1
        self.dashboard_url: str | None = None
        self._ray: Any = None
        self._task: Any = None

    def __enter__(self) -> "RayEngine":
        require_ray()
        import ray

        # A sweep has no business reporting usage to Ray's servers (and a lab often has no route there).
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        options: dict[str, Any] = {
            "runtime_env": {"py_modules": _code_paths(), "excludes": ["__pycache__", "*.pyc"]},
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        try:
            if self.address is None:
                context = ray.init(address="local", num_cpus=self.workers or os.cpu_count() or 1,
                                   include_dashboard=self.dashboard, **options)
            else:
                context = ray.init(address=self.address, **options)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
            where = f"--address: cannot reach Ray at {self.address}" if self.address else "cannot start Ray"
            raise EngineError(f"{where} ({_one_line(exc)})") from None
        self._ray = ray
        self.dashboard_url = getattr(context, "dashboard_url", None) or None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = self.workers or max(cpus, 1)
        self._task = ray.remote(num_cpus=1, max_retries=RETRIES)(simulate_run)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None

    def put(self, value: Any) -> Any:
        return self._ray.put(value)

    def submit(self, *args: Any) -> Any:
        return self._task.remote(*args)

    def next_done(self, pending: list[Any]) -> Any:
        """Wait for one of `pending` to finish and return it. (In steps of a second: Python handles Ctrl-C
        only between them, and a run may take minutes.)"""
        while True:
            ready, _ = self._ray.wait(pending, num_returns=1, timeout=1.0)
            if ready:
                return ready[0]

    def result(self, ref: Any) -> dict[str, Any]:
        from ray.exceptions import RayError, RayTaskError

        try:
            return self._ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            raise RunFailed(_one_line(cause) if cause is not None else _one_line(exc)) from None
        except RayError as exc:
            raise RunFailed(_one_line(exc)) from None


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, LeasewiseError) else text
