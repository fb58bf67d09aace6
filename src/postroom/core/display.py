"""How a stored message reads on a chat platform (MESSAGES §2, §5).

Each type is recognizable at a glance: ``system`` rows carry ⚙️, command outputs 🔧 with ✅ or
❌ by exit code, host notices 🏠. ``user`` and ``assistant`` rows are the text itself, named only
where the chat would not show who speaks: a user message mirrored into another chat, a reply the
bot sends through a person's own account. Traces never reach a platform chat.

What the people of a chat see — on a platform, or as an anonymous visitor of the web chat — is
less than what an operator sees (MESSAGES §5): their messages, the answers, command outputs and
the host notices meant for them, never traces, run details, folder names beyond the acks, or
set-up hints for the operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from postroom.core.messages import MessageType

__all__ = [
    "CHAT_NOTICE_SOURCES",
    "PREFIXES",
    "TOOL_FAILED",
    "TOOL_OK",
    "display_text",
    "prefix_for",
    "shown_to_chat",
]

#: The prefix of each message type, shared by platform chats, the web chat and the TUI. A
#: ``tool_result`` adds :data:`TOOL_OK` or :data:`TOOL_FAILED` after its 🔧 (see
#: :func:`prefix_for`). Traces have none: only the web chat and the TUI show them, collapsed.
PREFIXES: Mapping[str, str] = MappingProxyType(
    {
        MessageType.USER: "",
        MessageType.ASSISTANT: "",
        MessageType.SYSTEM: "⚙️ ",
        MessageType.TOOL_RESULT: "🔧 ",
        MessageType.HOST: "🏠 ",
        MessageType.TRACE: "",
    }
)
TOOL_OK = "✅ "
TOOL_FAILED = "❌ "

#: The ``metadata.source`` of host notices meant for a chat's people: acks and answers of
#: commands, "could not answer", "trying again", a pairing code and its approval, a used daily
#: budget. Every other notice (a conductor's outcome, a
#: tag or delegation problem naming folders, a routing problem, a set-up hint) is for operators.
CHAT_NOTICE_SOURCES = frozenset({"command", "turn_failed", "turn_retry", "pairing", "budget"})
_CHAT_TYPES = frozenset({MessageType.USER, MessageType.ASSISTANT, MessageType.TOOL_RESULT})


def prefix_for(message_type: str, metadata: Mapping[str, Any] | None = None) -> str:
    """The prefix a message of *message_type* is shown with; ValueError for an unknown type.

    A ``tool_result`` succeeded when ``metadata["exit_code"]`` is 0 or absent (an output
    recorded without a code is not a failure we know of).
    """
    prefix = PREFIXES.get(message_type)
    if prefix is None:
        raise ValueError(f"unknown message type {message_type!r}")
    if message_type == MessageType.TOOL_RESULT:
        exit_code = (metadata or {}).get("exit_code")
        return prefix + (TOOL_OK if exit_code is None or exit_code == 0 else TOOL_FAILED)
    return prefix


def display_text(
    message_type: str,
    content: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    assistant_name: str | None = None,
    sender_name: str = "",
) -> str:
    """The text a platform chat shows for a stored message.

    *sender_name* names the author of a ``user`` message copied into a mirror chat
    (``[Ana] hi``); *assistant_name* names the bot when it speaks through a person's own account
    (``Postroom: hello``). Traces are never sent to platform chats, so ``trace`` is a
    ValueError, as is an unknown type.
    """
    if message_type == MessageType.TRACE:
        raise ValueError("traces are never shown on platform chats, only in the web chat and TUI")
    prefix = prefix_for(message_type, metadata)
    if message_type == MessageType.USER and sender_name:
        return f"[{sender_name}] {content}"
    if message_type == MessageType.ASSISTANT and assistant_name:
        return f"{assistant_name}: {content}"
    return prefix + content


def shown_to_chat(message_type: str, metadata: Mapping[str, Any]) -> bool:
    """Whether the people of a chat (not its operators) see a stored row of this type.

    ``user``, ``assistant`` and ``tool_result`` rows, and the host notices of
    :data:`CHAT_NOTICE_SOURCES`; never traces, ``system`` rows or other notices.
    """
    if message_type in _CHAT_TYPES:
        return True
    return message_type == MessageType.HOST and metadata.get("source") in CHAT_NOTICE_SOURCES
