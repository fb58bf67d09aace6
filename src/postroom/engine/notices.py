"""Messages the gateway itself writes into a chat: host notices (and the seed's entry point
``store_message_direct`` for any type)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from postroom.core.messages import MessageType, Sender
from postroom.engine.clock import Clock
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.store.protocol import StoreTx
from postroom.store.records import NewMessage

__all__ = ["host_message", "new_message_id", "post_notice", "store_message_direct"]


def new_message_id() -> str:
    return uuid.uuid4().hex


def host_message(
    chat_jid: str,
    text: str,
    *,
    clock: Clock,
    reply_to: str | None = None,
    topic: str = "",
    routed_to: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> NewMessage:
    """An operational notice for a chat: stored and shown, never sent to a model."""
    return NewMessage(
        id=new_message_id(),
        chat_jid=chat_jid,
        sender=Sender.HOST.value,
        sender_name="host",
        content=text,
        timestamp=clock(),
        message_type=MessageType.HOST,
        is_from_me=True,
        metadata=dict(metadata or {}),
        topic=topic,
        reply_to=reply_to,
        routed_to=routed_to,
    )


async def store_message_direct(tx: StoreTx, message: NewMessage) -> int:
    """Store a message the gateway wrote (any type); it is never routed. Returns its seq."""
    return await tx.insert_message(message)


async def post_notice(
    tx: StoreTx,
    chat_jid: str,
    text: str,
    *,
    clock: Clock,
    reply_to: str | None = None,
    topic: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> NewMessage:
    """Store a host notice and put it in the outbox for its chat, in the caller's transaction."""
    notice = host_message(
        chat_jid, text, clock=clock, reply_to=reply_to, topic=topic, metadata=metadata
    )
    await store_message_direct(tx, notice)
    outbound = OutboundMessage(
        message_id=notice.id,
        message_chat_jid=chat_jid,
        message_type=MessageType.HOST.value,
        content=text,
        topic=topic,
        reply_to=reply_to,
    )
    await write_outbox(
        tx, plan_deliveries(outbound, [chat_jid], kind=DeliveryKind.NOTICE, now=clock())
    )
    return notice
