"""The public JSON objects of stored things (INTERFACES §4), shared by the CLI and the API."""

from __future__ import annotations

from typing import Any

from postroom.core.messages import StoredMessage
from postroom.store.records import DropRecord

__all__ = ["drop_to_dict", "message_to_dict"]


def message_to_dict(message: StoredMessage) -> dict[str, Any]:
    return {
        "id": message.id,
        "chat_jid": message.chat_jid,
        "seq": message.seq,
        "sender": message.sender,
        "sender_name": message.sender_name,
        "content": message.content,
        "timestamp": message.timestamp.isoformat(),
        "message_type": message.message_type.value,
        "verb": message.verb,
        "topic": message.topic,
        "reply_to": message.reply_to,
        "routed_to": message.routed_to,
        "observed": message.observed,
        "run_id": message.run_id,
        "metadata": dict(message.metadata),
    }


def drop_to_dict(drop: DropRecord) -> dict[str, Any]:
    return {
        "id": drop.id,
        "chat_jid": drop.chat_jid,
        "sender": drop.sender,
        "verb": drop.verb,
        "reason": drop.reason,
        "time": drop.time.isoformat(),
    }
