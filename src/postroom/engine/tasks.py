"""Scheduled tasks (PIPELINE §7): the operator's task tools and the scheduler tick.

Each tick enqueues the due tasks at priority 10. The flood guard: a task whose previous turn is
still queued or running is not enqueued again, and its ``next_run`` is not advanced, so a slow
task never piles up. A scheduled turn runs in a conversation of its own (``task:<id>``, a new
generation each run): the folder's persona and the prompt, no history; its answer is delivered
to the task's chat and never engages it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import structlog

from postroom.core.durations import format_duration
from postroom.core.errors import InvalidInput, NotFound
from postroom.core.jid import parse_jid
from postroom.core.messages import MessageType, Sender
from postroom.core.schedule import Schedule, parse_schedule
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.notices import new_message_id
from postroom.engine.signals import Signals
from postroom.engine.turns import Priority, QueueSettings
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import JobKind, NewJob, NewMessage, TaskRecord

__all__ = ["Scheduler", "TaskService", "task_chat", "task_to_dict"]

log = structlog.get_logger(__name__)

MAX_PROMPT_CHARS = 32_000
DEFAULT_TICK_S = 10.0


def task_chat(task_id: int) -> str:
    """The conversation a task's runs live in (not the chat it answers)."""
    return f"task:{task_id}"


def task_to_dict(task: TaskRecord) -> dict[str, Any]:
    """The public task object (INTERFACES §4)."""
    return {
        "id": task.id,
        "folder": task.folder,
        "chat_jid": task.chat_jid,
        "schedule": task.schedule,
        "tz": task.tz,
        "prompt": task.prompt,
        "enabled": task.enabled,
        "next_run": task.next_run.isoformat() if task.next_run else None,
        "last_run": task.last_run.isoformat() if task.last_run else None,
        "last_status": task.last_status,
    }


class TaskService:
    """Add, list, pause, resume and remove tasks (CLI, API, dashboard)."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        signals: Signals,
        clock: Clock,
        tick_s: float = DEFAULT_TICK_S,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._signals = signals
        self._clock = clock
        #: The scheduler's tick: no task can run more often than this.
        self._tick_s = tick_s

    async def add(
        self,
        *,
        folder: str,
        chat_jid: str,
        schedule: str,
        prompt: str,
        tz: str | None = None,
        actor: str,
    ) -> TaskRecord:
        parse_jid(chat_jid, what="chat_jid")
        if not prompt.strip():
            raise InvalidInput("The prompt is empty; say what the task should do.")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidInput(f"The prompt is longer than {MAX_PROMPT_CHARS} characters.")
        parsed = parse_schedule(schedule, tz or None)
        now = self._clock()
        self._check_runs(parsed, now)
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            if folder not in snapshot.paths:
                raise InvalidInput(f"Folder {folder} does not exist.")
            record = TaskRecord(
                id=0,
                folder=folder,
                chat_jid=chat_jid,
                schedule=parsed.text,
                tz=parsed.tz,
                prompt=prompt,
                enabled=True,
                next_run=parsed.first_after(now),
                last_run=None,
                last_status=None,
                created_at=now,
                created_by=actor,
            )
            task_id = await tx.insert_task(record)
            task = await tx.get_task(task_id)
        assert task is not None
        return task

    def _check_runs(self, schedule: Schedule, now: datetime) -> None:
        """Refuse a schedule that could not run as written: a one-shot time already past, an
        interval the scheduler's tick cannot keep."""
        if schedule.kind == "once" and schedule.at is not None and schedule.at <= now:
            raise InvalidInput(
                f"The time {schedule.text} is in the past (it is now "
                f"{now.strftime('%Y-%m-%d %H:%M:%S')} UTC); give a time to come."
            )
        interval = schedule.interval_s
        if interval is not None and interval < self._tick_s:
            tick = format_duration(self._tick_s)
            raise InvalidInput(
                f"{schedule.text} is more often than the scheduler's tick ({tick}) can run it; "
                f"use every {tick} or longer, or lower [scheduler] tick."
            )

    async def list(self) -> list[TaskRecord]:
        async with self._store.read() as tx:
            return await tx.list_tasks()

    async def get(self, task_id: int) -> TaskRecord:
        async with self._store.read() as tx:
            task = await tx.get_task(task_id)
        if task is None:
            raise NotFound(f"There is no task {task_id}.")
        return task

    async def pause(self, task_id: int) -> TaskRecord:
        return await self._set_enabled(task_id, False)

    async def resume(self, task_id: int) -> TaskRecord:
        return await self._set_enabled(task_id, True)

    async def remove(self, task_id: int) -> TaskRecord:
        async with self._store.write() as tx:
            task = await tx.get_task(task_id)
            if task is None:
                raise NotFound(f"There is no task {task_id}.")
            await tx.delete_task(task_id)
        return task

    async def _set_enabled(self, task_id: int, enabled: bool) -> TaskRecord:
        now = self._clock()
        async with self._store.write() as tx:
            task = await tx.get_task(task_id)
            if task is None:
                raise NotFound(f"There is no task {task_id}.")
            changes: dict[str, Any] = {"enabled": enabled}
            if enabled and (task.next_run is None or task.next_run < now):
                # Resuming does not replay the runs missed while paused.
                schedule = parse_schedule(task.schedule, task.tz)
                changes["next_run"] = (
                    schedule.next_after(now) if task.last_run else schedule.first_after(now)
                )
            await tx.update_task(task_id, **changes)
            updated = await tx.get_task(task_id)
        assert updated is not None
        return updated


class Scheduler:
    """Every tick, turns due tasks into queued turns."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        signals: Signals,
        clock: Clock,
        queue: QueueSettings,
        tick_s: float = DEFAULT_TICK_S,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._signals = signals
        self._clock = clock
        self._queue = queue
        self._tick_s = tick_s
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("tasks.tick_failed")  # the next tick tries again
            try:
                async with asyncio.timeout(self._tick_s):
                    await self._stopping.wait()
            except TimeoutError:
                continue

    async def tick(self) -> list[int]:
        """Enqueue what is due now; return the ids of the turns queued."""
        now = self._clock()
        queued: list[int] = []
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            for task in await tx.due_tasks(now=now):
                if await tx.task_has_open_job(task.id):
                    continue  # flood guard: next_run stays, the task runs once the last one ends
                if task.folder not in snapshot.paths:
                    await tx.update_task(
                        task.id, last_status=f"skipped: folder {task.folder} does not exist"
                    )
                    continue
                queued.append(await self._enqueue(tx, task, now))
        if queued:
            log.info("tasks.enqueued", job_ids=queued)
            self._signals.turns.wake()
        return queued

    async def _enqueue(self, tx: StoreTx, task: TaskRecord, now: datetime) -> int:
        conversation_id = await tx.new_conversation(task.folder, "", task_chat(task.id), now=now)
        await tx.insert_message(
            NewMessage(
                id=new_message_id(),
                chat_jid=task_chat(task.id),
                sender=Sender.SYSTEM.value,
                sender_name="scheduler",
                content=task.prompt,
                timestamp=now,
                message_type=MessageType.SYSTEM,
                is_from_me=True,
                metadata={"source": "task", "task_id": task.id},
                routed_to=task.folder,
                conversation_id=conversation_id,
            )
        )
        job_id = await tx.insert_job(
            NewJob(
                conversation_id=conversation_id,
                folder=task.folder,
                chat_jid=task.chat_jid,
                topic="",
                priority=Priority.SCHEDULED,
                max_attempts=self._queue.max_attempts,
                run_at=now,
                created_at=now,
                kind=JobKind.SCHEDULED,
                task_id=task.id,
            )
        )
        schedule = parse_schedule(task.schedule, task.tz)
        next_run = schedule.next_after(now)
        await tx.update_task(
            task.id,
            last_run=now,
            next_run=next_run,
            enabled=task.enabled and next_run is not None,
        )
        return job_id
