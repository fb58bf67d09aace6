"""Side effects of steering commands, applied inside the ingest transaction (ROUTING §3.1).

Setting or clearing the sticky group ends the chat's engagement; ``/new`` starts the next
generation of the conversation and ends the engagement; ``/stop`` cancels the conversation's
running turn (or the one waiting to run), whose messages no later turn answers; ``/status``
reports the chat's routing state and queue position. The answer to every command is a ``host``
message: shown to the user, never to a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from postroom.core.decision import ChatState, Command, CommandKind, Decision
from postroom.core.folders import FolderSettings
from postroom.engine.turns import conversation_chat
from postroom.store.protocol import StoreTx
from postroom.store.records import JobStatus

__all__ = ["CommandOutcome", "apply_command", "status_text"]


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    ack: str | None
    #: A running turn the command cancelled (``/stop``), to stop now.
    cancelled_job: int | None = None


async def apply_command(
    tx: StoreTx,
    decision: Decision,
    chat_jid: str,
    *,
    now: datetime,
    settings: FolderSettings | None,
) -> CommandOutcome:
    """Carry out the command of *decision*. *settings* are those of the folder the command
    concerns (for ``/new``, ``/stop``, ``/status``)."""
    command = decision.command
    if command is None:
        return CommandOutcome(decision.ack)
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
        if command.folder is not None and settings is not None:
            await tx.new_conversation(
                command.folder,
                command.topic or "",
                conversation_chat(settings, chat_jid),
                now=now,
            )
        await tx.end_engagements(chat_jid)
    elif kind is CommandKind.STOP:
        return await _stop(tx, command, chat_jid, now=now, settings=settings)
    elif kind is CommandKind.STATUS:
        queue = await _queue_text(tx, command, chat_jid, now=now, settings=settings)
        return CommandOutcome(
            status_text(command, await tx.chat_state(chat_jid), now=now, queue=queue)
        )
    return CommandOutcome(decision.ack)


async def _conversation(
    tx: StoreTx, command: Command, chat_jid: str, *, now: datetime, settings: FolderSettings | None
) -> int | None:
    if command.folder is None or settings is None:
        return None
    return await tx.current_conversation(
        command.folder, command.topic or "", conversation_chat(settings, chat_jid), now=now
    )


async def _stop(
    tx: StoreTx, command: Command, chat_jid: str, *, now: datetime, settings: FolderSettings | None
) -> CommandOutcome:
    """Cancel the conversation's running turn — or, when none runs, the turn waiting to run (a
    retry after a failure, say). The messages it was answering are answered by the cancellation:
    they stay out of every later context (see ``arrange_history``)."""
    conversation_id = await _conversation(tx, command, chat_jid, now=now, settings=settings)
    jobs = [] if conversation_id is None else await tx.open_jobs(conversation_id)
    running = [job for job in jobs if job.status is JobStatus.RUNNING]
    if running:
        await tx.cancel_job(running[0].id, now=now)
        return CommandOutcome(f"stopped the turn in progress (job {running[0].id})", running[0].id)
    if jobs:
        await tx.cancel_job(jobs[0].id, now=now)
        return CommandOutcome(f"stopped the turn waiting to run (job {jobs[0].id})")
    return CommandOutcome(f"nothing is running for {command.folder}")


async def _queue_text(
    tx: StoreTx, command: Command, chat_jid: str, *, now: datetime, settings: FolderSettings | None
) -> str:
    conversation_id = await _conversation(tx, command, chat_jid, now=now, settings=settings)
    position = None if conversation_id is None else await tx.queue_position(conversation_id)
    if position is None:
        return "idle"
    state, ahead = position
    if state == "running":
        return "a turn is running"
    return f"a turn is queued ({ahead} ahead)" if ahead else "a turn is queued (next)"


def status_text(command: Command, chat: ChatState, *, now: datetime, queue: str = "idle") -> str:
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
    parts.append(f"queue: {queue}")
    return " · ".join(parts)
