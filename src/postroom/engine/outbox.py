"""The outbox: every reply, notice and mirror copy leaves through here (PIPELINE §3).

Writing to the outbox happens inside the transaction that stores the message, so a stored
answer always has its delivery rows, and a crash can only repeat a send, never lose one. Each
row is one chunk for one chat, cut to that platform's limit when written; sending is the
delivery loop's job (:mod:`postroom.engine.delivery`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from postroom.core.chunking import chunk_text, limit_for
from postroom.core.jid import split_jid
from postroom.store.protocol import StoreTx
from postroom.store.records import NewDelivery

__all__ = ["DeliveryKind", "OutboundMessage", "plan_deliveries", "write_outbox"]


class DeliveryKind(StrEnum):
    """Why a row is in the outbox; only replies engage the chat they reach."""

    REPLY = "reply"
    NOTICE = "notice"
    MIRROR = "mirror"
    SCHEDULED = "scheduled"


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A stored message to send, and how."""

    message_id: str
    message_chat_jid: str
    message_type: str
    content: str
    folder: str | None = None
    topic: str = ""
    reply_to: str | None = None


def plan_deliveries(
    message: OutboundMessage,
    chats: Sequence[str],
    *,
    kind: str,
    now: datetime,
    engage: bool = False,
) -> list[NewDelivery]:
    """Delivery rows for *message* to each of *chats* (duplicates dropped, order kept)."""
    rows: list[NewDelivery] = []
    for chat_jid in dict.fromkeys(chats):
        platform = split_jid(chat_jid)[0]
        pieces = chunk_text(message.content, limit_for(platform)) or [""]
        for index, piece in enumerate(pieces):
            rows.append(
                NewDelivery(
                    message_id=message.message_id,
                    message_chat_jid=message.message_chat_jid,
                    chat_jid=chat_jid,
                    chunk=index,
                    chunks=len(pieces),
                    content=piece,
                    kind=kind,
                    message_type=message.message_type,
                    next_try=now,
                    created_at=now,
                    folder=message.folder,
                    topic=message.topic,
                    # Only the first chunk answers the triggering message, where threading exists.
                    reply_to=message.reply_to if index == 0 else None,
                    engage=engage,
                )
            )
    return rows


async def write_outbox(tx: StoreTx, rows: Iterable[NewDelivery]) -> int:
    """Store delivery rows in the caller's transaction; return how many."""
    batch = list(rows)
    if batch:
        await tx.insert_deliveries(batch)
    return len(batch)
