"""Side effects of steering commands, applied inside the ingest transaction (ROUTING §3.1).

Setting or clearing the sticky group ends the chat's engagement; ``/new`` starts the next
generation of the conversation and ends the engagement; ``/status`` reports the chat's routing
state. The answer to every command is a ``host`` message: shown to the user, never to a model.
"""

from __future__ import annotations

from datetime import datetime

from postroom.core.decision import ChatState, Command, CommandKind, Decision
from postroom.store.protocol import StoreTx

__all__ = ["apply_command", "status_text"]


async def apply_command(
    tx: StoreTx, decision: Decision, chat_jid: str, *, now: datetime
) -> str | None:
    """Carry out the command of *decision*; return the acknowledgement text."""
    command = decision.command
    if command is None:
        return decision.ack
    kind = command.kind
    if kind is CommandKind.SET_STICKY:
        await tx.set_sticky_group(chat_jid, command.folder, now=now)
        await tx.end_engagements(chat_jid)
    elif kind is CommandKind.CLEAR_STICKY:
        await tx.set_sticky_group(chat_jid, None, now=now)
        await tx.end_engagements(chat_jid)
    elif kind is CommandKind.SET_TOPIC:
        await tx.set_sticky_topic(chat_jid, command.topic, now=now)
    elif kind is CommandKind.CLEAR_TOPIC:
        await tx.set_sticky_topic(chat_jid, None, now=now)
    elif kind is CommandKind.NEW:
        if command.folder is not None:
            await tx.new_conversation(command.folder, command.topic or "", chat_jid, now=now)
        await tx.end_engagements(chat_jid)
    elif kind is CommandKind.STOP:
        return f"nothing is running for {command.folder}"
    elif kind is CommandKind.STATUS:
        return status_text(command, await tx.chat_state(chat_jid), now=now)
    return decision.ack


def status_text(command: Command, chat: ChatState, *, now: datetime) -> str:
    """One line a person can read: where the chat's messages go and why."""
    parts = [f"folder {command.folder}"]
    parts.append(f"topic {command.topic}" if command.topic else "no topic")
    parts.append(f"sticky group {chat.sticky_group}" if chat.sticky_group else "no sticky group")
    if chat.sticky_topic:
        parts.append(f"sticky topic {chat.sticky_topic}")
    live = [
        f"{engagement.folder} until {engagement.until.strftime('%H:%M')}Z"
        + (f" (topic {topic})" if topic else "")
        for topic, engagement in sorted(chat.engagements.items())
        if engagement.until > now
    ]
    parts.append("engaged to " + ", ".join(live) if live else "not engaged")
    return " · ".join(parts)
