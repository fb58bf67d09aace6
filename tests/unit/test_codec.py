"""Times as stored: fixed-width ISO-8601 UTC text that sorts as time and reads back exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postroom.store.sqlite.codec import from_iso, to_iso

aware = st.datetimes(timezones=st.just(UTC))


def test_the_stored_form() -> None:
    assert to_iso(datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "2026-01-02T03:04:05.000006Z"
    assert to_iso(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"
    # Every year has four digits, so the text keeps its width and its order.
    assert to_iso(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000000Z"
    # Another offset is converted to UTC.
    plus5 = timezone(timedelta(hours=5))
    assert to_iso(datetime(2026, 1, 2, 3, 4, 5, tzinfo=plus5)) == "2026-01-01T22:04:05.000000Z"


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        to_iso(datetime(2026, 1, 2))


@given(aware)
def test_round_trip(moment: datetime) -> None:
    text = to_iso(moment)
    assert len(text) == 27
    assert from_iso(text) == moment


@given(aware, aware)
def test_text_order_is_time_order(a: datetime, b: datetime) -> None:
    assert (to_iso(a) < to_iso(b)) == (a < b)
