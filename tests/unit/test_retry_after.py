"""``retry-after`` as APIs send it (delta-seconds, an HTTP date, or ``retry-after-ms``)."""

from __future__ import annotations

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
        ("soon", None, None),
        ("inf", None, None),
        ("nan", None, None),
        (None, "2500", 2.5),
        ("", "250", 0.25),
        (None, "later", None),
        ("12", "99000", 12.0),  # the seconds header wins
        (None, None, None),
    ],
)
def test_retry_after(value: str | None, millis: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW, millis=millis) == expected
