"""The compiled core's `time_key` (read from a datetime's fields) against the plain definition in
`keys.time_key` (the reference core's): equal for every aware datetime a table can be given, in UTC or in
any other fixed offset, and a naive datetime refused by both."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.timeutil import UTC
from orchestrator.planning.slottable import core as compiled
from orchestrator.planning.slottable.keys import time_key as plain_time_key
from tests.reference import core as reference

offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@settings(max_examples=2000, deadline=None)
@given(t=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_utc_times_key_as_the_plain_definition(t):
    assert compiled.time_key(t) == plain_time_key(t) == reference.time_key(t)


@settings(max_examples=500, deadline=None)
@given(t=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=offsets))
def test_other_offsets_key_as_the_plain_definition(t):
    assert compiled.time_key(t) == plain_time_key(t)


@pytest.mark.parametrize("t", [datetime(1, 1, 1, tzinfo=UTC), datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                               datetime(1970, 1, 1, tzinfo=UTC), datetime(2000, 2, 29, 12, tzinfo=UTC),
                               datetime(2100, 3, 1, tzinfo=UTC),
                               datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)])
def test_edges_of_the_calendar(t):
    assert compiled.time_key(t) == plain_time_key(t)


def test_a_naive_time_is_refused_by_both():
    with pytest.raises(TypeError):
        plain_time_key(datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        compiled.time_key(datetime(2026, 1, 1))
