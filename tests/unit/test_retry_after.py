"""``retry-after`` as APIs send it (delta-seconds, an HTTP date, or ``retry-after-ms``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from postroom.core.durations import parse_retry_after

NOW = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "millis", "expected"),
    [
        ("30", None, 30.0),
        (" 1.5 ", None, 1.5),
        ("-4", None, 0.0),
        ("Mon, 05 Jan 2026 12:00:45 GMT", None, 45.0),
        ("Mon, 05 Jan 2026 11:59:00 GMT", None, 0.0),  # a date already past: go now
        # Given but unusable: as long as the caller allows (it caps the value).
        ("soon", None, math.inf),
        ("inf", None, math.inf),
        ("nan", None, math.inf),
        ("1e15", None, 1e15),
        ("99999999999", None, 99999999999.0),
        ("Mon, 05 Jan 99999 12:00:45 GMT", None, math.inf),
        (None, "2500", 2.5),
        ("", "250", 0.25),
        (None, "later", math.inf),
        ("12", "99000", 12.0),  # the seconds header wins
        (None, None, None),
    ],
)
def test_retry_after(value: str | None, millis: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW, millis=millis) == expected
