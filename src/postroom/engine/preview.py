"""What a route change would do to real traffic (ROUTING §6, "preview before writing").

The last N stored inbound user messages and drop records are resolved twice — against the
current table and against the proposed one — with the chats' sticky, engagement and reply
state as it is now; the messages whose ``action``, ``folder`` or ``topic`` would differ are
listed. A drop has no stored content, so it is resolved with an empty text. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postroom.core.decision import ChatState, Decision, DropReason, ReplyTarget, RoutingMessage
from postroom.core.errors import InvalidInput
from postroom.core.resolution import resolve
from postroom.core.route_index import RouteIndex
from postroom.core.trigger import Trigger
from postroom.store.protocol import StoreTx

__all__ = [
    "DEFAULT_PREVIEW",
    "MAX_PREVIEW",
    "PreviewItem",
    "RoutePreview",
    "preview_limit",
    "preview_traffic",
]

#: Drops admission decided: a route table change cannot alter them.
_ADMISSION_DROPS = frozenset(
    {DropReason.NOT_ADMITTED.value, DropReason.PAIRING_PENDING.value, DropReason.BLOCKED.value}
)

DEFAULT_PREVIEW = 500
MAX_PREVIEW = 5_000
CONTENT_CHARS = 200


def preview_limit(value: Any) -> int:
    """How many recent messages a preview examines (default 500, at most 5,000)."""
    if value is None:
        return DEFAULT_PREVIEW
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PREVIEW:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_PREVIEW}, not {value!r}.")
    return value


@dataclass(frozen=True, slots=True)
class PreviewItem:
    """One message whose decision would change."""

    id: str
    chat_jid: str
    sender: str
    #: The first 200 characters of the stored text; ``None`` for a drop (none is stored).
    content: str | None
    before: Decision
    after: Decision

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "chat_jid": self.chat_jid,
            "sender": self.sender,
            "content": self.content,
            "before": _outcome(self.before),
            "after": _outcome(self.after),
        }


@dataclass(frozen=True, slots=True)
class RoutePreview:
    """``{examined, changed, messages}``: how many were resolved, and those that changed."""

    examined: int
    messages: tuple[PreviewItem, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "changed": len(self.messages),
            "messages": [m.to_dict() for m in self.messages],
        }


def _same(before: Decision, after: Decision) -> bool:
    return (
        before.action is after.action
        and before.folder == after.folder
        and before.topic == after.topic
    )


def _outcome(decision: Decision) -> dict[str, Any]:
    return {
        "action": decision.action.value,
        "folder": decision.folder,
        "topic": decision.topic,
        "reason": decision.reason,
    }


@dataclass(frozen=True, slots=True)
class _Sample:
    id: str
    chat_jid: str
    sender: str
    content: str | None
    time: datetime
    message: RoutingMessage


async def preview_traffic(
    tx: StoreTx,
    *,
    current: RouteIndex,
    proposed: RouteIndex,
    folders: Set[str],
    trigger: Trigger,
    now: datetime,
    limit: int,
    visible: Callable[[str | None], bool] | None = None,
) -> RoutePreview:
    """Resolve the last *limit* inbound messages and drops against both tables.

    *visible*, when given, filters what is listed (a token confined to a folder sees only the
    messages whose decision involves its tree); ``examined`` counts every message resolved.
    """
    samples = await _recent(tx, limit)
    chats: dict[str, ChatState] = {}
    changed: list[PreviewItem] = []
    for sample in samples:
        chat = chats.get(sample.chat_jid)
        if chat is None:
            chat = chats[sample.chat_jid] = await tx.chat_state(sample.chat_jid)
        before = resolve(sample.message, current, chat, folders, now=now, trigger=trigger)
        after = resolve(sample.message, proposed, chat, folders, now=now, trigger=trigger)
        if _same(before, after):
            continue
        if visible is not None and not (visible(before.folder) or visible(after.folder)):
            continue
        changed.append(
            PreviewItem(sample.id, sample.chat_jid, sample.sender, sample.content, before, after)
        )
    return RoutePreview(len(samples), tuple(changed))


async def _recent(tx: StoreTx, limit: int) -> Sequence[_Sample]:
    """The newest *limit* of stored inbound messages and drops together, oldest first."""
    samples: list[_Sample] = []
    for stored in reversed(await tx.recent_inbound(limit=limit)):
        reply: ReplyTarget | None = None
        if stored.reply_to:
            reply = await tx.find_reply_target(stored.chat_jid, stored.reply_to)
        metadata = stored.metadata
        native = metadata.get("native_topic", stored.topic)
        message = RoutingMessage(
            chat_jid=stored.chat_jid,
            sender=stored.sender,
            content=stored.content,
            verb=stored.verb,
            mentioned=bool(metadata.get("mentioned")),
            native_topic=native if isinstance(native, str) else "",
            reply=reply,
        )
        content = stored.content[:CONTENT_CHARS]
        samples.append(
            _Sample(stored.id, stored.chat_jid, stored.sender, content, stored.timestamp, message)
        )
    for drop in await tx.list_drops(limit=limit):
        if drop.reason in _ADMISSION_DROPS:
            continue  # refused before routing (ROUTING §8): no table decides it
        message = RoutingMessage(
            chat_jid=drop.chat_jid, sender=drop.sender, content="", verb=drop.verb
        )
        samples.append(_Sample(drop.id, drop.chat_jid, drop.sender, None, drop.time, message))
    samples.sort(key=lambda s: s.time)
    return samples[-limit:]
