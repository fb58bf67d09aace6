"""Workers: claim turns, build their context, run the model, store the answer (PIPELINE §2–§3).

Each worker claims the most urgent due turn whose conversation has none running, under a lease
it renews while the model works. The context is built when the run starts (MESSAGES §4), never
frozen at enqueue time. The turn's commit point is one transaction that stores the run record,
the ``assistant`` message, its traces and outbox rows, and marks the turn done — so a turn whose
answer was stored is never run again, and a crash at any other moment only repeats work not yet
committed. A run that fails is retried after ``backoff_base × 2^n``; after the last attempt the
chat gets a host notice saying, in one sentence, what went wrong (the details — the API's own
message, an exception — are in the run record). A rate limit is not a failure: when every
account of the provider rests, the turn is queued again for when the first one is free (at
most ``max_rest_s``) without using an attempt. A run — context, every model call and tool —
ends within ``run_timeout_s``; hitting it is a failed run. Workers sleep until an enqueue
wakes them (a slow timer is the backstop for turns another process queued and for retries
coming due).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import structlog

from postroom.core.bounds import backoff_s, capped_s, later
from postroom.core.context import ContextMessage
from postroom.core.durations import format_duration, spoken_duration
from postroom.core.folders import BusyPolicy, FolderDefaults, FolderSettings
from postroom.engine.answer import AnswerWriter
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.context_builder import ContextBuilder, ContextSettings, PreparedTurn
from postroom.engine.folders import FolderService
from postroom.engine.memory import MemoryService
from postroom.engine.metrics import Metrics, NullMetrics
from postroom.engine.notices import post_notice
from postroom.engine.runner import AgentResult, AgentRunner, Steer
from postroom.engine.signals import Signals
from postroom.engine.streaming import AnswerStream
from postroom.engine.tools import ToolFactory, TurnToolbox
from postroom.engine.turns import QueueSettings, reply_chats
from postroom.llm.base import ModelRequest, ProviderError, RateLimited
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import JobKind, JobRecord, JobStatus, RunRecord

__all__ = ["ContextSettings", "WorkerPool"]

log = structlog.get_logger(__name__)

TYPING_REFRESH_S = 4.0
#: Why a run was stopped when its lease turned out to be gone.
LEASE_LOST = "lease lost"
#: What the chat is told when a run failed for a reason that is not the provider's.
INTERNAL_ERROR = "an internal error stopped the turn (the details are in the server log)"


class _LeaseLost(Exception):
    """The turn was taken from this worker (requeued or cancelled) before it could commit."""


@dataclass(slots=True)
class _Running:
    """A turn this pool is running: its task, its lease, and why it was cancelled (if it was)."""

    token: str
    task: asyncio.Task[None] | None = None
    reason: str = ""
    #: Whether its end must wake the claimer: False once its answer's transaction saw no turn
    #: of its conversation queued behind it (the common case: no empty claim after a turn).
    wake_on_end: bool = True

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
        if self.task is not None:
            self.task.cancel()


class WorkerPool:
    """Up to ``max_concurrent_turns`` turns at once from the store's queue."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        runner: AgentRunner,
        signals: Signals,
        clock: Clock,
        queue: QueueSettings,
        context: ContextSettings | ContextBuilder,
        defaults: FolderDefaults,
        owner: str,
        boot_id: str,
        assistant_name: str = "Postroom",
        metrics: Metrics | None = None,
        answers: AnswerWriter | None = None,
        tools: ToolFactory | None = None,
        folders: FolderService | None = None,
        run_timeout_s: float = 600.0,
        max_rest_s: float = 3600.0,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._runner = runner
        self._signals = signals
        self._clock = clock
        self._queue = queue
        self._context = (
            context
            if isinstance(context, ContextBuilder)
            else ContextBuilder(store=store, catalog=catalog, clock=clock, settings=context)
        )
        self._defaults = defaults
        self._owner = owner
        self._boot_id = boot_id
        self._metrics = metrics or NullMetrics()
        self._answers = answers or AnswerWriter(
            clock=clock,
            memory=MemoryService(store=store),
            assistant_name=assistant_name,
            max_attempts=queue.max_attempts,
        )
        self._tools = tools
        self._folders = folders
        self._run_timeout_s = run_timeout_s
        self._max_rest_s = max_rest_s
        self._running: dict[int, _Running] = {}
        #: Turn tasks not yet ended (``_running`` may hold a requeued job's newer entry).
        self._busy = 0
        self._workers: list[asyncio.Task[None]] = []
        #: More turns may be claimable once a slot frees: the last claim filled every slot it
        #: asked for, or a wake-up came while the slots were full.
        self._more_may_be_due = False
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
        self._workers.append(asyncio.create_task(self._dispatch(), name="turn-dispatcher"))
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
    async def _dispatch(self) -> None:
        """Fill the free slots with claimed turns, each run as its own task.

        One claimer, and one write transaction per wake-up for all the free slots: a worker per
        slot would each run a transaction to find the same single turn. When it claims fewer
        than it asked for, nothing more is claimable now, and the same transaction says when
        the next queued turn comes due; it sleeps until then or until woken (an enqueue, a turn
        ending, a cancellation).
        """
        limit = self._queue.max_concurrent_turns
        while not self._stopping:
            free = limit - self._busy
            if free <= 0:
                # A finishing turn wakes us; the timer is only a backstop.
                self._more_may_be_due = True
                await self._signals.turns.wait(self._queue.backstop_s)
                continue
            try:
                jobs, due = await self._claim(free)
            except Exception:
                # A store error (another process held the write lock past the busy timeout, a
                # full disk) must not end claiming for the rest of the process's life.
                log.exception("turns.claim_failed")
                await self._signals.turns.wait(self._queue.backstop_s)
                continue
            for job in jobs:
                self._start(job)
            self._more_may_be_due = len(jobs) >= free
            if len(jobs) < free:
                await self._signals.turns.wait(self._idle_for(due))

    def _start(self, job: JobRecord) -> None:
        assert job.lease_token is not None
        entry = _Running(job.lease_token)
        self._busy += 1
        entry.task = asyncio.create_task(self._execute(job, entry), name=f"turn-{job.id}")
        self._running[job.id] = entry
        entry.task.add_done_callback(functools.partial(self._done, job.id, entry))

    def _done(self, job_id: int, entry: _Running, _task: asyncio.Task[None]) -> None:
        self._busy -= 1
        # Only our own entry: the same job may have been requeued and claimed again.
        if self._running.get(job_id) is entry:
            del self._running[job_id]
        # A slot is free, and the conversation's next turn may be claimable now.
        if entry.wake_on_end or self._more_may_be_due or self._stopping:
            self._signals.turns.wake()

    async def _claim(self, want: int) -> tuple[list[JobRecord], datetime | None]:
        """Up to *want* turns; and, if there were fewer, when the next one comes due."""
        if self._stopping:
            return [], None
        now = self._clock()
        lease_until = later(now, self._queue.lease_s)
        jobs: list[JobRecord] = []
        async with self._store.write() as tx:
            while len(jobs) < want:
                job = await tx.claim_job(
                    now=now,
                    lease_until=lease_until,
                    owner=self._owner,
                    boot_id=self._boot_id,
                    token=secrets.token_hex(8),
                )
                if job is None:
                    return jobs, await tx.next_job_due()
                await self._context.attach_observed(tx, job, reply_chats(job))
                jobs.append(job)
        return jobs, None

    def _idle_for(self, due: datetime | None) -> float:
        wait = self._queue.backstop_s
        if due is not None:
            wait = min(wait, max((due - self._clock()).total_seconds(), 0.0))
        return wait

    async def _sweep(self) -> None:
        """Requeue turns whose worker died (their lease ran out), without using an attempt."""
        while not self._stopping:
            await asyncio.sleep(max(self._queue.lease_s / 3, 0.05))
            try:
                async with self._store.write() as tx:
                    released = await tx.release_expired_leases(now=self._clock())
            except Exception:
                log.exception("turns.sweep_failed")
                continue
            if released:
                log.warning("turns.lease_expired", job_ids=released)
                self._signals.turns.wake()

    # -- one turn ---------------------------------------------------------------------------
    async def _execute(self, job: JobRecord, entry: _Running) -> None:
        assert job.lease_token is not None
        token = job.lease_token
        settings = await self._settings(job)
        chats = reply_chats(job)
        log.debug("turn.started", job_id=job.id, folder=job.folder, chat_jid=job.chat_jid)
        helpers = [
            asyncio.create_task(self._keep_lease(job.id, token, entry), name=f"lease-{job.id}"),
        ]
        if job.kind is not JobKind.SCHEDULED:
            helpers.append(
                asyncio.create_task(self._keep_typing(chats, job.folder), name=f"typing-{job.id}")
            )
        request: ModelRequest | None = None
        stream: AnswerStream | None = None
        begun = time.monotonic()

        def elapsed_ms() -> int:
            return int((time.monotonic() - begun) * 1000)

        deadline = asyncio.timeout(self._run_timeout_s)
        try:
            async with deadline:
                prepared = await self._context.build(job, settings)
                request = prepared.request
                toolbox = self._toolbox(job, settings, chats)
                steered: list[tuple[str, str]] = []
                steer = None
                if settings.busy_policy is BusyPolicy.STEER:
                    steer = self._steer(job, token, prepared, chats, steered)
                stream = self._stream(job, settings, prepared.answer_chat)
                result = await self._runner.run(
                    request, settings=settings, toolbox=toolbox, steer=steer, sink=stream
                )
            if steered:  # the answer answers these too (and replies to the last of them)
                job = replace(job, messages=(*job.messages, *steered))
            answer_id = await self._succeed(
                job, token, settings, result, toolbox, prepared.answer_chat, chats, elapsed_ms()
            )
            if stream is not None:
                stream.close(answer_id)
        except asyncio.CancelledError:
            reason = entry.reason or "cancelled"
            # A lost lease means the turn is another worker's now: this one leaves no trace.
            if reason not in ("shutdown", LEASE_LOST) and request is not None:
                await self._record(job, settings, request, outcome=reason, duration_ms=elapsed_ms())
            log.info("turn.cancelled", job_id=job.id, reason=reason)
        except _LeaseLost:
            log.warning("turn.lease_lost", job_id=job.id)
        except RateLimited as exc:
            await self._rest(job, token, settings, request, exc, elapsed_ms())
        except ProviderError as exc:
            failure = _Failure(exc.public, str(exc), exc.retryable)
            await self._failed(job, token, settings, request, failure, elapsed_ms())
        except Exception as exc:  # a bug in a provider or in context building: retry, loudly
            if isinstance(exc, TimeoutError) and deadline.expired():
                failure = self._run_timed_out()
            else:
                log.exception("turn.crashed", job_id=job.id)
                failure = _Failure(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", True)
            await self._failed(job, token, settings, request, failure, elapsed_ms())
        finally:
            if stream is not None:
                stream.close(None)  # no answer (a no-op after the answer closed it)
            for helper in helpers:
                helper.cancel()
            for chat_jid in chats:
                self._signals.typing(chat_jid, job.folder, False)

    def _steer(
        self,
        job: JobRecord,
        token: str,
        prepared: PreparedTurn,
        chats: list[str],
        steered: list[tuple[str, str]],
    ) -> Steer:
        """The runner's way to take in messages that arrived while this turn runs."""

        async def take() -> Sequence[ContextMessage]:
            refs = await self._take_followup(job, token)
            if not refs:
                return ()
            steered.extend(refs)
            chats.extend(chat for chat in dict.fromkeys(c for _, c in refs) if chat not in chats)
            log.info("turn.steered", job_id=job.id, messages=len(refs))
            return await self._context.steered(job, refs, prepared.senders, prepared.policy)

        return take

    async def _take_followup(self, job: JobRecord, token: str) -> list[tuple[str, str]]:
        """``busy_policy = "steer"`` (PIPELINE §2): messages that arrived while this turn runs
        wait in a follow-up turn of its conversation; at its next model call this turn takes
        them over — they move to its job (``job_messages``) and the follow-up is cancelled —
        while this worker still holds the lease. A turn that makes no further call leaves the
        follow-up to answer them."""
        now = self._clock()
        taken: list[tuple[str, str]] = []
        async with self._store.write() as tx:
            lease_until = later(now, self._queue.lease_s)
            if not await tx.renew_lease(job.id, token, lease_until):
                return taken
            for other in await tx.open_jobs(job.conversation_id):
                if other.status is not JobStatus.QUEUED or other.kind is not JobKind.TURN:
                    continue
                queued = await tx.get_job(other.id)
                await tx.move_job_messages(other.id, job.id)
                await tx.cancel_job(other.id, now=now)
                taken.extend(queued.messages if queued is not None else ())
        return taken

    def _stream(
        self, job: JobRecord, settings: FolderSettings, chat_jid: str
    ) -> AnswerStream | None:
        """Where a streaming provider shows the answer while it is written: the chat the
        answer will be stored in (a scheduled answer is shown only when it is delivered)."""
        if job.kind is JobKind.SCHEDULED:
            return None
        return AnswerStream(
            bus=self._signals.bus,
            chat_jid=chat_jid,
            folder=job.folder,
            role=settings.role.value,
            job_id=job.id,
        )

    async def _settings(self, job: JobRecord) -> FolderSettings:
        """The folder's settings as of now: a write by another process, or an edit of its
        ``AGENT.md``, applies from this turn on (one version read and one ``stat`` per turn)."""
        if self._folders is not None:
            try:
                await self._folders.import_edits(job.folder)
            except Exception:  # the settings already loaded still run the turn
                log.exception("folder.refresh_failed", folder=job.folder)
        return self._catalog.snapshot.settings(job.folder, self._defaults)

    def _toolbox(
        self, job: JobRecord, settings: FolderSettings, chats: Sequence[str]
    ) -> TurnToolbox | None:
        if self._tools is None:
            return None
        return self._tools.toolbox(
            settings=settings,
            chats=chats,
            depth=job.depth,
            existing_folders=self._catalog.snapshot.paths,
        )

    async def _succeed(
        self,
        job: JobRecord,
        token: str,
        settings: FolderSettings,
        result: AgentResult,
        toolbox: TurnToolbox | None,
        answer_chat: str,
        chats: Sequence[str],
        elapsed_ms: int,
    ) -> str | None:
        """Commit the answer (and what it asks for); the stored answer's id, if there is one."""
        now = self._clock()
        async with self._store.write() as tx:
            committed = await self._answers.write(
                tx,
                job=job,
                settings=settings,
                result=result,
                effects=toolbox.effects if toolbox is not None else None,
                answer_chat=answer_chat,
                chats=chats,
                duration_ms=elapsed_ms,
            )
            if not await tx.finish_job(
                job.id, token, status=JobStatus.DONE, now=now, answer_id=committed.answer_id
            ):
                raise _LeaseLost
            if job.task_id is not None:
                await tx.update_task(job.task_id, last_status="ok")
            # In the same transaction as the end of the turn: a turn queued behind it later
            # than this finds no running turn, so it is claimable and its enqueue wakes us.
            behind = any(
                other.status is JobStatus.QUEUED
                for other in await tx.open_jobs(job.conversation_id)
            )
        entry = self._running.get(job.id)
        if entry is not None and entry.token == token:
            entry.wake_on_end = behind or bool(committed.actions) or bool(committed.delegated)
        self._metrics.turn("ok", elapsed_ms / 1000)
        log.debug(
            "turn.answered",
            job_id=job.id,
            run_id=committed.run_id,
            message_id=committed.answer_id,
            calls=result.calls,
            duration_ms=elapsed_ms,
            delegated=committed.delegated or None,
        )
        if committed.delegated:
            self._signals.turns.wake()
        self._signals.deliveries.wake()
        self._signals.stored.wake()
        if committed.actions:
            outcomes = await self._answers.apply_actions(job, committed.actions, chat_jid=chats[0])
            async with self._store.write() as tx:
                for outcome in outcomes:
                    await post_notice(
                        tx,
                        chats[0],
                        outcome,
                        clock=self._clock,
                        topic=job.topic,
                        metadata={"source": "conductor", "job_id": job.id},
                    )
            self._signals.deliveries.wake()
            self._signals.stored.wake()
        return committed.answer_id

    def _run_timed_out(self) -> _Failure:
        limit = format_duration(self._run_timeout_s)
        return _Failure(
            f"the turn took longer than {limit}",
            f"the run was stopped after {limit} (llm.run_timeout)",
            True,
        )

    async def _failed(
        self,
        job: JobRecord,
        token: str,
        settings: FolderSettings,
        request: ModelRequest | None,
        failure: _Failure,
        duration_ms: int,
    ) -> None:
        """A failed run: retried after the back-off, or — after the last attempt — failed with
        a notice of one sentence in the chat. The details go to the run record, the job's
        ``last_error`` (for operators) and the log, never to the chat."""
        now = self._clock()
        attempts = job.attempts + 1
        final = attempts >= job.max_attempts or not failure.retryable
        async with self._store.write() as tx:
            await self._insert_run(
                tx, job, settings, request, "error", failure.detail, duration_ms=duration_ms
            )
            if final:
                if not await tx.finish_job(
                    job.id,
                    token,
                    status=JobStatus.FAILED,
                    now=now,
                    error=failure.detail,
                    attempts=attempts,
                ):
                    return
                await self._tell(
                    tx, job, f"⚠️ could not answer (job {job.id}): {failure.public}", "turn_failed"
                )
                if job.task_id is not None:
                    await tx.update_task(job.task_id, last_status=f"failed: {failure.public}")
            else:
                delay_s = backoff_s(self._queue.backoff_base_s, attempts)
                if not await tx.retry_job_later(
                    job.id,
                    token,
                    attempts=attempts,
                    run_at=later(now, delay_s),
                    error=failure.detail,
                ):
                    return
                if attempts == 1:
                    # The typing indicator has stopped; say why the answer is late rather than
                    # leave minutes of silence (later retries are not announced again).
                    wait = spoken_duration(delay_s)
                    await self._tell(tx, job, f"⚠️ trying again in {wait}", "turn_retry")
        self._metrics.turn("error", None)
        log.warning(
            "turn.failed", job_id=job.id, attempts=attempts, final=final, error=failure.detail
        )
        if final or attempts == 1:
            self._signals.deliveries.wake()
            self._signals.stored.wake()

    async def _tell(self, tx: StoreTx, job: JobRecord, text: str, source: str) -> None:
        """A host notice about *job* to every chat it answers."""
        for chat_jid in reply_chats(job):
            await post_notice(
                tx,
                chat_jid,
                text,
                clock=self._clock,
                topic=job.topic,
                metadata={"source": source, "job_id": job.id},
            )

    async def _rest(
        self,
        job: JobRecord,
        token: str,
        settings: FolderSettings,
        request: ModelRequest | None,
        limited: RateLimited,
        duration_ms: int,
    ) -> None:
        """Every account of the provider rests: queue the turn again for when the first one is
        free (at most ``max_rest_s``), without using an attempt — a rate limit is not a
        failure (PIPELINE §4)."""
        asked = limited.retry_after
        if asked is None:  # a provider outside an account pool, that did not say
            asked = self._queue.backoff_base_s
        wait_s = capped_s(asked, self._max_rest_s)
        async with self._store.write() as tx:
            await self._insert_run(
                tx, job, settings, request, "rate_limited", str(limited), duration_ms=duration_ms
            )
            if not await tx.retry_job_later(
                job.id,
                token,
                attempts=job.attempts,
                run_at=later(self._clock(), wait_s),
                error=str(limited),
            ):
                return
        self._metrics.turn("rate_limited", None)
        log.info("turn.rate_limited", job_id=job.id, wait_s=wait_s, error=str(limited))

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
                await self._insert_run(
                    tx, job, settings, request, outcome, None, duration_ms=duration_ms
                )

    async def _insert_run(
        self,
        tx: StoreTx,
        job: JobRecord,
        settings: FolderSettings,
        request: ModelRequest | None,
        outcome: str,
        error: str | None,
        *,
        duration_ms: int,
    ) -> None:
        """The record of a run that produced no answer (failed, rate-limited, cancelled); none
        when it ended before its request was built."""
        if request is None:
            return
        record = request.to_record()
        now = self._clock()
        await tx.insert_run(
            RunRecord(
                job_id=job.id,
                folder=job.folder,
                conversation_id=job.conversation_id,
                provider=settings.provider,
                model=settings.model,
                system=record["system"],
                messages=record["messages"],
                tools=record["tools"],
                duration_ms=duration_ms,
                outcome=outcome,
                error=error,
                started_at=job.started_at or now,
                finished_at=now,
                skills=record["skills"],
            )
        )

    # -- helpers while a turn runs -------------------------------------------------------------
    async def _keep_lease(self, job_id: int, token: str, entry: _Running) -> None:
        """Renew the lease while the turn runs; stop the run the moment it is not ours (another
        process cancelled or requeued it, or let it expire and another worker claimed it)."""
        while True:
            await asyncio.sleep(self._queue.lease_renew_s)
            now = self._clock()
            try:
                async with self._store.write() as tx:
                    kept = await tx.renew_lease(job_id, token, later(now, self._queue.lease_s))
            except Exception:
                # A busy or failing store: try again at the next renewal, while the lease lasts.
                log.exception("turn.lease_renewal_failed", job_id=job_id)
                continue
            if not kept:
                entry.cancel(LEASE_LOST)
                return

    async def _keep_typing(self, chats: Sequence[str], folder: str) -> None:
        # Platform typing states expire after ~5 s: refresh until the turn ends.
        while True:
            for chat_jid in chats:
                self._signals.typing(chat_jid, folder, True)
            await asyncio.sleep(TYPING_REFRESH_S)


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why a run failed: ``public``, one sentence for the chat; ``detail``, for the record."""

    public: str
    detail: str
    retryable: bool
