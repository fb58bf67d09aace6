"""Building an inbound message from command-line options (``send``, ``routes explain``)."""

from __future__ import annotations

from datetime import UTC, datetime

from postroom.core.errors import InvalidInput
from postroom.core.messages import InboundMessage, Verb
from postroom.engine.notices import new_message_id

__all__ = ["build_inbound"]

_VERBS = {v.value for v in Verb}


def build_inbound(
    *,
    chat_jid: str,
    sender: str,
    text: str,
    verb: str = "message",
    topic: str = "",
    reply_to: str | None = None,
    mentioned: bool = False,
    message_id: str | None = None,
    sender_name: str = "",
) -> InboundMessage:
    if verb not in _VERBS:
        raise InvalidInput(f"Unknown verb {verb!r}; the verbs are {', '.join(sorted(_VERBS))}.")
    return InboundMessage(
        id=message_id or new_message_id(),
        chat_jid=chat_jid,
        sender=sender,
        content=text,
        timestamp=datetime.now(UTC),
        sender_name=sender_name,
        reply_to=reply_to,
        topic=topic,
        verb=Verb(verb),
        mentioned=mentioned,
    )
