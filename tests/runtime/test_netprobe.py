"""The network probe of a live migration: the longest silence between replies (a plain function), and
the real `ping` against loopback, the one address tests may send to without the lab."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.runtime.netprobe import PingProbe, longest_gap_ms


def test_the_longest_gap_counts_the_silence_across_the_edges():
    stamps = [0.0, 0.01, 0.02, 0.5, 0.51, 0.52, 1.3, 1.31]
    assert abs(longest_gap_ms(stamps, 0.015, 0.515) - 480.0) < 1e-6   # 0.02 -> 0.5
    assert abs(longest_gap_ms(stamps, 0.6, 1.0) - 780.0) < 1e-6       # 0.52 (before) -> 1.3 (after)
    assert longest_gap_ms([0.0], 0.0, 1.0) is None


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=2, unique=True), st.floats(0, 100), st.floats(0, 100))
def test_the_longest_gap_against_a_plain_oracle(stamps, a, b):
    since, until = min(a, b), max(a, b)
    stamps = sorted(stamps)
    points = ([t for t in stamps if t < since][-1:] + [t for t in stamps if since <= t <= until]
              + [t for t in stamps if t > until][:1])
    expected = None if len(points) < 2 else max(points[i + 1] - points[i] for i in range(len(points) - 1)) * 1000
    assert longest_gap_ms(stamps, since, until) == expected


def test_ping_on_loopback_sees_no_outage():
    probe = PingProbe("127.0.0.1")
    assert probe.start()
    time.sleep(0.3)
    probe.stop(linger_s=0.1)
    assert len(probe.stamps) >= 10                 # every 10 ms (root) or 200 ms: at least a few replies
    assert probe.outage_ms() is not None and probe.outage_ms() < 250
    assert probe.answered_after()


def test_an_address_that_never_answers_is_not_probed():
    probe = PingProbe("10.77.0.254")               # the lab's subnet, unused: no reply (guard route when down)
    assert not probe.start()
    assert probe.outage_ms() is None
