"""Time, passed in: every component that needs "now" receives a :data:`Clock`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "system_clock"]

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)
