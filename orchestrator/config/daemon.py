"""[daemon]: how `leasewise run` and the lease and host commands reach the store and the hosts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from orchestrator.config.values import read_choice, read_duration, read_integer, set_field, value_kind
from orchestrator.model.errors import ConfigError

DRIVERS = ("simulated", "libvirt")
ON_LOST_VM = ("fail", "requeue")


@dataclass(frozen=True)
class DaemonConfig:
    """How `leasewise run` and the lease/host commands reach the store and the hosts."""

    store: str | None = None                 # SQLite file; default under the XDG data dir
    driver: str = "simulated"                # simulated | libvirt
    inventory: str | None = None             # host inventory (libvirt driver) when hosts come from a file
    poll_interval: timedelta = timedelta(seconds=2)   # how often the daemon looks at the store and the hosts
    on_lost_vm: str = "fail"                 # a VM the plan says runs but is gone: fail the lease or requeue it
    graceful_timeout: timedelta = timedelta(seconds=30)   # shutdown before destroy
    host_timeout: timedelta = timedelta(minutes=5)   # a host silent this long loses its leases (on_lost_vm)
    answer_timeout: timedelta = timedelta(seconds=10)   # a look or a connect waits no longer for a host
    state_dir: str = "/var/lib/libvirt/images/leasewise-state"  # where suspended VMs' memory images go
    dirty_rate_interval: timedelta = timedelta(minutes=5)   # how often a running VM's dirty rate is measured
    dirty_rate_sample: timedelta = timedelta(seconds=5)     # how long one measurement samples the guest
    parallel_operations: int = 8             # operations on the hosts at once (one at a time on each host)

    def __post_init__(self) -> None:
        p = "daemon."
        for name in ("store", "inventory"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(p + name, f"must be a file path (got {value_kind(value)})")
        set_field(self, "driver", read_choice(p + "driver", self.driver, DRIVERS))
        set_field(self, "on_lost_vm", read_choice(p + "on_lost_vm", self.on_lost_vm, ON_LOST_VM))
        for name in ("poll_interval", "graceful_timeout", "host_timeout", "answer_timeout"):
            set_field(self, name, read_duration(p + name, getattr(self, name)))
        if self.poll_interval.total_seconds() <= 0:
            raise ConfigError(p + "poll_interval", "must be greater than zero")
        if not timedelta(seconds=1) <= self.answer_timeout <= timedelta(minutes=10):
            raise ConfigError(p + "answer_timeout",
                              f"must be 1 s to 10 min (got {self.answer_timeout.total_seconds():g} s)")
        for name in ("dirty_rate_interval", "dirty_rate_sample"):
            set_field(self, name, read_duration(p + name, getattr(self, name)))
        sample = self.dirty_rate_sample.total_seconds()
        if sample != int(sample) or not 1 <= sample <= 60:
            raise ConfigError(p + "dirty_rate_sample", f"must be 1 to 60 whole seconds (got {sample:g} s)")
        if not isinstance(self.state_dir, str) or not self.state_dir.startswith("/"):
            raise ConfigError(p + "state_dir", f"must be an absolute path (got {self.state_dir!r})")
        set_field(self, "parallel_operations",
                  read_integer(p + "parallel_operations", self.parallel_operations, minimum=1))
        if self.parallel_operations > 256:
            raise ConfigError(p + "parallel_operations", f"must be at most 256 (got {self.parallel_operations})")
