"""Durations as people write them (``90s``, ``30m``, ``2h``, ``0``; at most 30 days, INTERFACES §1
**Bounds**) and as APIs ask for a pause (``retry-after``)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from postroom.core.bounds import MAX_DURATION_S

__all__ = ["format_duration", "parse_duration", "parse_retry_after", "spoken_duration"]

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any, *, maximum_s: float = MAX_DURATION_S) -> float:
    """Seconds in a duration: ``90s`` → 90.0, ``30m`` → 1800.0, ``2h`` → 7200.0, ``0`` → 0.0.

    Every duration postroom stores goes through here, so none is longer than *maximum_s*
    (30 days). Raises ``ValueError`` with a clause naming the allowed range (``must be a
    duration from 0 to 30d, not '99999999h'``); the caller puts the key in front of it.
    """
    limit = format_duration(maximum_s)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == 0:
            return 0.0
        raise ValueError(f"must be written with a unit (e.g. {value}s), not as a bare number")
    if isinstance(value, str):
        if value.strip() == "0":
            return 0.0
        m = _DURATION.fullmatch(value)
        if m:
            seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
            if seconds > maximum_s:
                raise ValueError(f"must be a duration from 0 to {limit}, not {value!r}")
            return seconds
    raise ValueError(f"must be a duration from 0 to {limit} like 90s, 30m or 2h, not {value!r}")


def format_duration(seconds: float) -> str:
    """The shortest exact spelling: 1800 → ``30m``, 90 → ``90s``, 0 → ``0``."""
    if seconds == 0:
        return "0"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def spoken_duration(seconds: float) -> str:
    """A wait as a sentence says it, rounded to its largest unit: 120 → ``2 minutes``,
    45 → ``45 seconds``, 5400 → ``2 hours`` (an hour and a half rounds up), 1 → ``1 second``."""
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size * 1.5 or (seconds >= size and seconds % size == 0):
            count = round(seconds / size)
            return f"{count} {unit}" + ("" if count == 1 else "s")
    count = max(round(seconds), 1)
    return f"{count} second" + ("" if count == 1 else "s")


def parse_retry_after(
    value: str | None, *, now: datetime, millis: str | None = None
) -> float | None:
    """Seconds an API asked us to wait: a ``retry-after`` value (delta-seconds or an HTTP
    date, relative to *now*), else a ``retry-after-ms`` value; ``None`` when neither says.

    A value that is given but cannot be read (``soon``, ``nan``, a broken date) is
    ``math.inf``: the API asked for a pause we cannot measure, so the caller rests as long as
    it allows (``llm.max_rest``, a delivery's TTL) rather than retrying at once. The caller
    caps every value; :func:`postroom.core.bounds.later` turns it into a moment safely.
    """
    if value and value.strip():
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = parsedate_to_datetime(text)
            except (TypeError, ValueError, OverflowError):
                return math.inf
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - now).total_seconds()
        return max(seconds, 0.0) if not math.isnan(seconds) else math.inf
    if millis and millis.strip():
        try:
            milliseconds = float(millis)
        except ValueError:
            return math.inf
        return max(milliseconds / 1000, 0.0) if not math.isnan(milliseconds) else math.inf
    return None
