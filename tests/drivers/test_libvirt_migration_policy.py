"""The live-migration policy of the libvirt driver, as pure functions (drivers/libvirt/migration.py): no
libvirt needed. When the completion timeout acts, how libvirt's job
statistics become progress samples and a report, and how the outcome is judged."""

import pytest

from drivers.base import MigrationProgress
from drivers.libvirt.migration import (
    migration_outcome,
    migration_report,
    progress_from_job_stats,
    should_abort,
    should_force,
)

MIB = 2**20


@pytest.mark.parametrize(
    ("elapsed", "on_timeout", "acted", "abort", "force"),
    [
        (59.0, "abort", False, False, False),   # not past the timeout yet
        (60.0, "abort", False, False, False),   # at it is not past it
        (61.0, "abort", False, True, False),
        (61.0, "force", False, False, True),
        (61.0, "abort", True, False, False),    # acted once already: never twice
        (61.0, "force", True, False, False),
    ],
)
def test_the_timeout_acts_once_past_the_timeout_as_told(elapsed, on_timeout, acted, abort, force):
    assert should_abort(elapsed, 60.0, on_timeout, acted) is abort
    assert should_force(elapsed, 60.0, on_timeout, acted) is force


@pytest.mark.parametrize(
    ("on_destination", "on_source", "action", "outcome"),
    [
        (True, False, None, "completed"),
        (True, False, "force", "forced"),
        (True, False, "abort", "completed"),    # the abort came too late: it moved all the same
        (True, None, None, "failed"),           # the source could not be asked: not known to have moved
        (True, True, None, "failed"),           # running on both is no success
        (False, True, "abort", "aborted"),
        (None, True, None, "failed"),
        (False, True, "force", "failed"),
    ],
)
def test_the_outcome_is_judged_by_where_the_domain_runs(on_destination, on_source, action, outcome):
    assert migration_outcome(on_destination, on_source, action) == outcome


def test_job_stats_become_a_progress_sample_with_the_dirty_rate_in_bytes():
    stats = {"memory_total": 512 * MIB, "memory_processed": 300 * MIB, "memory_remaining": 220 * MIB,
             "memory_dirty_rate": 1000, "memory_page_size": 4096, "memory_iteration": 2}
    sample = progress_from_job_stats(stats, 3.5, 120.0)
    assert sample == MigrationProgress(3.5, 512 * MIB, 300 * MIB, 220 * MIB, 1000 * 4096.0, 2, 120.0)
    assert progress_from_job_stats({"type": 2}, 1.0, 100.0) is None   # no memory figures yet (or any more)


def test_the_report_prefers_completed_job_stats_then_the_last_sample_then_our_clock():
    stats = {"time_elapsed": 4200, "downtime": 35, "memory_iteration": 3, "memory_processed": 700 * MIB,
             "memory_total": 530 * MIB}
    report = migration_report("vm", "a", "b", "completed", elapsed_s=9.0, stats=stats, memory_total=512 * MIB)
    assert (report.success, report.total_seconds, report.downtime_ms, report.iterations) == (True, 4.2, 35.0, 3)
    assert (report.bytes_transferred, report.memory_total) == (700 * MIB, 512 * MIB)   # the guest's, not QEMU's

    last = MigrationProgress(2.0, 512 * MIB, 400 * MIB, 200 * MIB, 0.0, 2, 300.0)
    aborted = migration_report("vm", "a", "b", "aborted", elapsed_s=2.5, error="timed out", samples=(last,))
    assert (aborted.success, aborted.outcome, aborted.error) == (False, "aborted", "timed out")
    assert (aborted.total_seconds, aborted.iterations, aborted.bytes_transferred) == (2.5, 2, 400 * MIB)
    assert aborted.samples == (last,)


def test_block_migration_local_disks_are_the_unshared_ones_with_their_devices():
    from drivers.base import DiskSpec, VMSpec  # noqa: PLC0415
    from drivers.domain_xml import render_domain_xml  # noqa: PLC0415
    from drivers.libvirt.block_migration import LocalDisk, local_disks  # noqa: PLC0415

    spec = VMSpec("lw-1-0", 1, 512, disk_image="/local/vms/lw-1-0.qcow2", seed_image="/local/vms/lw-1-0-seed.iso",
                  disk=DiskSpec(base="/local/img/deb.qcow2"), kernel="/local/img/vmlinuz")
    xml = render_domain_xml(spec, "qemu")
    assert local_disks(xml, lambda path: False) == [LocalDisk("/local/vms/lw-1-0.qcow2", "vda", False),
                                                     LocalDisk("/local/vms/lw-1-0-seed.iso", "vdb", True)]
    assert local_disks(xml, lambda path: path.startswith("/local/")) == []


def test_block_migration_report_counts_the_disk_bytes_copied():
    from drivers.libvirt.migration import migration_report  # noqa: PLC0415

    report = migration_report("vm", "a", "b", "completed", elapsed_s=3.0,
                              stats={"time_elapsed": 2500, "memory_processed": 10 << 20, "disk_processed": 300 << 20})
    assert (report.disk_bytes, report.bytes_transferred, report.total_seconds) == (300 << 20, 10 << 20, 2.5)
    assert migration_report("vm", "a", "b", "completed", elapsed_s=1.0).disk_bytes == 0


def test_block_migration_disk_bytes_come_from_the_samples_when_the_completed_statistics_lack_them():
    from drivers.libvirt.migration import migration_report, progress_from_job_stats  # noqa: PLC0415

    running = {"memory_total": 512 << 20, "memory_processed": 64 << 20, "disk_processed": 120 << 20}
    sample = progress_from_job_stats(running, 1.5, 300.0)
    assert sample.disk_processed == 120 << 20
    report = migration_report("vm", "a", "b", "completed", elapsed_s=3.0, stats={"time_elapsed": 3000},
                              samples=(sample,))
    assert report.disk_bytes == 120 << 20
