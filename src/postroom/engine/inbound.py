"""An inbound message from the fields a person or a client gives (the CLI's ``send`` and
``routes explain``, the API's ``POST /messages``, the MCP tools ``send_message`` and
``explain_route``): the one place their defaults and the verb check live."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from postroom.core.errors import InvalidInput
from postroom.core.messages import Attachment, InboundMessage, Verb
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
    is_from_me: bool = False,
    is_dm: bool = False,
    message_id: str | None = None,
    sender_name: str = "",
    timestamp: datetime | None = None,
    attachments: Sequence[Attachment] = (),
    now: datetime | None = None,
) -> InboundMessage:
    """The message as it would arrive: a generated id and the time *now* unless given (a
    timestamp without a zone is UTC). Refuses an unknown verb."""
    if verb not in _VERBS:
        raise InvalidInput(f"Unknown verb {verb!r}; the verbs are {', '.join(sorted(_VERBS))}.")
    when = timestamp or now or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return InboundMessage(
        id=message_id if message_id is not None else new_message_id(),
        chat_jid=chat_jid,
        sender=sender,
        content=text,
        timestamp=when,
        sender_name=sender_name,
        reply_to=reply_to,
        topic=topic,
        verb=Verb(verb),
        mentioned=mentioned,
        is_from_me=is_from_me,
        is_dm=is_dm,
        attachments=tuple(attachments),
    )
