"""Messages: their types, the sender vocabulary, verbs and the value objects that carry them.

The stored history is a faithful record of what the model saw and said, so every row has a
``message_type`` and every filter uses that type, never the sender (the *sender*
``tool_result`` is a trace; the *type* ``tool_result`` is a command output).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from postroom.core.jid import split_jid

__all__ = [
    "CONTEXT_TYPES",
    "INTERNAL_SENDERS",
    "Attachment",
    "InboundMessage",
    "MessageType",
    "Sender",
    "StoredMessage",
    "Verb",
    "is_from_gateway",
    "type_for_sender",
]


class MessageType(StrEnum):
    """What a stored row is, which decides where it is shown and whether a model sees it."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL_RESULT = "tool_result"
    HOST = "host"
    TRACE = "trace"


#: Types that enter a model's context. ``host`` and ``trace`` never do.
CONTEXT_TYPES: frozenset[MessageType] = frozenset(
    {MessageType.USER, MessageType.ASSISTANT, MessageType.SYSTEM, MessageType.TOOL_RESULT}
)


class Sender(StrEnum):
    """The internal sender vocabulary. Platform senders are JIDs such as ``telegram:user/42``."""

    BOT = "bot"
    SYSTEM = "system"
    DEPLOY = "deploy"
    COMMAND_OUTPUT = "command_output"
    HOST = "host"
    THINKING = "thinking"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    RESULT_META = "result_meta"
    #: Never stored: ephemeral notices recomputed for each run and appended to the system prompt.
    SYSTEM_NOTICE = "system_notice"
    #: The operator at the terminal UI; set by the server, never accepted from a client.
    TUI_USER = "tui-user"


_SENDER_TYPES: dict[str, MessageType] = {
    Sender.BOT: MessageType.ASSISTANT,
    Sender.SYSTEM: MessageType.SYSTEM,
    Sender.DEPLOY: MessageType.SYSTEM,
    Sender.COMMAND_OUTPUT: MessageType.TOOL_RESULT,
    Sender.HOST: MessageType.HOST,
    Sender.THINKING: MessageType.TRACE,
    Sender.TOOL_USE: MessageType.TRACE,
    Sender.TOOL_RESULT: MessageType.TRACE,
    Sender.RESULT_META: MessageType.TRACE,
    Sender.TUI_USER: MessageType.USER,
}

#: Senders a client may never claim: they belong to the gateway itself.
INTERNAL_SENDERS: frozenset[str] = frozenset(s.value for s in Sender) - {Sender.TUI_USER.value}


def type_for_sender(sender: str) -> MessageType:
    """The message type that goes with a sender of the vocabulary; platform senders are users."""
    return _SENDER_TYPES.get(sender, MessageType.USER)


class Verb(StrEnum):
    """What a message does. Adapters set the platform-specific ones; ``mention`` is derived."""

    MESSAGE = "message"
    MENTION = "mention"
    REPLY = "reply"
    POST = "post"
    LIKE = "like"
    DISLIKE = "dislike"
    REPOST = "repost"
    FOLLOW = "follow"
    JOIN = "join"
    UNTRUSTED = "untrusted"


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message: a URL to fetch later or inline ``data`` (base64)."""

    kind: str
    mime: str = ""
    name: str = ""
    size: int = 0
    url: str = ""
    data: str = ""
    #: The adapter fetches ``url`` after the acknowledgement, before the turn runs (a slow
    #: download that must not hold up a platform's webhook).
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message as a channel adapter hands it to ingest, normalized to canonical JIDs."""

    id: str
    chat_jid: str
    sender: str
    content: str
    timestamp: datetime
    sender_name: str = ""
    reply_to: str | None = None
    #: The platform's native thread (Slack ``thread_ts``, forum topic...), not yet normalized.
    topic: str = ""
    verb: Verb = Verb.MESSAGE
    #: The platform says the bot was mentioned.
    mentioned: bool = False
    is_dm: bool = False
    #: The bot's own message echoed back by the platform.
    is_from_me: bool = False
    attachments: tuple[Attachment, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return split_jid(self.chat_jid)[0]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One row of the ``messages`` table (MESSAGES §3)."""

    id: str
    chat_jid: str
    seq: int
    sender: str
    sender_name: str
    content: str
    timestamp: datetime
    is_from_me: bool
    message_type: MessageType
    metadata: Mapping[str, Any]
    verb: str = Verb.MESSAGE.value
    topic: str = ""
    reply_to: str | None = None
    platform_id: str | None = None
    routed_to: str | None = None
    observed: bool = False
    conversation_id: int | None = None
    run_id: int | None = None
    compacted: bool = False

    @property
    def in_context(self) -> bool:
        """Whether this row may enter a model's context at all (commands never do)."""
        return self.message_type in CONTEXT_TYPES and not self.metadata.get("command")


def is_from_gateway(message_type: MessageType | str, is_from_me: bool) -> bool:
    """True for rows the gateway itself wrote: never routed, never steered (the bot-loop guard)."""
    return is_from_me or message_type != MessageType.USER
