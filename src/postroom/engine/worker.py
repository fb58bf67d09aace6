"""Workers: claim turns, build their context, run the model, store the answer (PIPELINE §2–§3).

Each worker claims the most urgent due turn whose conversation has none running, under a lease
it renews while the model works. The context is built when the run starts (MESSAGES §4), never
frozen at enqueue time. The turn's commit point is one transaction that stores the run record,
the ``assistant`` message and its outbox rows, and marks the turn done — so a turn whose answer
was stored is never run again, and a crash at any other moment only repeats work not yet
committed. A run that fails is retried after ``backoff_base × 2^n``; after the last attempt the
chat gets a host notice. Workers sleep until an enqueue wakes them (a slow timer is the
backstop for turns another process queued and for retries coming due).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import structlog

from postroom.core.context import (
    arrange_history,
    format_messages_for_sdk,
    render_system_prompt,
    system_notices,
)
from postroom.core.folders import FolderDefaults, FolderSettings
from postroom.core.messages import MessageType, Sender
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.metrics import Metrics, NullMetrics
from postroom.engine.notices import new_message_id, post_notice
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.engine.persona import PersonaSource
from postroom.engine.runner import AgentRunner
from postroom.engine.signals import Signals
from postroom.engine.turns import QueueSettings
from postroom.llm.base import ModelRequest, ModelResponse, ProviderError
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import JobKind, JobRecord, JobStatus, NewMessage, RunRecord

__all__ = ["ContextSettings", "WorkerPool"]

log = structlog.get_logger(__name__)

TYPING_REFRESH_S = 4.0


@dataclass(frozen=True, slots=True)
class ContextSettings:
    max_messages: int = 200
    observe_window_messages: int = 20
    observe_window_chars: int = 8000


class _LeaseLost(Exception):
    """The turn was taken from this worker (requeued or cancelled) before it could commit."""


@dataclass(slots=True)
class _Running:
    """A turn this pool is running: its task, its lease, and why it was cancelled (if it was)."""

    token: str
    task: asyncio.Task[None] | None = None
    reason: str = ""

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
        if self.task is not None:
            self.task.cancel()


class WorkerPool:
    """``max_concurrent_turns`` workers over the store's queue."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        runner: AgentRunner,
        signals: Signals,
        clock: Clock,
        queue: QueueSettings,
        context: ContextSettings,
        defaults: FolderDefaults,
        owner: str,
        boot_id: str,
        assistant_name: str = "Postroom",
        metrics: Metrics | None = None,
        personas: PersonaSource | None = None,
    ) -> None:
        self._personas = personas
        self._metrics = metrics or NullMetrics()
        self._store = store
        self._catalog = catalog
        self._runner = runner
        self._signals = signals
        self._clock = clock
        self._queue = queue
        self._context = context
        self._defaults = defaults
        self._owner = owner
        self._boot_id = boot_id
        self._assistant_name = assistant_name
        self._running: dict[int, _Running] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._stopping = False
        signals.on_cancel(self._cancel)

    @property
    def running_jobs(self) -> list[int]:
        return sorted(self._running)

    async def start(self) -> None:
        """Requeue what an earlier process of this server left running, then start working."""
        async with self._store.write() as tx:
            requeued = await tx.release_previous_boot(owner=self._owner, boot_id=self._boot_id)
        if requeued:
            log.warning("turns.recovered", job_ids=requeued)
        for index in range(self._queue.max_concurrent_turns):
            self._workers.append(asyncio.create_task(self._work(), name=f"worker-{index}"))
        self._workers.append(asyncio.create_task(self._sweep(), name="lease-sweeper"))
        self._signals.turns.wake()

    async def stop(self) -> None:
        """Stop claiming; let running turns finish for up to the grace period; then release
        their leases so they are requeued (without using an attempt)."""
        self._stopping = True
        self._signals.turns.wake()
        pending = [entry.task for entry in self._running.values() if entry.task is not None]
        if pending:
            await asyncio.wait(pending, timeout=self._queue.shutdown_grace_s)
        for job_id, entry in list(self._running.items()):
            entry.cancel("shutdown")
            async with self._store.write() as tx:
                await tx.release_lease(job_id, entry.token)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()

    def _cancel(self, job_id: int) -> None:
        entry = self._running.get(job_id)
        if entry is not None:
            entry.cancel("cancelled")

    # -- the claim loop -------------------------------------------------------------------------
    async def _work(self) -> None:
        while not self._stopping:
            job = await self._claim()
            if job is None:
                await self._signals.turns.wait(await self._idle_for())
                continue
            assert job.lease_token is not None
            entry = _Running(job.lease_token)
            entry.task = asyncio.create_task(self._execute(job, entry), name=f"turn-{job.id}")
            self._running[job.id] = entry
            try:
                # wait() neither raises the turn's cancellation here nor cancels the turn when
                # this worker is stopped: a turn's fate is decided by stop() and cancel hooks.
                await asyncio.wait([entry.task])
            finally:
                # Only our own entry: the same job may have been requeued and claimed again.
                if entry.task.done() and self._running.get(job.id) is entry:
                    del self._running[job.id]

    async def _claim(self) -> JobRecord | None:
        if self._stopping:
            return None
        now = self._clock()
        async with self._store.write() as tx:
            return await tx.claim_job(
                now=now,
                lease_until=now + timedelta(seconds=self._queue.lease_s),
                owner=self._owner,
                boot_id=self._boot_id,
                token=secrets.token_hex(8),
            )

    async def _idle_for(self) -> float:
        async with self._store.read() as tx:
            due = await tx.next_job_due()
        wait = self._queue.backstop_s
        if due is not None:
            wait = min(wait, max((due - self._clock()).total_seconds(), 0.0))
        return wait

    async def _sweep(self) -> None:
        """Requeue turns whose worker died (their lease ran out), without using an attempt."""
        while not self._stopping:
            await asyncio.sleep(max(self._queue.lease_s / 3, 0.05))
            async with self._store.write() as tx:
                released = await tx.release_expired_leases(now=self._clock())
            if released:
                log.warning("turns.lease_expired", job_ids=released)
                self._signals.turns.wake()

    # -- one turn ---------------------------------------------------------------------------
    async def _execute(self, job: JobRecord, entry: _Running) -> None:
        assert job.lease_token is not None
        token = job.lease_token
        settings = self._catalog.snapshot.settings(job.folder, self._defaults)
        chats = _reply_chats(job)
        log.info("turn.started", job_id=job.id, folder=job.folder, chat_jid=job.chat_jid)
        helpers = [
            asyncio.create_task(self._keep_lease(job.id, token, entry), name=f"lease-{job.id}"),
        ]
        if job.kind is not JobKind.SCHEDULED:
            helpers.append(
                asyncio.create_task(self._keep_typing(chats, job.folder), name=f"typing-{job.id}")
            )
        request: ModelRequest | None = None
        begun = time.monotonic()

        def elapsed_ms() -> int:
            return int((time.monotonic() - begun) * 1000)

        try:
            request, answer_chat = await self._prepare(job, settings, chats)
            response = await self._runner.run(request, settings=settings)
            await self._succeed(
                job, token, settings, request, response, answer_chat, chats, elapsed_ms()
            )
        except asyncio.CancelledError:
            reason = entry.reason or "cancelled"
            if reason != "shutdown" and request is not None:
                await self._record(job, settings, request, outcome=reason, duration_ms=elapsed_ms())
            log.info("turn.cancelled", job_id=job.id, reason=reason)
        except _LeaseLost:
            log.warning("turn.lease_lost", job_id=job.id)
        except ProviderError as exc:
            await self._failed(job, token, settings, request, str(exc), exc.retryable, elapsed_ms())
        except Exception as exc:  # a bug in a provider or in context building: retry, loudly
            log.exception("turn.crashed", job_id=job.id)
            error = f"{type(exc).__name__}: {exc}"
            await self._failed(job, token, settings, request, error, True, elapsed_ms())
        finally:
            for helper in helpers:
                helper.cancel()
            for chat_jid in chats:
                self._signals.typing(chat_jid, job.folder, False)

    async def _prepare(
        self, job: JobRecord, settings: FolderSettings, chats: Sequence[str]
    ) -> tuple[ModelRequest, str]:
        now = self._clock()
        async with self._store.write() as tx:
            conversation = await tx.get_conversation(job.conversation_id)
            conversation_chat = conversation.chat_jid if conversation else job.chat_jid
            if job.kind is JobKind.TURN:
                # MESSAGES §4: what was observed in these chats joins the conversation now.
                for chat_jid in chats:
                    await tx.attach_observed(
                        job.folder,
                        chat_jid,
                        job.conversation_id,
                        max_messages=self._context.observe_window_messages,
                        max_chars=self._context.observe_window_chars,
                    )
            rows = await tx.conversation_messages(
                job.conversation_id, limit=self._context.max_messages
            )
        history = arrange_history(
            [row.message for row in rows],
            turn=job.id,
            answered_by={
                (row.message.id, row.message.chat_jid): row.job_id
                for row in rows
                if row.job_id is not None
            },
            pending={
                row.job_id
                for row in rows
                if row.job_id is not None and row.job_status in ("queued", "running")
            },
        )
        answer_chat = conversation_chat or (job.messages[-1][1] if job.messages else job.chat_jid)
        notices = system_notices(now=now, chat_jid=job.chat_jid, folder=job.folder, topic=job.topic)
        persona = settings.persona
        if self._personas is not None:
            persona = self._personas.persona(job.folder, self._catalog.snapshot.folders, persona)
        request = ModelRequest(
            system=render_system_prompt(persona, notices=notices),
            messages=format_messages_for_sdk(history),
            model=settings.model,
        )
        return request, answer_chat

    async def _succeed(
        self,
        job: JobRecord,
        token: str,
        settings: FolderSettings,
        request: ModelRequest,
        response: ModelResponse,
        answer_chat: str,
        chats: Sequence[str],
        elapsed_ms: int,
    ) -> None:
        now = self._clock()
        text = response.text
        answer_id = new_message_id()
        async with self._store.write() as tx:
            run_id = await tx.insert_run(
                _run_record(
                    job,
                    settings,
                    request,
                    self._clock,
                    response=response,
                    outcome="ok",
                    duration_ms=elapsed_ms,
                )
            )
            if text.strip():
                reply_to = job.messages[-1][0] if job.messages else None
                await tx.insert_message(
                    NewMessage(
                        id=answer_id,
                        chat_jid=answer_chat,
                        sender=Sender.BOT.value,
                        sender_name=self._assistant_name,
                        content=text,
                        timestamp=now,
                        message_type=MessageType.ASSISTANT,
                        is_from_me=True,
                        metadata={"job_id": job.id, "usage": dict(response.usage)},
                        topic=job.topic,
                        reply_to=reply_to,
                        routed_to=job.folder,
                        conversation_id=job.conversation_id,
                        run_id=run_id,
                    )
                )
                await self._write_answer(
                    tx, job, settings, answer_id, answer_chat, text, reply_to, chats
                )
            else:
                # Silence would look like a lost message: say that the agent had nothing.
                for chat_jid in chats:
                    await post_notice(
                        tx,
                        chat_jid,
                        f"the agent returned an empty answer (job {job.id}, run {run_id})",
                        clock=self._clock,
                        topic=job.topic,
                        metadata={"source": "empty_answer", "job_id": job.id},
                    )
            if not await tx.finish_job(
                job.id,
                token,
                status=JobStatus.DONE,
                now=now,
                answer_id=answer_id if text.strip() else None,
            ):
                raise _LeaseLost
            if job.task_id is not None:
                await tx.update_task(job.task_id, last_status="ok")
        self._metrics.turn("ok", elapsed_ms / 1000)
        log.info(
            "turn.answered",
            job_id=job.id,
            run_id=run_id,
            message_id=answer_id if text.strip() else None,
            duration_ms=elapsed_ms,
        )
        self._signals.deliveries.wake()
        self._signals.stored.wake()

    async def _write_answer(
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
            message_id=answer_id,
            message_chat_jid=answer_chat,
            message_type=MessageType.ASSISTANT.value,
            content=text,
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
            message_id=answer_id,
            message_chat_jid=answer_chat,
            message_type=MessageType.ASSISTANT.value,
            content=text,
            folder=job.folder,
            topic=job.topic,
        )
        rows += plan_deliveries(mirror_copy, mirrors, kind=DeliveryKind.MIRROR, now=now)
        await write_outbox(tx, rows)

    async def _failed(
        self,
        job: JobRecord,
        token: str,
        settings: FolderSettings,
        request: ModelRequest | None,
        error: str,
        retryable: bool,
        duration_ms: int,
    ) -> None:
        now = self._clock()
        attempts = job.attempts + 1
        final = attempts >= job.max_attempts or not retryable
        async with self._store.write() as tx:
            if request is not None:
                await tx.insert_run(
                    _run_record(
                        job,
                        settings,
                        request,
                        self._clock,
                        outcome="error",
                        error=error,
                        duration_ms=duration_ms,
                    )
                )
            if final:
                if not await tx.finish_job(
                    job.id,
                    token,
                    status=JobStatus.FAILED,
                    now=now,
                    error=error,
                    attempts=attempts,
                ):
                    return
                for chat_jid in _reply_chats(job):
                    await post_notice(
                        tx,
                        chat_jid,
                        f"⚠️ could not answer (job {job.id}): {error}",
                        clock=self._clock,
                        topic=job.topic,
                        metadata={"source": "turn_failed", "job_id": job.id},
                    )
                if job.task_id is not None:
                    await tx.update_task(job.task_id, last_status=f"failed: {error}")
            else:
                delay_s = self._queue.backoff_base_s * 2**attempts
                if not await tx.retry_job_later(
                    job.id,
                    token,
                    attempts=attempts,
                    run_at=now + timedelta(seconds=delay_s),
                    error=error,
                ):
                    return
        self._metrics.turn("error", None)
        log.warning("turn.failed", job_id=job.id, attempts=attempts, final=final, error=error)
        if final:
            self._signals.deliveries.wake()
            self._signals.stored.wake()

    async def _record(
        self,
        job: JobRecord,
        settings: FolderSettings,
        request: ModelRequest,
        *,
        outcome: str,
        duration_ms: int,
    ) -> None:
        with contextlib.suppress(Exception):  # a record of a cancelled run is best-effort
            async with self._store.write() as tx:
                await tx.insert_run(
                    _run_record(
                        job,
                        settings,
                        request,
                        self._clock,
                        outcome=outcome,
                        duration_ms=duration_ms,
                    )
                )

    # -- helpers while a turn runs -------------------------------------------------------------
    async def _keep_lease(self, job_id: int, token: str, entry: _Running) -> None:
        while True:
            await asyncio.sleep(self._queue.lease_renew_s)
            now = self._clock()
            async with self._store.write() as tx:
                kept = await tx.renew_lease(
                    job_id, token, now + timedelta(seconds=self._queue.lease_s)
                )
            if not kept:
                entry.cancel("lease lost")
                return

    async def _keep_typing(self, chats: Sequence[str], folder: str) -> None:
        # Platform typing states expire after ~5 s: refresh until the turn ends.
        while True:
            for chat_jid in chats:
                self._signals.typing(chat_jid, folder, True)
            await asyncio.sleep(TYPING_REFRESH_S)


def _reply_chats(job: JobRecord) -> list[str]:
    """The chats whose messages the turn answers (the task's chat for a scheduled turn)."""
    chats = list(dict.fromkeys(chat for _, chat in job.messages))
    return chats or [job.chat_jid]


def _run_record(
    job: JobRecord,
    settings: FolderSettings,
    request: ModelRequest,
    clock: Clock,
    *,
    outcome: str,
    response: ModelResponse | None = None,
    error: str | None = None,
    duration_ms: int | None = None,
) -> RunRecord:
    record = request.to_record()
    return RunRecord(
        job_id=job.id,
        folder=job.folder,
        conversation_id=job.conversation_id,
        provider=settings.provider,
        model=response.model if response and response.model else settings.model,
        account=response.account if response else None,
        system=record["system"],
        messages=record["messages"],
        tools=record["tools"],
        output_raw=response.raw if response else None,
        output=response.text if response else None,
        usage=dict(response.usage) if response else None,
        cost=response.cost if response else None,
        duration_ms=duration_ms,
        outcome=outcome,
        error=error,
        started_at=job.started_at or clock(),
        finished_at=clock(),
    )
