"""The bounds of every value postroom stores (INTERFACES §1 **Bounds**), and time arithmetic that
cannot overflow.

Every surface that writes a setting — the configuration file and its variables, the CLI, the
HTTP API, a conductor's tags — checks it with these functions, so one value is accepted or
refused the same way everywhere: durations from 0 to 30 days (see
:func:`postroom.core.durations.parse_duration`), counts and sizes positive and below 2^31.

A value stored before a bound existed (or written into the database by hand) must still never
break arithmetic: :func:`later` adds a delay to a moment and saturates at :data:`MAX_TIME`
instead of raising, so "now + ttl" can never turn a successful send into an error.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_TIME",
    "backoff_s",
    "capped_s",
    "check_count",
    "later",
]

#: The longest duration any setting may hold: 30 days.
MAX_DURATION_S = 30 * 86_400
#: The largest count or size any setting may hold: 2^31 - 1.
MAX_COUNT = 2**31 - 1
#: The latest moment postroom computes; later moments saturate here.
MAX_TIME = datetime(9999, 12, 31, tzinfo=UTC)


def check_count(value: Any, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """*value* as an integer from *minimum* to *maximum*.

    Raises ``ValueError`` with a clause naming the range (``must be a whole number from 1 to
    2147483647, not 0``); the caller puts the key in front of it.
    """
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not minimum <= value <= maximum:
        shown = value if whole else repr(value)
        raise ValueError(f"must be a whole number from {minimum} to {maximum}, not {shown}")
    return int(value)


def later(moment: datetime, seconds: float) -> datetime:
    """*moment* plus *seconds* (negative counts as 0), saturating at :data:`MAX_TIME`.

    Never raises: an infinite, NaN or absurdly large delay gives :data:`MAX_TIME`.
    """
    seconds = max(seconds, 0.0)
    if math.isnan(seconds) or seconds >= (MAX_TIME - moment).total_seconds():
        return max(moment, MAX_TIME)
    return moment + timedelta(seconds=seconds)


def backoff_s(base_s: float, failures: int, *, maximum_s: float = MAX_DURATION_S) -> float:
    """``base_s × 2^failures``, at most *maximum_s*: exponential back-off that stays a small
    float however many failures were counted (``2 ** n`` alone overflows a float past 1,023)."""
    return min(base_s * 2.0 ** min(max(failures, 0), 64), maximum_s)


def capped_s(seconds: float, maximum_s: float) -> float:
    """A wait someone else asked for (a ``retry-after``), within ``[0, maximum_s]``; NaN — a
    wait that could not be read — counts as the maximum."""
    if math.isnan(seconds):
        return maximum_s
    return min(max(seconds, 0.0), maximum_s)
