"""The turn queue's rules (PIPELINE §2): enqueue or join, priorities, busy policies, and the
operator's retry and cancel.

A conversation is ``(folder, chat_jid, topic)`` — or ``(folder, topic)`` for a folder with
``session = "shared"``. A fired message joins the conversation's queued turn if there is one;
if a turn is running, the folder's ``busy_policy`` decides: ``followup`` queues one turn after
it, ``interrupt`` cancels it and queues one that answers everything, ``steer`` queues the
follow-up too, and the running turn takes its messages over at its next model call (the worker
does that; a run that calls the model no more leaves them to the follow-up).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

from postroom.core.errors import Conflict, InvalidInput, NotFound
from postroom.core.folders import BusyPolicy, FolderSettings, Role, Session, is_within
from postroom.engine.clock import Clock
from postroom.engine.signals import Signals
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import JobKind, JobRecord, JobStatus, NewJob

__all__ = [
    "FINISHED",
    "Enqueued",
    "Priority",
    "QueueSettings",
    "TurnService",
    "conversation_chat",
    "enqueue_turn",
    "job_to_dict",
    "reply_chats",
    "turn_priority",
]


#: The statuses a job does not leave by itself.
FINISHED = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})


class Priority(IntEnum):
    """Lower runs first; first come, first served within a priority."""

    OWNER = 1
    CONDUCTOR = 3
    DELEGATED = 4
    NORMAL = 5
    SCHEDULED = 10


@dataclass(frozen=True, slots=True)
class QueueSettings:
    max_attempts: int = 3
    backoff_base_s: float = 60.0
    max_concurrent_turns: int = 8
    lease_s: float = 30.0
    lease_renew_s: float = 10.0
    shutdown_grace_s: float = 30.0
    backstop_s: float = 1.0


@dataclass(frozen=True, slots=True)
class Enqueued:
    job_id: int
    conversation_id: int
    joined: bool
    #: A running turn this message interrupted (cancelled), to stop now.
    interrupted: int | None = None


def turn_priority(
    sender: str, settings: FolderSettings, owners: frozenset[str], *, owner: bool = False
) -> int:
    """*owner*: an owner principal admitted the sender (ROUTING §8)."""
    if owner or sender in owners:
        return Priority.OWNER
    if settings.role is Role.CONDUCTOR:
        return Priority.CONDUCTOR
    return Priority.NORMAL


def reply_chats(job: JobRecord) -> list[str]:
    """The chats whose messages the turn answers (the task's chat for a scheduled turn)."""
    chats = list(dict.fromkeys(chat for _, chat in job.messages))
    return chats or [job.chat_jid]


def conversation_chat(settings: FolderSettings, chat_jid: str) -> str | None:
    """The chat a conversation is keyed by: ``None`` when the folder shares one history."""
    return None if settings.session is Session.SHARED else chat_jid


async def enqueue_turn(
    tx: StoreTx,
    *,
    folder: str,
    topic: str,
    chat_jid: str,
    message_ref: tuple[str, str],
    priority: int,
    settings: FolderSettings,
    max_attempts: int,
    now: datetime,
) -> Enqueued:
    """Make sure a turn will answer *message_ref*: join the queued turn, or queue a new one."""
    conversation_id = await tx.current_conversation(
        folder, topic, conversation_chat(settings, chat_jid), now=now
    )
    jobs = await tx.open_jobs(conversation_id, lock=True)
    queued = [job for job in jobs if job.status is JobStatus.QUEUED]
    running = [job for job in jobs if job.status is JobStatus.RUNNING]
    if queued:
        job = queued[-1]
        await tx.attach_to_job(job.id, [message_ref])
        await tx.raise_job_priority(job.id, priority)
        return Enqueued(job.id, conversation_id, joined=True)
    new_id = await tx.insert_job(
        NewJob(
            conversation_id=conversation_id,
            folder=folder,
            chat_jid=chat_jid,
            topic=topic,
            priority=priority,
            max_attempts=max_attempts,
            run_at=now,
            created_at=now,
        )
    )
    interrupted: int | None = None
    if running and settings.busy_policy is BusyPolicy.INTERRUPT:
        current = running[0]
        # The new turn answers what the interrupted one was answering, and this message.
        await tx.cancel_job(current.id, now=now)
        await tx.move_job_messages(current.id, new_id)
        interrupted = current.id
    await tx.attach_to_job(new_id, [message_ref])
    return Enqueued(new_id, conversation_id, joined=False, interrupted=interrupted)


def job_to_dict(job: JobRecord, *, run_ids: list[int] | None = None) -> dict[str, Any]:
    """The public job object (INTERFACES §4); with *run_ids*, also the runs it made."""
    out = {
        "id": job.id,
        "conversation_id": job.conversation_id,
        "folder": job.folder,
        "chat_jid": job.chat_jid,
        "topic": job.topic,
        "kind": job.kind.value,
        "priority": job.priority,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at.isoformat(),
        "last_error": job.last_error,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "message_ids": [message_id for message_id, _ in job.messages],
    }
    if run_ids is not None:
        out["run_ids"] = run_ids
    return out


class TurnService:
    """The operator's view of the queue: list, retry, cancel (CLI, API and dashboard)."""

    def __init__(self, *, store: Store, signals: Signals, clock: Clock) -> None:
        self._store = store
        self._signals = signals
        self._clock = clock

    async def list_jobs(
        self, *, status: str | None = None, limit: int = 100, within: str | None = None
    ) -> list[JobRecord]:
        """The newest *limit* turns (of one status), those of a folder's tree *within* one."""
        if status is not None and status not in {s.value for s in JobStatus}:
            raise InvalidInput(
                f"Unknown job status {status!r}; use one of "
                f"{', '.join(s.value for s in JobStatus)}."
            )
        async with self._store.read() as tx:
            jobs = await tx.list_jobs(status=status, limit=limit)
        return [job for job in jobs if within is None or is_within(job.folder, within)]

    async def get_job(self, job_id: int) -> JobRecord:
        async with self._store.read() as tx:
            job = await tx.get_job(job_id)
        if job is None:
            raise NotFound(f"There is no job {job_id}.")
        return job

    async def finished(self, job_id: int, *, timeout_s: float, poll_s: float = 0.2) -> JobRecord:
        """The job once it is done, failed or cancelled; ``TimeoutError`` after *timeout_s*.

        For a person waiting on a command (``send --wait``): another process runs the turn, so
        the job's row is read every *poll_s* — never on a hot path.
        """
        async with asyncio.timeout(timeout_s):
            while True:
                job = await self.get_job(job_id)
                if job.status in FINISHED:
                    return job
                await asyncio.sleep(poll_s)

    async def retry(self, job_id: int) -> JobRecord:
        async with self._store.write() as tx:
            job = await tx.requeue_job(job_id, now=self._clock())
            if job is None:
                current = await tx.get_job(job_id)
                if current is None:
                    raise NotFound(f"There is no job {job_id}.")
                raise Conflict(
                    f"Job {job_id} is {current.status.value}; only failed or cancelled jobs "
                    "can be retried."
                )
        self._signals.turns.wake()
        return job

    async def cancel(self, job_id: int) -> JobRecord:
        async with self._store.write() as tx:
            current = await tx.get_job(job_id)
            if current is None:
                raise NotFound(f"There is no job {job_id}.")
            job = await tx.cancel_job(job_id, now=self._clock())
            if job is None:
                raise Conflict(
                    f"Job {job_id} is {current.status.value}; only queued or running jobs can "
                    "be cancelled."
                )
        # A running turn stops its typing as it ends; a queued one showed typing since it was
        # queued (PIPELINE §1.5), and it ends here.
        self._signals.cancel_turn(job_id)
        if current.status is JobStatus.QUEUED and job.kind is not JobKind.SCHEDULED:
            for chat_jid in reply_chats(job):
                self._signals.typing(chat_jid, job.folder, False)
        return job
