"""The bounds every surface shares (INTERFACES §1 Bounds) and time arithmetic that saturates."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from postroom.core.bounds import MAX_COUNT, MAX_TIME, backoff_s, check_count, later
from postroom.core.durations import parse_duration

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0.0), ("90s", 90.0), ("30d", 30 * 86400.0), ("720h", 2592000.0)]
)
def test_durations_up_to_thirty_days(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["99999999h", "31d", "721h", "2592001s"])
def test_a_duration_over_thirty_days_is_refused_naming_the_range(text: str) -> None:
    with pytest.raises(ValueError, match="from 0 to 30d") as caught:
        parse_duration(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("value", [1, 2, MAX_COUNT])
def test_counts_in_range(value: int) -> None:
    assert check_count(value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_COUNT + 1, 2**63, True, "5", 1.5])
def test_counts_out_of_range_name_the_range(value: object) -> None:
    with pytest.raises(ValueError, match=f"from 1 to {MAX_COUNT}"):
        check_count(value)


def test_zero_may_be_allowed() -> None:
    assert check_count(0, minimum=0) == 0


@pytest.mark.parametrize("seconds", [1e15, 1e300, math.inf, math.nan, 359999996400.0])
def test_later_saturates_instead_of_raising(seconds: float) -> None:
    with pytest.raises(OverflowError):  # what plain arithmetic does with these
        _ = NOW + timedelta(seconds=seconds if not math.isnan(seconds) else 1e300)
    assert later(NOW, seconds) == MAX_TIME


def test_later_adds_ordinary_delays_exactly() -> None:
    assert later(NOW, 90) == NOW + timedelta(seconds=90)
    assert later(NOW, -5) == NOW  # a negative delay is "now"
    assert later(MAX_TIME, 1) == MAX_TIME


def test_backoff_doubles_and_stays_a_small_float() -> None:
    assert [backoff_s(60, n) for n in (1, 2, 3)] == [120, 240, 480]
    assert backoff_s(2, 10_000, maximum_s=300) == 300  # 2 * 2**10000 would overflow a float
    assert backoff_s(60, 2**31) == 30 * 86400
