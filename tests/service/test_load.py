"""Many clients at once against a real `leasewise serve` process (tests/support/load.py): no request is
turned away as busy, every request is answered, and the plan never holds more on a host than it has. The
latency figures are the benchmark's (benchmarks/api.py), not asserted here."""

from __future__ import annotations

from tests.support.load import run_load, summary


def test_concurrent_clients_are_all_answered_and_nothing_is_double_booked(tmp_path):
    result = run_load(tmp_path, clients=12, seconds=8, hosts=4, think=(0.05, 0.3), burst=12)
    assert result.requests() > 50, summary(result)
    assert 75 not in result.errors, summary(result)
    # the only refusals a client may see: cancelling a lease that has already ended
    unexpected = [m for code, messages in result.errors.items() for m in messages
                  if not (m.startswith("cancel:") and "is already" in m)]
    assert not unexpected, summary(result)
    assert len(result.latencies["burst"]) == 12, summary(result)
    # every submission got its lease, those of the burst too
    assert result.leases == len(result.latencies["submit"]) + len(result.latencies["burst"]), summary(result)
    assert result.overbooked == [], summary(result)
    # the server said its own time for every answer (Server-Timing), each a share of what its client saw
    for kind in ("submit", "list", "burst"):
        assert len(result.server_times[kind]) == len(result.latencies[kind]), summary(result)
        assert None not in result.server_times[kind], summary(result)
        assert all(0 < server <= seen for seen, server in zip(result.latencies[kind], result.server_times[kind])), \
            summary(result)
        assert 0 < result.percentile(kind, 99, "outside") < result.percentile(kind, 99), summary(result)
    assert "Traceback" not in result.server_log, result.server_log
