"""Ray, as a sweep uses it: a local instance of its own (`--workers` CPUs) or a running cluster (`--address`),
one task per run, and Ray's own retries and dashboard.

Why Ray: a sweep is many independent, CPU-bound simulations of a few seconds to minutes, which is what Ray's
tasks are for; the same code runs on a laptop (a local instance started and stopped with the sweep) and on a
cluster, with Ray's dashboard to watch it and its fault handling (a task whose worker dies is retried on
another). The leasewise code goes to the workers as a runtime environment (`py_modules`), so workers run
exactly the driver's code, and the workload files go as objects, so a worker needs no copy of them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from types import TracebackType
from collections.abc import MutableMapping
from typing import Any

from orchestrator.experiments.task import simulate_run
from orchestrator.model.errors import LeasewiseError

SWEEP_INSTALL_HINT = "pip install 'leasewise[sweep]'"
#: how often Ray runs a task again whose worker died (a crash, the OOM killer), before the run fails
RETRIES = 3


class EngineError(LeasewiseError):
    """Ray is missing or could not be started or reached."""


#: where Ray looks for a cluster's token when RAY_AUTH_MODE=token, after RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH
DEFAULT_TOKEN_FILE = Path("~/.ray/auth_token")
TOKEN_HELP = ("give the cluster's token as Ray reads it: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=FILE (or "
              "RAY_AUTH_TOKEN=TOKEN, or the token in ~/.ray/auth_token); see docs/ray-cluster.md")


class RunFailed(Exception):
    """A run raised (or its worker died RETRIES + 1 times); the message is the cause, on one line."""


def require_ray() -> None:
    """Refuse at once when Ray is not installed (without importing it: Ray reads its authentication
    settings from the environment as it is imported, and `RayEngine` settles them first)."""
    if importlib.util.find_spec("ray") is None:
        raise EngineError(f"sweep needs Ray, which is not installed: {SWEEP_INSTALL_HINT}")


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
        if self.address is not None:
            use_token_at_hand(os.environ)
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
                refused = token_refused(self.address)
                if refused is not None:
                    raise EngineError(f"--address: Ray at {self.address} refused the connection: {refused}; "
                                      f"{TOKEN_HELP}")
                context = ray.init(address=self.address, **options)
        except EngineError:
            raise
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
            where = f"--address: cannot reach Ray at {self.address}" if self.address else "cannot start Ray"
            raise EngineError(f"{where} ({_one_line(exc)})") from None
        self._ray = ray
        self.dashboard_url = getattr(context, "dashboard_url", None) or None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = self.workers or max(cpus, 1)
        self._task = ray.remote(num_cpus=1, max_retries=RETRIES)(simulate_on_node)
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


def simulate_on_node(*args: Any) -> dict[str, Any]:
    """A run as a Ray task: `simulate_run`, and the Ray node it ran on (the results record it)."""
    import ray

    outcome = simulate_run(*args)
    outcome["node"] = ray.get_runtime_context().get_node_id()
    return outcome


def use_token_at_hand(environ: MutableMapping[str, str]) -> None:
    """Token authentication for a cluster, as `ray start` turns it on: when RAY_AUTH_MODE does not say, and
    a token is at hand where Ray reads one (a cluster that does not check tokens accepts one all the same)."""
    if "RAY_AUTH_MODE" in environ:
        return
    if (environ.get("RAY_AUTH_TOKEN") or environ.get("RAY_AUTH_TOKEN_PATH")
            or DEFAULT_TOKEN_FILE.expanduser().is_file()):
        environ["RAY_AUTH_MODE"] = "token"


def token_refused(address: str) -> str | None:
    """Ray's own answer (its GCS client's, which comes at once), when the cluster at a `host:port` address
    refuses this process's token or its lack of one; None otherwise, and for other addresses (`auto`,
    `ray://`) or a Ray without that client."""
    if "://" in address or ":" not in address:
        return None
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # (Ray's stubs leave its GCS client out)
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    try:
        GcsClient(address=address)
    except AuthenticationError as exc:
        return _one_line(exc).split(". ")[0]
    except Exception:  # (unreachable, or another Ray: `ray.init` says what it says)
        return None
    return None


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, LeasewiseError) else text
