"""The web face's parts on their own: sessions and their ends, the calendar's windows, the data it draws."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest

from orchestrator.model.errors import InvalidRequest
from orchestrator.model.timeutil import UTC
from orchestrator.service.calendar import CalendarHost, CalendarLease, CalendarWindow
from orchestrator.service.identity import Caller
from orchestrator.service.web.sessions import Sessions
from orchestrator.service.web.views import Window, calendar_data, embedded_json

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def test_a_session_ends_after_its_lifetime_or_with_its_token():
    clock = Clock()
    sessions = Sessions(clock, lifetime=timedelta(hours=12))
    long = sessions.open(Caller("alice", via="token", token_id=1, token_expires=T0 + timedelta(days=90)))
    short = sessions.open(Caller("bob", via="token", token_id=2, token_expires=T0 + timedelta(hours=1)))
    assert long.expires == T0 + timedelta(hours=12) and short.expires == T0 + timedelta(hours=1)
    assert long.id != short.id and long.csrf != long.id and len(long.id) >= 40
    assert long.csrf_matches(long.csrf) and not long.csrf_matches(short.csrf) and not long.csrf_matches(None)
    clock.now = T0 + timedelta(hours=1)
    assert sessions.find(short.id) is None and sessions.find(long.id) is long
    sessions.close(long.id)
    assert sessions.find(long.id) is None and sessions.find("") is None and len(sessions) == 0


def test_sessions_are_bounded_the_first_to_end_goes_first():
    clock = Clock()
    sessions = Sessions(clock, limit=3)
    made = [sessions.open(Caller(f"u{i}", token_expires=T0 + timedelta(hours=i + 1))) for i in range(4)]
    assert len(sessions) == 3 and sessions.find(made[0].id) is None
    assert all(sessions.find(s.id) is s for s in made[1:])


@pytest.mark.parametrize(("view", "day", "first", "nxt", "previous"), [
    ("day", "2026-12-31", "2026-12-31", "2027-01-01", "2026-12-30"),
    ("week", "2026-12-10", "2026-12-07", "2026-12-14", "2026-11-30"),   # Monday to Sunday
    ("month", "2026-12-10", "2026-12-01", "2027-01-01", "2026-11-01"),
    ("month", "2027-01-31", "2027-01-01", "2027-02-01", "2026-12-01"),
    ("month", "2028-02-29", "2028-02-01", "2028-03-01", "2028-01-01"),
])
def test_windows_are_days_weeks_from_monday_and_months(view, day, first, nxt, previous):
    window = Window.of(view, day, date(2000, 1, 1))
    assert (window.first.isoformat(), window.next.isoformat(), window.previous.isoformat()) == (first, nxt, previous)
    assert window.end - window.start == timedelta(days=(window.next - window.first).days)


def test_a_window_is_checked():
    assert Window.of(None, None, date(2026, 12, 9)).first == date(2026, 12, 7)   # this week by default
    for view, day, line in (("year", None, "view: must be day, week or month (got 'year')"),
                            ("day", "tomorrow", "date: 'tomorrow' is not a date (YYYY-MM-DD)"),
                            ("day", "9999-12-31", "date: 9999-12-31 is not between 1970 and 9998")):
        with pytest.raises(InvalidRequest) as caught:
            Window.of(view, day, date(2026, 12, 9))
        assert str(caught.value) == line


def test_the_calendar_data_is_compact_and_says_what_each_bar_is():
    window = Window.of("day", "2026-12-07", date(2026, 12, 7))
    start = int(window.start.timestamp())
    found = CalendarWindow(
        window.start, window.end, T0,
        hosts=[CalendarHost("h1", 8, 16384), CalendarHost("h2", 8, 16384, unavailable_from=T0),
               CalendarHost("h3", 4, 8192, silent_since=T0 - timedelta(minutes=5))],
        leases={7: CalendarLease(7, "exp </script>", "alice", "advance-reservation", "active")},
        bars=[("h2", "vm", 7, start + 8 * 3600, start + 10 * 3600, "active", "", 70, 2, 4096),
              ("h1", "live-migrate", 7, start + 9 * 3600, start + 9 * 3600 + 60, "scheduled", "to", 71, 0, 0),
              ("gone", "vm", 7, start, start + 60, "done", "", 72, 1, 1)])
    data = calendar_data(window, found, "alice")
    kinds = [k[0] for k in data["kinds"]]
    assert data["bars"] == [1, kinds.index("vm"), 0, 8 * 3600, 10 * 3600, 1, 0,
                            0, kinds.index("live-migrate"), 0, 9 * 3600, 9 * 3600 + 60, 0, 2]
    assert data["hosts"] == [["h1", 8, 16384, None, None, 0, 0], ["h2", 8, 16384, 9 * 3600, None, 2, 4096],
                             ["h3", 4, 8192, None, 9 * 3600 - 300, 0, 0]]
    assert data["leases"] == [[7, "exp </script>", "alice", "advance-reservation", "active"]]
    text = embedded_json(data)
    assert "</script>" not in text and "\\u003c/script\\u003e" in text
