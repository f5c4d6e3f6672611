"""Pre-copy live migration through libvirt, with its policy as pure functions beside it (as Nova's
virt/libvirt/migration.py): when the completion timeout acts, how the job's statistics become a report, and
how the outcome is judged. How the allowed downtime is raised is drivers/downtime.py's, shared with the
planner's model.

`migrate3` (`migrateToURI3` when peer-to-peer) runs in a worker thread while the calling thread samples the
job's statistics, steps the downtime up and enforces the timeout. A migration is judged by where the domain
really runs afterwards, on both hosts, not by whether `migrate3` raised: it can fail after the guest already
moved, or return while the source still runs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from drivers.base import (
    MigrationProgress,
    MigrationReport,
    OnTimeout,
    ProgressCallback,
    validate_migration_args,
)
from drivers.downtime import DowntimeSchedule, allowed_at
from drivers.errors import DriverError, MigrationFailed
from drivers.inventory import HostConfig

from .block_migration import BlockMigration, local_disks
from .connection import Connections, error_text
from .lifecycle import Lifecycle
from .transport import peer_uri

log = logging.getLogger(__name__)

Outcome = Literal["completed", "forced", "aborted", "failed"]


# -- the policy, as pure functions ------------------------------------------------------------------------

def should_abort(elapsed_s: float, timeout_s: float, on_timeout: OnTimeout, acted: bool) -> bool:
    """Whether to cancel the job now: past the completion timeout, told to abort, and not acted on yet."""
    return on_timeout == "abort" and not acted and elapsed_s > timeout_s


def should_force(elapsed_s: float, timeout_s: float, on_timeout: OnTimeout, acted: bool) -> bool:
    """Whether to pause the guest now so the job completes: past the completion timeout, told to force,
    and not acted on yet."""
    return on_timeout == "force" and not acted and elapsed_s > timeout_s


def migration_outcome(on_destination: bool | None, on_source: bool | None, action: OnTimeout | None) -> Outcome:
    """How a migration ended, from where the domain runs afterwards (None: that host could not be asked)
    and what the timeout did. Only a domain known to run on the destination and known not to run on the
    source has moved."""
    if on_destination and on_source is False:
        return "forced" if action == "force" else "completed"
    return "aborted" if action == "abort" else "failed"


def progress_from_job_stats(stats: Mapping[str, Any], elapsed_s: float, max_downtime_ms: float
                            ) -> MigrationProgress | None:
    """One progress sample from libvirt's job statistics; None when they carry no memory figures (a job
    being set up or cancelled)."""
    if not stats.get("memory_total"):
        return None
    page = stats.get("memory_page_size", 4096)
    return MigrationProgress(
        elapsed_seconds=elapsed_s,
        memory_total=int(stats.get("memory_total", 0)),
        memory_processed=int(stats.get("memory_processed", 0)),
        memory_remaining=int(stats.get("memory_remaining", 0)),
        dirty_rate_bytes_s=float(stats.get("memory_dirty_rate", 0)) * page,
        iteration=int(stats.get("memory_iteration", 0)),
        max_downtime_ms=max_downtime_ms,
        disk_processed=int(stats.get("disk_processed", 0)),
    )


def migration_report(
    vm: str, source: str, destination: str, outcome: Outcome, *, elapsed_s: float, error: str = "",
    stats: Mapping[str, Any] | None = None, memory_total: int = 0, samples: tuple[MigrationProgress, ...] = (),
) -> MigrationReport:
    """The report of one migration from the completed job's statistics (libvirt's names), falling back on
    the last progress sample (e.g. after an abort there are no completed-job statistics) and on our own
    clock."""
    figures = dict(stats or {})
    if samples:
        figures.setdefault("memory_iteration", samples[-1].iteration)
        figures.setdefault("memory_processed", samples[-1].memory_processed)
    return MigrationReport(
        vm=vm, source=source, destination=destination, success=outcome in ("completed", "forced"),
        total_seconds=figures.get("time_elapsed", elapsed_s * 1000.0) / 1000.0,
        downtime_ms=float(figures.get("downtime", 0.0)),
        iterations=int(figures.get("memory_iteration", 0)),
        bytes_transferred=int(figures.get("memory_processed", figures.get("data_processed", 0))),
        # (the completed job's statistics, taken from the destination after a peer-to-peer migration, may
        # lack the disk's: the last sample has them, the mirror being in sync from before memory moves)
        disk_bytes=max(int(figures.get("disk_processed", 0)), max((s.disk_processed for s in samples), default=0)),
        # the guest's memory (as base.py defines it), not QEMU's total, which adds device memory
        memory_total=int(memory_total or figures.get("memory_total", 0)),
        outcome=outcome,
        error=error,
        samples=samples,
    )


# -- the migration ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Attempt:
    """One migration being tried: what every report and error of it names."""

    vm: str
    source: str
    destination: str
    began: float                                  # time.monotonic()

    def report(self, outcome: Outcome, **details: Any) -> MigrationReport:
        elapsed = time.monotonic() - self.began
        return migration_report(self.vm, self.source, self.destination, outcome, elapsed_s=elapsed, **details)

    def failed(self, message: str, outcome: Outcome = "failed", **details: Any) -> MigrationFailed:
        return MigrationFailed(f"migrate {self.vm} {self.source} -> {self.destination}: {message}",
                               self.report(outcome, error=message, **details))


class Migrations:
    """migrate and measured_dirty_rate of the libvirt driver."""

    def __init__(self, connections: Connections, lifecycle: Lifecycle, downtime: DowntimeSchedule,
                 poll_interval_s: float, block: BlockMigration):
        self._connections = connections
        self._block = block
        self._lifecycle = lifecycle
        self._downtime = downtime
        self._poll_interval_s = poll_interval_s

    def migrate(
        self,
        vm: str,
        dst_host: str,
        max_downtime_ms: float = 300.0,
        bandwidth_mib_s: float | None = None,
        timeout_s: float = 600.0,
        on_timeout: OnTimeout = "abort",
        progress: ProgressCallback | None = None,
    ) -> MigrationReport:
        lv = self._connections.libvirt
        validate_migration_args(max_downtime_ms, bandwidth_mib_s, timeout_s, on_timeout)
        dst_cfg = self._connections.host_config(dst_host)
        src_host = self._lifecycle.find(vm)
        src_cfg = self._connections.host_config(src_host)
        attempt = _Attempt(vm, src_host, dst_host, time.monotonic())

        if src_host == dst_host:
            raise attempt.failed(f"{vm} is already on {dst_host}")
        if not self._lifecycle.active_on(src_host, vm):
            raise attempt.failed(f"{vm} is not running on {src_host}")
        try:
            self._connections.call(dst_host, "connect", lambda c: c)   # (the destination answers)
            src_conn = self._connections.call(src_host, "connect", lambda c: c)
            dom = src_conn.lookupByName(vm)
            memory_total = int(dom.info()[1]) * 1024
            xml = dom.XMLDesc(0)
            disks = disk_sources(xml)
        except (DriverError, lv.libvirtError) as exc:
            raise attempt.failed(str(exc)) from exc
        local = local_disks(xml, lambda d: src_cfg.is_shared(d) and dst_cfg.is_shared(d))
        made: list[str] = []
        if local:
            # a block migration: the overlay goes with the memory, on the base image the destination holds
            try:
                with self._connections.operation():   # (the disks' copies: see Connections.operation)
                    made = self._block.prepare(vm, src_host, dst_host, local)
            except DriverError as exc:
                raise attempt.failed(f"the destination cannot take {vm}'s disks: {exc}") from exc

        flags, params = self._flags_and_params(src_cfg, dst_cfg, bandwidth_mib_s)
        copied = [d.dev for d in local if not d.readonly]
        if copied:
            flags |= lv.VIR_MIGRATE_NON_SHARED_INC
            params[lv.VIR_MIGRATE_PARAM_MIGRATE_DISKS] = copied
        if disks:
            # Every disk is on storage the inventory says both hosts share. libvirt calls a migration
            # "unsafe" unless the disks use cache=none or it recognises the file system as shared (NFS,
            # GlusterFS, ...); a shared directory it cannot recognise (the lab's) is the operator's word.
            flags |= lv.VIR_MIGRATE_UNSAFE
        steps = self._downtime.points(max_downtime_ms, memory_total)
        downtime = allowed_at(steps, 0.0)
        self._set_downtime(dom, downtime)

        outcome: dict[str, Any] = {}

        def run() -> None:
            call = self._connections.call
            try:
                # the migration's own call waits on connections of its own, the monitor's calls below on the
                # shared ones: on a link gone silent each is then the only call its connection wakes
                with self._connections.operation():
                    migrating = call(src_host, f"look up {vm}", lambda c: c.lookupByName(vm), vm)
                    if flags & lv.VIR_MIGRATE_PEER2PEER:
                        # virDomainMigrate3 refuses PEER2PEER; the peer-to-peer form of the same call takes
                        # the destination's libvirt URI, which the source libvirtd connects to itself (over
                        # the same transport, with the source host's own key or certificate: `peer_uri`)
                        migrating.migrateToURI3(peer_uri(dst_cfg), params, flags)
                    else:
                        migrating.migrate3(call(dst_host, "connect", lambda c: c), params, flags)
                outcome["returned"] = True
            except BaseException as exc:  # reported to the monitoring thread, which decides
                outcome["error"] = exc

        worker = threading.Thread(target=run, name=f"leasewise-migrate-{vm}", daemon=True)
        log.info("migrating %s %s -> %s (flags %#x, params %s)", vm, src_host, dst_host, flags, params)
        worker.start()

        # -- monitor until the worker returns --
        samples: list[MigrationProgress] = []
        action: OnTimeout | None = None
        while True:
            worker.join(self._poll_interval_s)
            if not worker.is_alive():
                break
            elapsed = time.monotonic() - attempt.began
            sample = self._sample(dom, elapsed, downtime)
            if sample is not None:
                samples.append(sample)
                if progress is not None:
                    try:
                        progress(sample)
                    except Exception:  # a broken display must not leave a migration unattended
                        log.exception("migration progress callback failed")
            wanted = allowed_at(steps, elapsed)
            if wanted != downtime:
                log.info("raising max downtime of %s to %.0f ms after %.0f s", vm, wanted, elapsed)
                self._set_downtime(dom, wanted)
                downtime = wanted
            if should_abort(elapsed, timeout_s, on_timeout, acted=action is not None):
                action = "abort"
                self._abort(dom, vm, timeout_s)
            elif should_force(elapsed, timeout_s, on_timeout, acted=action is not None):
                action = "force"
                self._force(dom, vm, timeout_s)

        # -- judge by where the domain runs --
        error = outcome.get("error")
        if error is not None:
            log.info("migrate3 of %s raised: %s", vm, error)
        on_dst = self._lifecycle.active_on(dst_host, vm)
        on_src = self._lifecycle.active_on(src_host, vm)
        if on_dst and action == "force":
            self._resume_if_paused(dst_host, vm)
        stats = self._completed_stats(src_host, dst_host, vm, dom)
        ended = migration_outcome(on_dst, on_src, action)
        if ended in ("completed", "forced"):
            with self._connections.operation():
                self._block.remove(src_host, [d.path for d in local])   # (libvirt leaves the source's copies)
            return attempt.report(ended, stats=stats, memory_total=memory_total, samples=tuple(samples))
        if on_dst is False:   # (not where it would run: what was made for it there goes)
            with self._connections.operation():
                self._block.remove(dst_host, made)

        # Failed: make sure the guest runs where it was.
        self._resume_if_paused(src_host, vm)
        still = self._lifecycle.active_on(src_host, vm)
        reason = error_text(error) if error is not None else "the domain did not end up running on the destination"
        if action == "abort":
            reason = f"not complete after {timeout_s:g} s; aborted ({reason})"
        if not still:
            reason += f"; WARNING: {vm} is not running on {src_host} either"
        raise attempt.failed(reason, ended, stats=stats, memory_total=memory_total, samples=tuple(samples))

    def _flags_and_params(self, src_cfg: HostConfig, dst_cfg: HostConfig, bandwidth_mib_s: float | None
                          ) -> tuple[int, dict[str, Any]]:
        lv = self._connections.libvirt
        flags = lv.VIR_MIGRATE_LIVE | lv.VIR_MIGRATE_PERSIST_DEST | lv.VIR_MIGRATE_UNDEFINE_SOURCE
        if src_cfg.is_remote:
            # The source libvirtd talks to the destination itself, so a client crash cannot strand it
            # (the destination URI in the inventory must then be reachable from the source host).
            flags |= lv.VIR_MIGRATE_PEER2PEER
        params: dict[str, Any] = {}
        if dst_cfg.migration_uri:
            params[lv.VIR_MIGRATE_PARAM_URI] = dst_cfg.migration_uri
        if bandwidth_mib_s is not None:
            params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] = max(1, math.ceil(bandwidth_mib_s))
        return flags, params

    def _set_downtime(self, dom: Any, downtime_ms: float) -> None:
        try:
            dom.migrateSetMaxDowntime(max(1, round(downtime_ms)), 0)
        except self._connections.libvirt.libvirtError as exc:
            log.warning("cannot set the max downtime of %s: %s", dom.name(), error_text(exc))

    def _sample(self, dom: Any, elapsed: float, downtime: float) -> MigrationProgress | None:
        lv = self._connections.libvirt
        try:
            stats = dom.jobStats(0)
        except lv.libvirtError as exc:
            log.debug("jobStats of %s: %s", dom.name(), error_text(exc))
            return None
        if not stats or stats.get("type", 0) == lv.VIR_DOMAIN_JOB_NONE:
            return None
        return progress_from_job_stats(stats, elapsed, downtime)

    def _abort(self, dom: Any, vm: str, timeout_s: float) -> None:
        log.warning("migration of %s not complete after %g s: aborting", vm, timeout_s)
        try:
            dom.abortJob()
        except self._connections.libvirt.libvirtError as exc:  # the job may have just finished on its own
            log.warning("timeout action abort on %s failed: %s", vm, error_text(exc))

    def _force(self, dom: Any, vm: str, timeout_s: float) -> None:
        log.warning("migration of %s not complete after %g s: pausing it to force completion", vm, timeout_s)
        try:
            dom.suspend()
        except self._connections.libvirt.libvirtError as exc:  # the job may have just finished on its own
            log.warning("timeout action force on %s failed: %s", vm, error_text(exc))

    def _resume_if_paused(self, host: str, vm: str) -> None:
        lv = self._connections.libvirt

        def resume(conn: Any) -> None:
            dom = self._connections.domain_or_none(conn, vm)
            if dom is not None and dom.state()[0] == lv.VIR_DOMAIN_PAUSED:
                log.info("resuming paused %s on %s", vm, host)
                dom.resume()

        try:
            self._connections.call(host, f"resume {vm}", resume, vm)
        except DriverError as exc:
            log.warning("could not resume %s on %s: %s", vm, host, exc)

    def _completed_stats(self, src_host: str, dst_host: str, vm: str, dom: Any) -> dict:
        """The finished job's statistics: from the source, else the destination (libvirt hands them over
        when the source domain is gone after a successful migration)."""
        lv = self._connections.libvirt
        # (kept: a daemon that finds the migration done after a restart reads them too, completed_migration)
        flag = lv.VIR_DOMAIN_JOB_STATS_COMPLETED | lv.VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED
        try:
            stats = dom.jobStats(flag)
            if stats and stats.get("type", 0) != lv.VIR_DOMAIN_JOB_NONE:
                return stats
        except lv.libvirtError as exc:
            log.debug("completed jobStats of %s on %s: %s", vm, src_host, error_text(exc))
        try:
            stats = self._connections.call(dst_host, f"job stats of {vm}",
                                           lambda c: c.lookupByName(vm).jobStats(flag), vm)
            if stats and stats.get("type", 0) != lv.VIR_DOMAIN_JOB_NONE:
                return stats
        except DriverError as exc:
            log.debug("completed jobStats of %s on %s: %s", vm, dst_host, exc)
        return {}

    def completed_migration(self, vm: str, source: str) -> MigrationReport | None:
        """The completed job statistics of the migration that brought `vm` where it runs (kept by libvirtd
        there until another job; read without discarding them)."""
        lv = self._connections.libvirt
        try:
            host = self._lifecycle.find(vm)
            stats = self._connections.call(host, f"job stats of {vm}", lambda c: c.lookupByName(vm).jobStats(
                lv.VIR_DOMAIN_JOB_STATS_COMPLETED | lv.VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED), vm)
        except DriverError as exc:
            log.debug("no completed job statistics of %s: %s", vm, exc)
            return None
        incoming = (lv.VIR_DOMAIN_JOB_OPERATION_MIGRATION_IN, lv.VIR_DOMAIN_JOB_OPERATION_MIGRATION_OUT)
        if (not stats or stats.get("type", lv.VIR_DOMAIN_JOB_NONE) == lv.VIR_DOMAIN_JOB_NONE
                or stats.get("operation", incoming[0]) not in incoming or not stats.get("time_elapsed")):
            return None
        return migration_report(vm, source, host, "completed", elapsed_s=0.0, stats=stats)

    def start_dirty_rate_measurement(self, vm: str, seconds: int) -> None:
        """Start libvirt's dirty-rate calculation (`virsh domdirtyrate-calc`) over `seconds`, by page
        sampling: the dirty-bitmap mode crashes QEMU 7.2 under TCG, and sampling works on KVM as well."""
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 60:
            raise ValueError(f"dirty-rate measurement must last 1 to 60 whole seconds (got {seconds!r})")
        host = self._lifecycle.find(vm)
        self._connections.call(host, f"dirty rate of {vm}",
                               lambda conn: conn.lookupByName(vm).startDirtyRateCalc(seconds, 0), vm, question=True)

    def measured_dirty_rate(self, vm: str) -> float | None:
        """MiB/s from libvirt's last dirty-rate calculation, if one has finished (QEMU reports MiB/s as
        'megabytes_per_second')."""
        lv = self._connections.libvirt
        host = self._lifecycle.find(vm)

        def read(conn: Any) -> dict:
            stats = conn.domainListGetStats([conn.lookupByName(vm)], lv.VIR_DOMAIN_STATS_DIRTYRATE, 0)
            return stats[0][1] if stats else {}

        stats = self._connections.call(host, f"dirty rate of {vm}", read, vm, question=True)
        measured = stats.get("dirtyrate.calc_status") == lv.VIR_DOMAIN_DIRTYRATE_MEASURED
        if not measured or "dirtyrate.megabytes_per_second" not in stats:
            return None
        return float(stats["dirtyrate.megabytes_per_second"])


def disk_sources(domain_xml: str) -> list[str]:
    """The files a domain's disks open (its overlay, its seed, a disk image), in the XML's order."""
    root = ET.fromstring(domain_xml)
    return [file for src in root.findall("devices/disk/source") if (file := src.get("file"))]
