"""Conversions between Python values and SQLite columns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["dump_json", "from_iso", "load_json", "load_object", "to_iso"]


def to_iso(moment: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2026-01-02T03:04:05.000006Z``), which sorts as time."""
    if moment.tzinfo is None:
        raise ValueError("postroom stores aware datetimes only (UTC)")
    # isoformat is several times cheaper than strftime and pads every year to four digits;
    # the six characters it ends with are the "+00:00" offset.
    return moment.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def from_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_json(text: str | None) -> Any:
    if text is None or text == "":
        return None
    return json.loads(text)


def load_object(text: str | None) -> Mapping[str, Any]:
    """A JSON object column; anything else (NULL, a scalar) reads as ``{}``."""
    value = load_json(text)
    return value if isinstance(value, dict) else {}
