"""How the TUI shows one stored message (MESSAGES §2, §5): every type at a glance.

A pure function of the message object the server sends (INTERFACES §4's message JSON): a label
line saying who spoke where — the chat JID always, since the view mixes every chat of the folder —
and the content verbatim. The prefixes are the ones platform chats use (``core.display``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.text import Text

from postroom.core.display import TOOL_FAILED, prefix_for
from postroom.core.messages import MessageType

__all__ = ["Rendered", "render_message"]

_TYPES = {t.value for t in MessageType}


@dataclass(frozen=True, slots=True)
class Rendered:
    #: The CSS class of the message's widget: ``user``, ``assistant``, ``system``,
    #: ``tool-ok``, ``tool-failed``, ``host``, ``trace``.
    kind: str
    label: Text
    body: Text
    observed: bool

    @property
    def plain(self) -> str:
        return f"{self.label.plain}\n{self.body.plain}"


def render_message(message: Mapping[str, Any], *, assistant_name: str = "") -> Rendered:
    """The label and body of *message*; an unknown type is shown as a user message would be,
    marked with its type, rather than hidden."""
    message_type = str(message.get("message_type") or MessageType.USER.value)
    raw_metadata = message.get("metadata")
    metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, Mapping) else {}
    sender = str(message.get("sender") or "")
    sender_name = str(message.get("sender_name") or "")
    chat_jid = str(message.get("chat_jid") or "")
    folder = message.get("routed_to")
    observed = bool(message.get("observed"))
    content = str(message.get("content") or "")

    label = Text()
    when = _clock_time(message.get("timestamp"))
    if when:
        label.append(when + " ", style="dim")
    label.append(chat_jid, style="bold cyan")
    label.append("  ")
    kind = _kind(message_type, metadata)
    if message_type == MessageType.USER:
        label.append("👤 ")
        label.append(sender_name or sender, style="bold")
        if sender_name and sender != sender_name:
            label.append(f" ({sender})", style="dim")
    elif message_type == MessageType.ASSISTANT:
        label.append("🤖 ")
        label.append(sender_name or assistant_name or "assistant", style="bold green")
        if folder:
            label.append(f" ({folder})", style="green")
    elif message_type == MessageType.SYSTEM:
        label.append(prefix_for(message_type, metadata) + "system", style="bold yellow")
        if sender and sender != MessageType.SYSTEM.value:
            label.append(f" ({sender})", style="dim")
    elif message_type == MessageType.TOOL_RESULT:
        failed = kind == "tool-failed"
        label.append(
            prefix_for(message_type, metadata) + "command output",
            style="bold red" if failed else "bold",
        )
        if failed:
            label.append(f" (exit {metadata.get('exit_code')})", style="red")
    elif message_type == MessageType.HOST:
        label.append(prefix_for(message_type, metadata) + "host", style="bold magenta")
    elif message_type == MessageType.TRACE:
        label.append(f"⋯ trace: {sender or 'run'}", style="italic")
    else:
        label.append(f"{sender_name or sender} [{message_type}]", style="bold")
    if message_type in (MessageType.USER, MessageType.TRACE, MessageType.SYSTEM) and folder:
        label.append(f" → {folder}", style="dim")
    if message.get("topic"):
        label.append(f" #{message['topic']}", style="blue")
    if metadata.get("command"):
        label.append(" command", style="dim italic")
    if observed:
        label.append(" (observed)", style="dim italic")
    return Rendered(kind=kind, label=label, body=Text(content), observed=observed)


def _kind(message_type: str, metadata: Mapping[str, Any]) -> str:
    if message_type == MessageType.TOOL_RESULT:
        failed = prefix_for(message_type, metadata).endswith(TOOL_FAILED)
        return "tool-failed" if failed else "tool-ok"
    if message_type not in _TYPES:
        return "user"
    return message_type


def _clock_time(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    try:
        return datetime.fromisoformat(value).strftime("%H:%M:%S")
    except ValueError:
        return ""
