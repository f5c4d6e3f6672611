"""How long the overheads of a lease take, and how they are laid out in time.

Suspending a VM writes its memory to disk at `suspend_rate` MB/s (rounded up to whole seconds) plus the
enactment overhead; resuming reads it back at `resume_rate`. With `local` exclusion a host saves one VM
at a time (hosts in parallel); with `global` exclusion the whole lease saves one VM at a time (a shared
filesystem). Suspensions are laid out backwards from the time they must be done by, resumptions forwards
from the time they may start. Migration of suspended leases moves memory images in rounds in which no
host appears twice, each round as long as its largest image takes at the migration bandwidth.

Every rate is the configured (or calibrated) one unless the daemon has learned the host's or the pair's
(`orchestrator.planning.learning`: `rates`, set by the lease scheduler).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from orchestrator.config import SchedulingConfig
from orchestrator.model.lease import Lease
from orchestrator.model.timeutil import ZERO, ceil_seconds
from orchestrator.planning.learning import NO_LEARNED_RATES, RESUME, SUSPEND, LearnedRates

#: one entry of a suspension/resumption layout: [start, end) and host -> vnodes handled then
Step = tuple[datetime, datetime, dict[str, list[int]]]


class Overheads:
    def __init__(self, config: SchedulingConfig):
        self.config = config
        self.rates: LearnedRates = NO_LEARNED_RATES
        self._vm_times: dict[tuple[float, float], timedelta] = {}   # (memory, rate) -> time, worked out once

    # -- per VM ------------------------------------------------------------------------------------------
    def _per_vm(self, memory_mib: float, rate: float, override: timedelta | None) -> timedelta:
        if override is not None:
            return override
        key = (memory_mib, rate)
        time = self._vm_times.get(key)
        if time is None:
            if len(self._vm_times) > 4096:
                self._vm_times.clear()
            time = self._vm_times[key] = ceil_seconds(memory_mib / rate)
        return time

    def suspend_vm_time(self, memory_mib: float, host: str | None = None) -> timedelta:
        """On `host` (None: on whichever host is slowest)."""
        rate = self.rates.host(SUSPEND, host, self.config.suspend_rate)
        return self._per_vm(memory_mib, rate, self.config.override_suspend_time)

    def resume_vm_time(self, memory_mib: float, host: str | None = None) -> timedelta:
        rate = self.rates.host(RESUME, host, self.config.resume_rate)
        return self._per_vm(memory_mib, rate, self.config.override_resume_time)

    # -- whole lease estimates -------------------------------------------------------------------------------
    def estimate_suspend(self, lease: Lease) -> timedelta:
        """Upper bound of the time to suspend the whole lease: every VM in turn (the worst layout)."""
        return self._every_vm(lease, self.suspend_vm_time)

    def estimate_resume(self, lease: Lease) -> timedelta:
        return self._every_vm(lease, self.resume_vm_time)

    def _every_vm(self, lease: Lease, per_vm: Callable[[float], timedelta]) -> timedelta:
        overhead = self.config.enactment_overhead
        alike = lease.request.uniform
        if alike is not None:   # (a 64-node lease usually has one node size: one product)
            return (per_vm(alike.memory) + overhead) * lease.numnodes
        return sum((per_vm(n.memory) + overhead for n in lease.request.nodes), ZERO)

    def shutdown_time(self, lease: Lease) -> timedelta:
        return self.config.shutdown_time + self.config.enactment_overhead * lease.numnodes

    def scheduling_threshold(self, lease: Lease, resuming: bool) -> timedelta:
        """Shortest run worth starting: the overheads it will cost, times (1 + factor), so a lease is not
        started only to be suspended at once (thrashing)."""
        if self.config.force_scheduling_threshold is not None:
            return self.config.force_scheduling_threshold
        safe = self.estimate_suspend(lease)
        if resuming:
            safe += self.estimate_resume(lease)
        return safe + safe * self.config.scheduling_threshold_factor

    def transfer_time(self, memory_mib: float, source: str | None = None, destination: str | None = None
                      ) -> timedelta:
        """A memory image's move between two hosts (the configured bandwidth unless the pair's is learned)."""
        rate = self.config.migration_bandwidth
        if source is not None and destination is not None:
            rate = self.rates.move(source, destination, rate)
        return ceil_seconds(memory_mib / rate)

    def live_bandwidth(self, source: str, destination: str) -> float:
        """MiB/s a live migration between the pair is planned at: learned, else configured or calibrated,
        never above `live_migration_bandwidth_limit`."""
        rate = self.rates.live(source, destination, self.config.live_bandwidth)
        limit = self.config.live_migration_bandwidth_limit
        return rate if limit is None else min(rate, limit)

    def slowest_live_bandwidth(self, source: str, destinations: Iterable[str]) -> float:
        """The slowest pair from `source` to any of `destinations`: what a live migration is planned at
        before its destination is chosen."""
        return min((self.live_bandwidth(source, d) for d in destinations if d != source),
                   default=self.live_bandwidth(source, source))

    def estimate_migration(self, lease: Lease, nodes: dict[int, str]) -> timedelta:
        """Time to move every memory image off its current host, the busiest source being the bottleneck."""
        if self.config.migration != "yes":
            return ZERO
        per_host: dict[str, float] = {}
        for vnode, host in nodes.items():
            per_host[host] = per_host.get(host, 0) + lease.request.nodes[vnode].memory
        return self.transfer_time(max(per_host.values())) if per_host else ZERO

    # -- layouts ---------------------------------------------------------------------------------------------
    def suspend_layout(self, lease: Lease, nodes: dict[int, str], by: datetime) -> list[Step]:
        """Suspension steps ending by `by`, laid out backwards, earliest first."""
        steps = self._layout(lease, nodes, by, backward=True, per_vm=self.suspend_vm_time, kind=SUSPEND)
        return sorted(steps, key=lambda s: s[0])

    def resume_layout(self, lease: Lease, nodes: dict[int, str], at: datetime) -> list[Step]:
        """Resumption steps starting at `at`, laid out forwards, earliest first."""
        steps = self._layout(lease, nodes, at, backward=False, per_vm=self.resume_vm_time, kind=RESUME)
        return sorted(steps, key=lambda s: s[0])

    def _layout(self, lease: Lease, nodes: dict[int, str], time: datetime, backward: bool,
                per_vm: Callable[[float, str], timedelta], kind: str) -> list[Step]:
        """`per_vm`: a VM's time on a host by its memory; `kind`: the rate it reads (with none learned per
        host, the time depends on the memory alone and is asked once per VM size: a big lease has hundreds)."""
        overhead = self.config.enactment_overhead
        same_everywhere = not self.rates.knows(kind)
        times: dict[float, timedelta] = {}
        requests = lease.request.nodes
        steps: list[list] = []
        if self.config.suspendresume_exclusion == "global":
            t = time
            for vnode in sorted(nodes):
                op = per_vm(requests[vnode].memory, nodes[vnode]) + overhead
                if backward:
                    steps.append([t - op, t, {nodes[vnode]: [vnode]}])
                    t -= op
                else:
                    steps.append([t, t + op, {nodes[vnode]: [vnode]}])
                    t += op
            return [tuple(s) for s in steps]  # type: ignore[misc]
        # local: each host handles its own VMs one after another, hosts in parallel
        by_host: dict[str, list[int]] = {}
        for vnode in sorted(nodes):
            host = nodes[vnode]
            held = by_host.get(host)
            if held is None:
                by_host[host] = [vnode]
            else:
                held.append(vnode)
        grouped: dict[tuple[datetime, datetime], dict[str, list[int]]] = {}
        uniform = lease.request.uniform
        if same_everywhere and uniform is not None and len(by_host) == len(nodes) and by_host:
            # (one VM per host, all of one size: every host's one step takes the same span, so the grouping
            # below would make one step of `by_host` itself; a big lease has hundreds of VMs)
            op = per_vm(uniform.memory, next(iter(by_host)))
            grouped[(time - op, time) if backward else (time, time + op)] = by_host
            by_host = {}
        for host, vnodes in by_host.items():
            t = time
            for vnode in vnodes:
                memory = requests[vnode].memory
                known = times.get(memory) if same_everywhere else None
                if known is None:
                    known = per_vm(memory, host)
                    if same_everywhere:
                        times[memory] = known
                span = (t - known, t) if backward else (t, t + known)
                t = span[0] if backward else span[1]
                grouped.setdefault(span, {}).setdefault(host, []).append(vnode)
        for (start, end), mapping in grouped.items():
            count = sum(len(v) for v in mapping.values())
            if backward:
                start -= overhead * count
            else:
                end += overhead * count
            steps.append([start, end, mapping])
        # the enactment overhead is paid by one enactment agent: steps must not overlap
        if backward:
            steps.sort(key=lambda s: s[1], reverse=True)
            for prev, cur in zip(steps, steps[1:]):
                if cur[1] > prev[0]:
                    shift = cur[1] - prev[0]
                    cur[0] -= shift
                    cur[1] -= shift
        else:
            steps.sort(key=lambda s: s[0])
            for prev, cur in zip(steps, steps[1:]):
                if cur[0] < prev[1]:
                    shift = prev[1] - cur[0]
                    cur[0] += shift
                    cur[1] += shift
        return [tuple(s) for s in steps]  # type: ignore[misc]

    def migration_rounds(self, lease: Lease, moves: dict[int, tuple[str, str]]) -> list[dict[int, tuple[str, str]]]:
        """Group image transfers in rounds in which no host is a source or destination twice."""
        pending = dict(sorted(moves.items()))
        rounds = []
        while pending:
            busy: set[str] = set()
            current = {}
            for vnode, (src, dst) in pending.items():
                if src not in busy and dst not in busy:
                    current[vnode] = (src, dst)
                    busy.update((src, dst))
            for vnode in current:
                del pending[vnode]
            rounds.append(current)
        return rounds
