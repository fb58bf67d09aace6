"""How each channel is doing, from what really happened: its last inbound event, its last
send and its last error (INTERFACES §6's overview).

A channel is healthy only when something went through recently — a message received, a
delivery sent, a probe passed; a send that failed after the last one that went through makes
it failing at once, so a broken outbound webhook turns red on its first refused delivery.
The delivery loop reports every send here (adapters and webhooks alike); the adapters' own
status (a stopped poller is an ``error`` state) comes from the channel host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from postroom.core.jid import split_jid
from postroom.engine.clock import Clock

__all__ = ["RECENT_S", "ChannelHealth", "DeliveryHealth", "PlatformSends", "channel_health"]

#: "Recently": a channel quiet for longer is shown idle, not healthy.
RECENT_S = 15 * 60.0


@dataclass(slots=True)
class PlatformSends:
    """The delivery loop's record of one platform: last send through, last refusal."""

    platform: str
    sent: int = 0
    failed: int = 0
    last_sent_at: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None


class DeliveryHealth:
    """In-memory record of sends per platform, written by the delivery loop."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._platforms: dict[str, PlatformSends] = {}

    def _of(self, chat_jid: str) -> PlatformSends:
        platform = split_jid(chat_jid)[0]
        found = self._platforms.get(platform)
        if found is None:
            found = self._platforms[platform] = PlatformSends(platform)
        return found

    def sent(self, chat_jid: str) -> None:
        record = self._of(chat_jid)
        record.sent += 1
        record.last_sent_at = self._clock()

    def failed(self, chat_jid: str, error: str) -> None:
        record = self._of(chat_jid)
        record.failed += 1
        record.last_error = error
        record.last_error_at = self._clock()

    def snapshot(self) -> dict[str, PlatformSends]:
        return {name: replace(r) for name, r in self._platforms.items()}


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    """One line of the overview: ``healthy``, ``idle``, ``failing`` or ``down``."""

    name: str
    kind: str  # "adapter" or "webhook"
    state: str
    detail: str
    last_event_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    platforms: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "state": self.state,
            "detail": self.detail,
            "last_event_at": self.last_event_at.isoformat() if self.last_event_at else None,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
            "platforms": list(self.platforms),
        }


def _parse(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _latest(*values: datetime | None) -> datetime | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _judge(
    *, down: bool, last_ok: datetime | None, error_at: datetime | None, now: datetime
) -> str:
    if down:
        return "down"
    if error_at is not None and (last_ok is None or error_at >= last_ok):
        return "failing"
    if last_ok is not None and (now - last_ok).total_seconds() <= RECENT_S:
        return "healthy"
    return "idle"


def channel_health(
    adapters: Iterable[Mapping[str, Any]],
    sends: Mapping[str, PlatformSends],
    *,
    adapter_platforms: Mapping[str, tuple[str, ...]],
    webhooks: Iterable[str],
    now: datetime,
) -> list[ChannelHealth]:
    """The health of every adapter (its status as ``ChannelStatus.to_dict`` gives it) and of
    every platform served by an outbound webhook, judged from real events at *now*."""
    out: list[ChannelHealth] = []
    for status in adapters:
        name = str(status.get("name"))
        platforms = adapter_platforms.get(name, ())
        own = [sends[p] for p in platforms if p in sends]
        last_sent = _latest(*(s.last_sent_at for s in own))
        send_error = max(
            (s for s in own if s.last_error_at is not None),
            key=lambda s: s.last_error_at or now,
            default=None,
        )
        error_at = _latest(
            _parse(status.get("last_error_at")),
            send_error.last_error_at if send_error else None,
        )
        error = status.get("last_error")
        if send_error is not None and send_error.last_error_at == error_at:
            error = send_error.last_error
        last_ok = _latest(
            _parse(status.get("last_event_at")), last_sent, _parse(status.get("probed_at"))
        )
        state = str(status.get("state"))
        out.append(
            ChannelHealth(
                name=name,
                kind="adapter",
                state=_judge(
                    down=state in ("error", "stopped"),
                    last_ok=last_ok,
                    error_at=error_at,
                    now=now,
                ),
                detail=str(status.get("detail") or state),
                last_event_at=last_ok,
                last_error=error if isinstance(error, str) else None,
                last_error_at=error_at,
                platforms=platforms,
            )
        )
    for platform in sorted(webhooks):
        record = sends.get(platform, PlatformSends(platform))
        out.append(
            ChannelHealth(
                name=f"{platform} webhook",
                kind="webhook",
                state=_judge(
                    down=False, last_ok=record.last_sent_at, error_at=record.last_error_at, now=now
                ),
                detail=f"{record.sent} sent, {record.failed} refused since start",
                last_event_at=record.last_sent_at,
                last_error=record.last_error,
                last_error_at=record.last_error_at,
                platforms=(platform,),
            )
        )
    return out
