"""Storing a turn's answer: the commit point of a turn (PIPELINE §2, §3, §5).

In one transaction: the run record; the model's response tags processed in order (memory,
state, conductor tags, delegations) and stripped from the text; the ``assistant`` message
holding exactly what the user receives; the run's traces; the effects the turn's tools asked
for; the outbox rows for the answer's chats and the folder's mirrors. Conductor actions that
write folders or tasks run after the commit, each in its own transaction, so a bad one never
half-applies anything; every problem becomes a host notice in the chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from postroom.core.errors import PostroomError
from postroom.core.folders import FolderSettings
from postroom.core.messages import MessageType, Sender
from postroom.core.tags import ConductorAction, process_tags
from postroom.engine.clock import Clock
from postroom.engine.folders import FolderService, FolderSpec
from postroom.engine.memory import MemoryService
from postroom.engine.notices import new_message_id, post_notice
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.engine.runner import AgentResult
from postroom.engine.tasks import TaskService
from postroom.engine.tools import TurnEffects
from postroom.engine.turns import Priority
from postroom.store.protocol import StoreTx
from postroom.store.records import JobKind, JobRecord, NewJob, NewMessage, RunRecord

__all__ = ["AnswerWriter", "Committed"]

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Committed:
    """What the commit stored, and what is left to do after it."""

    run_id: int
    answer_id: str | None
    actions: list[ConductorAction] = field(default_factory=list)
    delegated: list[int] = field(default_factory=list)


class AnswerWriter:
    def __init__(
        self,
        *,
        clock: Clock,
        memory: MemoryService,
        folders: FolderService | None = None,
        tasks: TaskService | None = None,
        assistant_name: str = "Postroom",
        max_depth: int = 3,
        max_attempts: int = 3,
    ) -> None:
        self._clock = clock
        self._memory = memory
        self._folders = folders
        self._tasks = tasks
        self._assistant = assistant_name
        self._max_depth = max_depth
        self._max_attempts = max_attempts

    async def write(
        self,
        tx: StoreTx,
        *,
        job: JobRecord,
        settings: FolderSettings,
        result: AgentResult,
        effects: TurnEffects | None,
        answer_chat: str,
        chats: Sequence[str],
        duration_ms: int,
    ) -> Committed:
        now = self._clock()
        response = result.response
        tags = process_tags(response.text, folder=job.folder, role=settings.role.value)
        text = tags.text
        run_id = await tx.insert_run(_run_record(job, settings, result, now, duration_ms, text))
        effects = effects or TurnEffects()
        effects.memories.extend((m.category, m.fact) for m in tags.memories)
        effects.states.extend((s.key, s.value) for s in tags.states)
        effects.delegations.extend((d.folder, d.task) for d in tags.delegations)
        problems = list(tags.problems)

        reply_to = job.messages[-1][0] if job.messages else None
        for trace in result.traces:
            await tx.insert_message(
                NewMessage(
                    id=new_message_id(),
                    chat_jid=answer_chat,
                    sender=trace.sender,
                    sender_name=trace.sender,
                    content=trace.content,
                    timestamp=now,
                    message_type=MessageType.TRACE,
                    is_from_me=True,
                    metadata={**trace.metadata, "job_id": job.id},
                    topic=job.topic,
                    routed_to=job.folder,
                    conversation_id=job.conversation_id,
                    run_id=run_id,
                )
            )
        answer_id: str | None = None
        if text.strip():
            answer_id = new_message_id()
            metadata: dict[str, Any] = {
                "job_id": job.id,
                "usage": dict(result.usage),
                "cost": result.cost,
            }
            conversation_id: int | None = job.conversation_id
            if job.task_id is not None:
                # MESSAGES §4: a scheduled answer is shown in its task's chat, outside every
                # conversation, so it never enters a later context of that chat.
                answer_chat, conversation_id = job.chat_jid, None
                metadata["task_id"] = job.task_id
            await tx.insert_message(
                NewMessage(
                    id=answer_id,
                    chat_jid=answer_chat,
                    sender=Sender.BOT.value,
                    sender_name=self._assistant,
                    content=text,
                    timestamp=now,
                    message_type=MessageType.ASSISTANT,
                    is_from_me=True,
                    metadata=metadata,
                    topic=job.topic,
                    reply_to=reply_to,
                    routed_to=job.folder,
                    conversation_id=conversation_id,
                    run_id=run_id,
                )
            )
            await self._outbox(tx, job, settings, answer_id, answer_chat, text, reply_to, chats)
        elif not effects.messages and not effects.delegations:
            # Silence would look like a lost message: say that the agent had nothing.
            problems.append(f"the agent returned an empty answer (job {job.id}, run {run_id})")

        for category, fact in effects.memories:
            await self._memory.remember(tx, job.folder, category, fact, now=now, run_id=run_id)
        for key, value in effects.states:
            await tx.set_state(job.folder, key, value, now=now)
        for chat_jid, message in effects.messages:
            sent_id = new_message_id()
            await tx.insert_message(
                NewMessage(
                    id=sent_id,
                    chat_jid=chat_jid,
                    sender=Sender.BOT.value,
                    sender_name=self._assistant,
                    content=message,
                    timestamp=now,
                    message_type=MessageType.ASSISTANT,
                    is_from_me=True,
                    metadata={"job_id": job.id, "source": "send_message"},
                    routed_to=job.folder,
                    run_id=run_id,
                )
            )
            outbound = OutboundMessage(
                sent_id, chat_jid, MessageType.ASSISTANT.value, message, folder=job.folder
            )
            await write_outbox(
                tx, plan_deliveries(outbound, [chat_jid], kind=DeliveryKind.REPLY, now=now)
            )
        committed = Committed(run_id, answer_id, list(tags.actions))
        for folder, task in effects.delegations:
            if job.depth + 1 > self._max_depth:
                problems.append(
                    f"delegation to {folder} refused: delegation is limited to "
                    f"{self._max_depth} levels"
                )
                continue
            if await tx.get_folder(folder) is None:
                # No turn may run for a folder without a row: it would have no persona and
                # the default provider (the delegate tool refuses the same way).
                problems.append(f"delegation to {folder} refused: there is no folder {folder}")
                continue
            committed.delegated.append(await self._delegate(tx, job, folder, task, now))
        for problem in problems:
            for chat_jid in chats:
                await post_notice(
                    tx,
                    chat_jid,
                    problem,
                    clock=self._clock,
                    topic=job.topic,
                    metadata={"source": "tags", "job_id": job.id},
                )
        return committed

    async def _outbox(
        self,
        tx: StoreTx,
        job: JobRecord,
        settings: FolderSettings,
        answer_id: str,
        answer_chat: str,
        text: str,
        reply_to: str | None,
        chats: Sequence[str],
    ) -> None:
        now = self._clock()
        outbound = OutboundMessage(
            answer_id,
            answer_chat,
            MessageType.ASSISTANT.value,
            text,
            folder=job.folder,
            topic=job.topic,
            reply_to=reply_to,
        )
        scheduled = job.kind is JobKind.SCHEDULED
        rows = plan_deliveries(
            outbound,
            chats,
            kind=DeliveryKind.SCHEDULED if scheduled else DeliveryKind.REPLY,
            now=now,
            # ROUTING §4: a delivered reply engages its chat; scheduled answers never do.
            engage=not scheduled,
        )
        mirrors = [chat for chat in settings.mirror if chat not in chats]
        mirror_copy = OutboundMessage(
            answer_id,
            answer_chat,
            MessageType.ASSISTANT.value,
            text,
            folder=job.folder,
            topic=job.topic,
        )
        rows += plan_deliveries(mirror_copy, mirrors, kind=DeliveryKind.MIRROR, now=now)
        await write_outbox(tx, rows)

    async def _delegate(
        self, tx: StoreTx, job: JobRecord, folder: str, task: str, now: datetime
    ) -> int:
        """PIPELINE §5: a turn of the target folder in its conversation with the origin chat;
        the task is a ``system`` row there; the answer goes to the same chat, independently."""
        chat_jid = job.messages[-1][1] if job.messages else job.chat_jid
        conversation_id = await tx.current_conversation(folder, "", chat_jid, now=now)
        await tx.insert_message(
            NewMessage(
                id=new_message_id(),
                chat_jid=chat_jid,
                sender=Sender.SYSTEM.value,
                sender_name=job.folder,
                content=task,
                timestamp=now,
                message_type=MessageType.SYSTEM,
                is_from_me=True,
                metadata={"source": "delegate", "from": job.folder, "job_id": job.id},
                routed_to=folder,
                conversation_id=conversation_id,
            )
        )
        return await tx.insert_job(
            NewJob(
                conversation_id=conversation_id,
                folder=folder,
                chat_jid=chat_jid,
                topic="",
                priority=Priority.DELEGATED,
                max_attempts=self._max_attempts,
                run_at=now,
                created_at=now,
                kind=JobKind.DELEGATED,
                depth=job.depth + 1,
            )
        )

    async def apply_actions(
        self, job: JobRecord, actions: Sequence[ConductorAction], *, chat_jid: str
    ) -> list[str]:
        """Carry out conductor actions, each on its own; return a sentence per outcome."""
        outcomes: list[str] = []
        actor = f"agent:{job.folder}"
        for action in actions:
            fields: dict[str, Any] = dict(action.fields)
            if fields.get("role") == "admin":
                # A conductor manages agents; it cannot make one more powerful than itself.
                outcomes.append(
                    f"⚠️ {action.kind.upper()} not applied: a conductor cannot grant the admin role"
                )
                continue
            try:
                if action.kind == "create_agent" and self._folders is not None:
                    path = str(fields.pop("path"))
                    await self._folders.add_folder(path, FolderSpec(**fields), actor=actor)
                    outcomes.append(f"created agent {path}")
                elif action.kind == "update_agent" and self._folders is not None:
                    path = str(fields.pop("folder"))
                    await self._folders.update(path, fields, actor=actor)
                    outcomes.append(f"updated agent {path}")
                elif action.kind in ("create_cron", "create_heartbeat") and self._tasks:
                    schedule = str(fields["schedule"])
                    task = await self._tasks.add(
                        folder=str(fields.get("folder") or job.folder),
                        chat_jid=str(fields.get("chat_jid") or chat_jid),
                        schedule=schedule,
                        prompt=str(fields["prompt"]),
                        tz=fields.get("tz"),
                        actor=actor,
                    )
                    outcomes.append(f"scheduled task {task.id} ({task.schedule})")
            except PostroomError as exc:
                outcomes.append(f"⚠️ {action.kind.upper()} not applied: {exc}")
        return outcomes


def _run_record(
    job: JobRecord,
    settings: FolderSettings,
    result: AgentResult,
    now: datetime,
    duration_ms: int,
    text: str,
) -> RunRecord:
    record = result.request.to_record()
    raws = list(result.raws)
    return RunRecord(
        job_id=job.id,
        folder=job.folder,
        conversation_id=job.conversation_id,
        provider=settings.provider,
        model=result.response.model or settings.model,
        account=result.response.account,
        system=record["system"],
        messages=record["messages"],
        tools=record["tools"],
        output_raw=raws[0] if len(raws) == 1 else "\n".join(raws),
        output=text,
        usage=dict(result.usage),
        cost=result.cost,
        duration_ms=duration_ms,
        outcome="ok",
        started_at=job.started_at or now,
        finished_at=now,
        skills=record["skills"],
    )
