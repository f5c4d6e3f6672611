"""A host that loses its power while leases run (issue 31; the lab tier's tests/lab/test_power_lab.py does it to
a real libvirtd and its QEMU processes): the daemon notices within `[daemon] host_timeout`, gives the host up,
requeues the best-effort leases that ran there (they start again from their image, elsewhere), fails the
advance reservations it cannot place again (their owners told by their `ended` notice, here through a real
SMTP server on loopback), plans nothing on the host until it answers, and starts nothing twice when it
comes back: the VMs it kept defined (shut off by the power cut) are discarded. `report` says what it cost.

The simulated driver's `power_lost` makes the cut: at `host_down_at` the host's VMs stop where they are."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from orchestrator.analysis.report import build_report
from orchestrator.config import config_from_dict
from orchestrator.model.lease import LeaseType
from orchestrator.state.cluster import Cluster
from orchestrator.state.store import Store
from tests.runtime.test_daemon import driver_for, leases, make_store, request, submit
from tests.runtime.test_notices import smtp  # noqa: F401  (the fixture: an SMTP server on loopback)
from tests.runtime.test_silent_hosts import names, steps
from tests.support.times import T0

MIN = timedelta(minutes=1)


def config(smtp_port: int | None = None, host_timeout: str = "3m"):
    settings: dict = {"daemon": {"driver": "simulated", "poll_interval": "60s", "host_timeout": host_timeout}}
    if smtp_port is not None:
        settings["notify"] = {"notifiers": ["email"], "before_end": [], "at_end": True,
                              "email": {"smtp_host": "127.0.0.1", "smtp_port": smtp_port,
                                        "sender": "leasewise@lab.example.org", "domain": "example.org",
                                        "timeout": "5s"}}
    return config_from_dict(settings)


def host_of(path: Path, lease_id: int) -> list[str]:
    """The hosts of the lease's last VM reservation."""
    return [hosts for kind, _, _, hosts in leases(path)[lease_id]["plan"] if kind == "vm"][-1]


def events(path: Path, kind: str, lease_id: int | None = None) -> list[dict]:
    with Store.open(path) as store:
        return [e.detail for e in store.events(lease_id=lease_id) if e.kind == kind]


def test_power_loss_requeues_a_best_effort_lease_which_runs_again_elsewhere_and_once(tmp_path):
    path, cfg = make_store(tmp_path, n=3), config()
    sim = tmp_path / "hosts.json"
    lease = submit(path, cfg, request(LeaseType.BEST_EFFORT, 60))
    steps(path, cfg, driver_for(path, sim), 0)
    (lost,) = host_of(path, lease)
    vm = f"lw-{lease}-0"
    driver = driver_for(path, sim, host_down_at={lost: T0 + 5 * MIN}, host_up_at={lost: T0 + 30 * MIN},
                        power_lost={lost})
    steps(path, cfg, driver, 5, 7)
    assert leases(path)[lease]["state"] == "active"                 # silent for 2 minutes: it waits
    notes = steps(path, cfg, driver, 8, 9)
    assert any(f"host {lost} has not answered for 3 min (lost)" in n for n in notes), notes
    assert leases(path)[lease]["state"] == "active"                 # again, elsewhere, from its image
    (elsewhere,) = host_of(path, lease)
    assert elsewhere != lost and names(driver, elsewhere) == [vm]
    (requeued,) = events(path, "host-lost", lease)
    assert requeued["outcome"] == "requeued" and requeued["lost_work_s"] == 8 * 60
    assert "starts again from its image" in requeued["detail"]

    # nothing is planned on the lost host meanwhile, by the daemon or by anyone else's submission
    with Store.open(path) as store, store.transaction():
        cluster = Cluster(store, cfg)
        others = [cluster.submit(request(LeaseType.BEST_EFFORT, 10), T0 + 10 * MIN).id for _ in range(2)]
        cluster.save(T0 + 10 * MIN)
    steps(path, cfg, driver, 10, 11)
    assert all(lost not in host_of(path, other) for other in others)

    # it comes back with its VM defined, shut off by the power cut: discarded, not started again
    notes = steps(path, cfg, driver, 30, 31)
    assert any(f"lease {lease}: discarded {vm}, which {lost} kept (shutoff): not started again" in n
               for n in notes), notes
    assert names(driver, lost) == [] and names(driver, elsewhere) == [vm]
    (back,) = events(path, "host-up")
    assert back["host"] == lost and back["down_s"] == 25 * 60   # (from when it went silent)
    with Store.open(path) as store:
        assert store.get_meta("down_hosts") == {}
        report = build_report(store.events())
    (row,) = report.host_losses
    assert (row.host, row.leases, row.lost_work_s) == (lost, {lease: "requeued"}, 8 * 60)
    assert (row.silent_since, row.lost_at, row.back_at) == (T0 + 5 * MIN, T0 + 8 * MIN, T0 + 30 * MIN)
    assert json.loads(json.dumps(report.to_json()))["host_losses"][0]["requeued"] == 1


def test_power_loss_fails_the_reservations_it_cannot_place_again_and_tells_their_owners(tmp_path, smtp):  # noqa: F811
    port, inbox = smtp
    path, cfg = make_store(tmp_path, n=2), config(port)
    sim = tmp_path / "hosts.json"
    def ar(minutes: float, nodes: int, start: float, user: str):
        return replace(request(LeaseType.ADVANCE_RESERVATION, minutes, nodes=nodes, start=T0 + start * MIN), user=user)

    running = submit(path, cfg, ar(30, 2, 1, "alice"))
    later_one = submit(path, cfg, ar(20, 1, 60, "bob"))
    later_two = submit(path, cfg, ar(20, 2, 90, "carol"))
    (lost,) = host_of(path, later_one)
    (other,) = {"host1", "host2"} - {lost}
    driver = driver_for(path, sim, host_down_at={lost: T0 + 5 * MIN}, power_lost={lost})
    steps(path, cfg, driver, 0, 1, 2, 5, 8, 9)
    result = leases(path)
    # running on the lost host: its VMs are gone; needing both hosts later: it fits nowhere else
    assert result[running]["state"] == "failed" and result[later_two]["state"] == "failed"
    # one host's worth, later: placed again on the host that is left
    assert result[later_one]["state"] == "scheduled" and host_of(path, later_one) == [other]
    outcomes = {e["outcome"] for e in events(path, "host-lost", running)}
    assert outcomes == {"failed"}
    assert [e["outcome"] for e in events(path, "host-lost", later_one)] == ["re-planned"]
    assert names(driver, other) == []                               # the VM it started there is stopped
    # their owners are told why, once each
    ended = {m["Subject"]: (to, m.get_payload(decode=True).decode()) for to, m in inbox.messages}
    assert set(ended) == {f"leasewise: lease {running} ended (failed)", f"leasewise: lease {later_two} ended (failed)"}
    to, text = ended[f"leasewise: lease {running} ended (failed)"]
    assert to == ["alice@example.org"] and f"host {lost} has not answered for 3 min (lost): its VMs there are gone" in text
    to, text = ended[f"leasewise: lease {later_two} ended (failed)"]
    assert to == ["carol@example.org"] and "it fits on no other host" in text
    with Store.open(path) as store:
        (row,) = build_report(store.events()).host_losses
    assert row.leases == {running: "failed", later_one: "re-planned", later_two: "failed"} and row.back_at is None
