"""Workers over a real SQLite file (PIPELINE §2–§3, MESSAGES §4): retries and backoff, the final
host notice, leases and crash recovery, graceful shutdown, the context a run is given, and the
run record it leaves."""

from __future__ import annotations

import asyncio
import itertools
import re
import sqlite3
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from postroom.core import Action, MessageType, StoredMessage
from postroom.core.folders import FolderDefaults, FolderSettings
from postroom.core.trigger import Trigger
from postroom.engine import FolderSpec, IngestLimits, Services
from postroom.engine.runner import AgentResult, AgentRunner, ProviderRunner, Toolbox
from postroom.engine.signals import Event, Signals
from postroom.engine.turns import QueueSettings
from postroom.engine.worker import ContextSettings, WorkerPool
from postroom.llm import EchoProvider, ModelRequest, ProviderError, TextSink
from postroom.store import NewMessage, SqliteStore
from postroom.store.records import JobRecord, JobStatus, RunRecord
from postroom.store.sqlite import base as sqlite_base

from fakeclock import FakeClock
from support import eventually, inbound, seed_spec_table

QUEUE = QueueSettings(
    max_attempts=3,
    backoff_base_s=60,
    max_concurrent_turns=2,
    lease_s=30,
    lease_renew_s=10,
    shutdown_grace_s=0.2,
    backstop_s=0.05,
)
_CHAT_NOTICE = re.compile(r"^Chat: (\S+) ", re.MULTILINE)


# -- the runner and the rig ---------------------------------------------------------------------
class GatedRunner:
    """An :class:`AgentRunner` that answers like the echo provider once ``gate`` is open.

    It records every request and the order of starts, ends and cancellations, can hold one call
    on its own event (``holds[index]``), raises the queued ``failures`` first, and counts the
    runs in flight per conversation — ``(folder, chat)``, the chat read off the system notices.
    """

    def __init__(self, *, open_gate: bool = True, failures: Iterable[ProviderError] = ()) -> None:
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.holds: dict[int, asyncio.Event] = {}
        self.failures = deque(failures)
        self.requests: list[ModelRequest] = []
        self.events: list[tuple[str, int]] = []
        self.in_flight: Counter[tuple[str, str]] = Counter()
        self.max_in_flight: Counter[tuple[str, str]] = Counter()
        self.total = 0
        self._echo = EchoProvider()

    async def run(
        self,
        request: ModelRequest,
        *,
        settings: FolderSettings,
        toolbox: Toolbox | None = None,
        sink: TextSink | None = None,
    ) -> AgentResult:
        index = len(self.requests)
        key = (settings.path, chat_of(request))
        self.requests.append(request)
        self.events.append(("start", index))
        self.in_flight[key] += 1
        self.total += 1
        self.max_in_flight[key] = max(self.max_in_flight[key], self.in_flight[key])
        try:
            await self.gate.wait()
            hold = self.holds.get(index)
            if hold is not None:
                await hold.wait()
            if self.failures:
                self.events.append(("failed", index))
                raise self.failures.popleft()
            response = await self._echo.complete(request)
        except asyncio.CancelledError:
            self.events.append(("cancelled", index))
            raise
        finally:
            self.in_flight[key] -= 1
            self.total -= 1
        self.events.append(("done", index))
        return AgentResult(response=response, request=request, raws=(response.raw,))

    def cancelled(self) -> list[int]:
        return [index for event, index in self.events if event == "cancelled"]


def chat_of(request: ModelRequest) -> str:
    found = _CHAT_NOTICE.search(request.system)
    assert found is not None, request.system
    return found.group(1)


class Rig:
    """Services over real SQLite files and worker pools, all closed at teardown."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.tmp_path = tmp_path
        self.clock = clock
        self._services: list[Services] = []
        self._pools: list[WorkerPool] = []
        self._names = itertools.count(1)

    async def open(self, *, queue: QueueSettings = QUEUE) -> Services:
        store = await SqliteStore.open(self.tmp_path / f"postroom-{next(self._names)}.db")
        services = Services.build(
            store,
            folders_dir=self.tmp_path / "folders",
            trigger=Trigger(),
            defaults=FolderDefaults(),
            limits=IngestLimits(),
            clock=self.clock,
            queue=queue,
            signals=Signals(),
        )
        self._services.append(services)
        await seed_spec_table(services)
        return services

    async def start_pool(
        self,
        services: Services,
        runner: AgentRunner,
        *,
        boot_id: str = "b1",
        context: ContextSettings | None = None,
        **queue: float,
    ) -> WorkerPool:
        pool = WorkerPool(
            store=services.store,
            catalog=services.catalog,
            runner=runner,
            signals=services.signals,
            clock=self.clock,
            queue=replace(services.queue, **queue),  # type: ignore[arg-type]
            context=context or ContextSettings(),
            defaults=services.defaults,
            owner="test",
            boot_id=boot_id,
        )
        self._pools.append(pool)
        await pool.start()
        return pool

    async def close(self) -> None:
        for pool in reversed(self._pools):
            await pool.stop()
        for services in self._services:
            await services.close()


@pytest.fixture
async def rig(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path, clock)
    try:
        yield rig
    finally:
        await rig.close()


# -- helpers -----------------------------------------------------------------------------------
async def job_when(
    services: Services, job_id: int, check: Callable[[JobRecord], bool], what: str
) -> JobRecord:
    async def holds() -> bool:
        return check(await services.turns.get_job(job_id))

    await eventually(holds, f"job {job_id}: {what}")
    return await services.turns.get_job(job_id)


async def settled(services: Services, job_id: int, status: JobStatus = JobStatus.DONE) -> JobRecord:
    return await job_when(services, job_id, lambda job: job.status is status, status.value)


async def fire(
    services: Services, chat: str, text: str, *, sender: str = "telegram:user/42"
) -> int:
    result = await services.ingest.ingest(inbound(chat, text, sender=sender))
    assert result.decision.action is Action.FIRE, result.decision
    assert result.decision.job_id is not None
    return result.decision.job_id


async def rows(services: Services, chat: str) -> list[StoredMessage]:
    async with services.store.read() as tx:
        return await tx.list_messages(chat_jid=chat, limit=10_000)


async def answers(services: Services, chat: str) -> list[StoredMessage]:
    return [m for m in await rows(services, chat) if m.message_type is MessageType.ASSISTANT]


async def runs(services: Services) -> list[RunRecord]:
    found: list[RunRecord] = []
    async with services.store.read() as tx:
        for run_id in itertools.count(1):
            run = await tx.get_run(run_id)
            if run is None:
                return found
            found.append(run)
    raise AssertionError("unreachable")


async def last_job(services: Services) -> int:
    (job,) = await services.turns.list_jobs(limit=1)
    return job.id


def turn_task_alive(job_id: int) -> bool:
    return any(t.get_name() == f"turn-{job_id}" and not t.done() for t in asyncio.all_tasks())


def pairs(request: ModelRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages]


# -- retries and failure -------------------------------------------------------------------------
async def test_failed_runs_back_off_then_fail_with_a_host_notice_and_can_be_retried(
    rig: Rig, clock: FakeClock
) -> None:
    services = await rig.open()
    runner = GatedRunner(failures=[ProviderError(f"upstream 503 ({n})") for n in (1, 2, 3)])
    await rig.start_pool(services, runner)
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "hello")

    job = await job_when(services, job_id, lambda j: j.attempts == 1, "first failure")
    assert job.status is JobStatus.QUEUED and job.lease_until is None
    assert job.run_at == clock.now + timedelta(seconds=120)  # backoff_base × 2^1
    assert job.last_error == "upstream 503 (1)"
    await asyncio.sleep(0.2)  # several backstop polls: not due, so not run again
    assert len(runner.requests) == 1

    clock.advance(seconds=120)
    job = await job_when(services, job_id, lambda j: j.attempts == 2, "second failure")
    assert job.status is JobStatus.QUEUED
    assert job.run_at == clock.now + timedelta(seconds=240)  # backoff_base × 2^2

    clock.advance(seconds=240)
    job = await settled(services, job_id, JobStatus.FAILED)
    assert (job.attempts, job.last_error) == (3, "upstream 503 (3)")
    assert len(runner.requests) == 3
    assert await answers(services, chat) == []
    (notice,) = [m for m in await rows(services, chat) if m.message_type is MessageType.HOST]
    assert notice.content == f"⚠️ could not answer (job {job_id}): upstream 503 (3)"
    async with services.store.read() as tx:
        (delivery,) = await tx.list_deliveries(message_id=notice.id)
    assert delivery.chat_jid == chat and delivery.message_type == "host"
    assert "could not answer" in delivery.content
    assert [run.outcome for run in await runs(services)] == ["error"] * 3

    retried = await services.turns.retry(job_id)
    assert (retried.status, retried.attempts) == (JobStatus.QUEUED, 0)
    job = await settled(services, job_id)
    (answer,) = await answers(services, chat)
    assert (answer.content, job.answer_id) == ("hello", answer.id)


async def test_a_non_retryable_error_fails_at_once(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner(failures=[ProviderError("invalid API key", retryable=False)])
    await rig.start_pool(services, runner)
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "hello")
    job = await settled(services, job_id, JobStatus.FAILED)
    assert (job.attempts, job.last_error) == (1, "invalid API key")
    assert len(runner.requests) == 1
    notices = [m.content for m in await rows(services, chat) if m.message_type is MessageType.HOST]
    assert notices == [f"⚠️ could not answer (job {job_id}): invalid API key"]


# -- leases and recovery -----------------------------------------------------------------------
async def test_a_turn_left_running_by_the_previous_boot_is_requeued_at_start(
    rig: Rig, clock: FakeClock
) -> None:
    services = await rig.open()
    job_id = await fire(services, "telegram:group/5", "hello")
    async with services.store.write() as tx:
        claimed = await tx.claim_job(
            now=clock(),
            lease_until=clock() + timedelta(seconds=30),
            owner="test",
            boot_id="old",
            token="old-token",
        )
    assert claimed is not None and claimed.id == job_id

    runner = GatedRunner()
    await rig.start_pool(services, runner, boot_id="new")
    # Answered with the clock standing still: the restart never waited for the lease.
    job = await settled(services, job_id)
    assert job.attempts == 0 and len(runner.requests) == 1
    (answer,) = await answers(services, "telegram:group/5")
    assert answer.content == "hello" and job.answer_id == answer.id
    async with services.store.write() as tx:
        assert not await tx.finish_job(job_id, "old-token", status=JobStatus.FAILED, now=clock())


async def test_an_expired_lease_is_requeued_by_the_sweeper(rig: Rig, clock: FakeClock) -> None:
    services = await rig.open()
    job_id = await fire(services, "telegram:group/5", "hello")
    async with services.store.write() as tx:
        await tx.claim_job(
            now=clock(),
            lease_until=clock() + timedelta(seconds=5),
            owner="another-server",
            boot_id="x",
            token="ghost",
        )
    runner = GatedRunner()
    await rig.start_pool(services, runner, lease_s=0.3)  # the sweeper looks every 0.1 s

    await asyncio.sleep(0.4)  # a live lease of another server is left alone
    job = await services.turns.get_job(job_id)
    assert (job.status, job.lease_owner) == (JobStatus.RUNNING, "another-server")
    assert runner.requests == []

    clock.advance(seconds=10)  # that server died: its lease runs out
    job = await settled(services, job_id)
    assert job.attempts == 0 and len(runner.requests) == 1
    assert [a.content for a in await answers(services, "telegram:group/5")] == ["hello"]


async def test_a_stalled_worker_cannot_commit_a_turn_it_lost(rig: Rig, clock: FakeClock) -> None:
    services = await rig.open()
    runner = GatedRunner()
    runner.holds[0] = asyncio.Event()
    # The lease is short and never renewed within the test: the first run stalls past it.
    await rig.start_pool(services, runner, lease_s=0.3, lease_renew_s=30)
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "hello")
    await eventually(lambda: runner.total == 1, "the first run to start")

    clock.advance(seconds=1)
    job = await settled(services, job_id)  # requeued by the sweeper and answered again
    assert len(runner.requests) == 2 and job.attempts == 0

    runner.holds[0].set()  # the stalled run comes back and tries to commit
    await eventually(lambda: ("done", 0) in runner.events, "the stalled run to return")
    await eventually(lambda: not turn_task_alive(job_id), "the stalled turn to end")
    (answer,) = await answers(services, chat)
    job = await services.turns.get_job(job_id)
    assert (job.status, job.answer_id, answer.metadata["job_id"]) == (
        JobStatus.DONE,
        answer.id,
        job_id,
    )


async def test_an_answered_turn_is_never_run_again(rig: Rig, clock: FakeClock) -> None:
    services = await rig.open()
    runner = GatedRunner()
    first = await rig.start_pool(services, runner)
    job_id = await fire(services, "telegram:group/5", "hello")
    await settled(services, job_id)
    await first.stop()

    await rig.start_pool(services, runner, boot_id="b2", lease_s=0.3)
    clock.advance(hours=2)
    await asyncio.sleep(0.3)  # start-up recovery, sweeps and backstop polls happen
    async with services.store.write() as tx:
        assert await tx.release_expired_leases(now=clock()) == []
        assert await tx.release_previous_boot(owner="test", boot_id="b3") == []
    assert len(runner.requests) == 1
    assert (await services.turns.get_job(job_id)).status is JobStatus.DONE
    assert len(await answers(services, "telegram:group/5")) == 1


# -- claiming ----------------------------------------------------------------------------------
def count_claims(services: Services) -> list[str]:
    """Every claim statement the store's write connection runs from now on."""
    claims: list[str] = []

    def trace(sql: str) -> None:
        if sql.startswith("UPDATE jobs SET status = 'running'"):
            claims.append(sql)

    services.store._writer.set_trace_callback(trace)  # type: ignore[attr-defined]
    return claims


async def test_a_turn_queued_behind_a_running_one_is_not_polled_for(rig: Rig) -> None:
    """The conversation's next turn is due but blocked until the running one ends: the
    dispatcher sleeps until that end wakes it, rather than claiming again and again."""
    services = await rig.open()
    runner = GatedRunner()
    runner.holds[0] = asyncio.Event()
    await rig.start_pool(services, runner, backstop_s=10)
    chat = "telegram:group/5"
    first = await fire(services, chat, "first")
    await eventually(lambda: runner.total == 1, "the first run to start")
    claims = count_claims(services)
    second = await fire(services, chat, "second")
    assert second != first
    await asyncio.sleep(0.3)
    # The enqueue's wake-up: one claim, which finds the conversation busy.
    assert len(claims) <= 2, len(claims)
    runner.holds[0].set()
    await settled(services, second)
    assert [a.content for a in await answers(services, chat)] == ["first", "second"]


async def test_turns_fill_the_free_slots_and_no_more(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner(open_gate=False)
    pool = await rig.start_pool(services, runner, max_concurrent_turns=3, backstop_s=10)
    jobs = [await fire(services, f"telegram:group/{n}", "hi") for n in range(4)]
    await eventually(lambda: runner.total == 3, "three turns to start")
    await asyncio.sleep(0.05)
    assert runner.total == 3 and pool.running_jobs == jobs[:3]
    runner.gate.set()
    for job_id in jobs:
        await settled(services, job_id)
    assert pool.running_jobs == []


async def test_claiming_goes_on_after_a_claim_fails(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock past the busy timeout fails a claim; the
    dispatcher logs it and claims again later instead of ending for good."""
    monkeypatch.setattr(sqlite_base, "BUSY_TIMEOUT_MS", 100)
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner, backstop_s=0.05)
    other = sqlite3.connect(services.store.path, isolation_level=None)  # type: ignore[attr-defined]
    try:
        with capture_logs() as logs:
            other.execute("BEGIN IMMEDIATE")
            services.signals.turns.wake()
            await eventually(
                lambda: any(e["event"] == "turns.claim_failed" for e in logs), "a failed claim"
            )
            other.execute("ROLLBACK")
    finally:
        other.close()
    job_id = await fire(services, "telegram:group/5", "hello")
    await settled(services, job_id)
    assert [a.content for a in await answers(services, "telegram:group/5")] == ["hello"]


# -- graceful shutdown -------------------------------------------------------------------------
async def test_shutdown_releases_the_lease_of_an_unfinished_turn(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner(open_gate=False)
    pool = await rig.start_pool(services, runner, shutdown_grace_s=0.1)
    job_id = await fire(services, "telegram:group/5", "hello")
    await eventually(lambda: runner.total == 1, "the turn to start")

    await pool.stop()
    job = await services.turns.get_job(job_id)
    assert (job.status, job.attempts, job.lease_until, job.lease_token) == (
        JobStatus.QUEUED,
        0,
        None,
        None,
    )
    assert runner.cancelled() == [0]
    assert await answers(services, "telegram:group/5") == []

    await rig.start_pool(services, GatedRunner(), boot_id="b2")
    job = await settled(services, job_id)
    assert job.attempts == 0
    assert [a.content for a in await answers(services, "telegram:group/5")] == ["hello"]


async def test_shutdown_lets_a_turn_finish_within_the_grace_and_stops_claiming(
    rig: Rig,
) -> None:
    services = await rig.open()
    runner = GatedRunner(open_gate=False)
    pool = await rig.start_pool(services, runner, shutdown_grace_s=10)
    running = await fire(services, "telegram:group/1", "a")
    await eventually(lambda: runner.total == 1, "the turn to start")

    stopping = asyncio.create_task(pool.stop(), name="pool-stop")
    await asyncio.sleep(0)  # stop() has begun: no more claims
    waiting = await fire(services, "telegram:group/2", "b")
    await asyncio.sleep(0.15)  # several backstop polls
    assert len(runner.requests) == 1
    runner.gate.set()
    await asyncio.wait_for(stopping, timeout=10)

    assert (await services.turns.get_job(running)).status is JobStatus.DONE
    assert (await services.turns.get_job(waiting)).status is JobStatus.QUEUED
    assert [a.content for a in await answers(services, "telegram:group/1")] == ["a"]


# -- the context of a run ------------------------------------------------------------------------
async def test_context_leaves_out_host_trace_and_commands_and_ends_with_the_notices(
    rig: Rig, clock: FakeClock
) -> None:
    services = await rig.open()
    persona = "You are Scribe, a careful note taker."
    await services.folders.add_folder("scribe", FolderSpec(persona=persona), actor="test")
    await services.routes.add_route(-20, "chat_jid=telegram:group/50", "scribe", actor="test")
    runner = GatedRunner()
    await rig.start_pool(services, runner)
    chat = "telegram:group/50"

    first = await settled(services, await fire(services, chat, "first"))
    extra = (
        (MessageType.HOST, "host", "HOST-ONLY notice"),
        (MessageType.TRACE, "thinking", "TRACE-ONLY thought"),
        (MessageType.SYSTEM, "system", "deploy: v2 is live"),
    )
    async with services.store.write() as tx:
        for n, (kind, sender, text) in enumerate(extra):
            await tx.insert_message(
                NewMessage(
                    id=f"extra-{n}",
                    chat_jid=chat,
                    sender=sender,
                    content=text,
                    timestamp=clock(),
                    message_type=kind,
                    is_from_me=True,
                    routed_to="scribe",
                    conversation_id=first.conversation_id,
                )
            )
    status = await services.ingest.ingest(inbound(chat, "/status"))
    assert status.decision.action is Action.COMMAND
    await settled(services, await fire(services, chat, "second"))

    request = runner.requests[1]
    assert pairs(request) == [
        ("user", "first"),
        ("assistant", "first"),
        ("system", "deploy: v2 is live"),
        ("user", "second"),
    ]
    seen = "\n".join([request.system, *(m.content for m in request.messages)])
    for hidden in ("HOST-ONLY", "TRACE-ONLY", "/status", "queue:"):
        assert hidden not in seen

    # System prompt: the persona first, the notices last (UTC time, chat JID and kind, folder).
    assert request.system.startswith(persona)
    notices = request.system[len(persona) :].strip().splitlines()
    assert any("2026-01-05 12:00" in n and "UTC" in n for n in notices), notices
    (chat_line,) = [n for n in notices if chat in n]
    assert "group" in chat_line.replace(chat, "")
    assert "scribe" in notices[-1] or any("folder scribe" in n for n in notices), notices
    # Notices are recomputed per run, never stored.
    stored = "\n".join(m.content for m in await rows(services, chat))
    assert "2026-01-05 12:00" not in stored and chat_line not in stored


async def test_context_uses_the_routed_content_after_an_inline_prefix(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner)
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "@content draft post")
    job = await settled(services, job_id)
    assert job.folder == "atlas/content"
    assert pairs(runner.requests[0]) == [("user", "draft post")]
    user_row, answer = await rows(services, chat)
    assert user_row.content == "@content draft post"  # the history keeps the original
    assert (answer.content, answer.routed_to) == ("draft post", "atlas/content")


async def test_observed_rows_join_the_next_turn_as_one_block_within_the_window(
    rig: Rig,
) -> None:
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner, context=ContextSettings(observe_window_messages=3))
    chat = "discord:guild/77/channel/3"  # ROUTING §7: row 6 (mentions fire main), row 7 (observe)

    async def say(name: str, text: str, action: Action) -> str:
        result = await services.ingest.ingest(inbound(chat, text, sender=f"discord:user/{name}"))
        assert (result.decision.action, result.decision.folder) == (action, "main")
        return result.id

    chatter = [("alice", "o1"), ("bob", "o2"), ("alice", "o3"), ("bob", "o4"), ("alice", "o5")]
    observed = [await say(name, text, Action.OBSERVE) for name, text in chatter]
    await say("carol", "@Postroom what did I miss?", Action.FIRE)
    first = await settled(services, await last_job(services))
    assert pairs(runner.requests[0]) == [
        ("user", "[alice] o3\n[bob] o4\n[alice] o5"),
        ("user", "[carol] @Postroom what did I miss?"),
    ]
    by_id = {m.id: m for m in await rows(services, chat)}
    assert [by_id[i].conversation_id for i in observed] == [None, None] + [
        first.conversation_id
    ] * 3
    async with services.store.read() as tx:
        skipped = await tx._conn.fetchall(  # type: ignore[attr-defined]
            "SELECT id FROM messages WHERE chat_jid = ? AND skipped = 1 ORDER BY seq", (chat,)
        )
    assert [row[0] for row in skipped] == observed[:2]

    await say("bob", "o6", Action.OBSERVE)
    await say("carol", "@Postroom and now?", Action.FIRE)
    second = await settled(services, await last_job(services))
    assert second.id != first.id
    request = runner.requests[1]
    assert pairs(request)[3:] == [("user", "[bob] o6"), ("user", "[carol] @Postroom and now?")]
    seen = "\n".join(m.content for m in request.messages)
    assert "o1" not in seen and "o2" not in seen  # skipped for good
    assert (await answers(services, chat))[-1].content == "[bob] o6\n[carol] @Postroom and now?"


async def test_new_starts_a_fresh_generation(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner)
    chat = "telegram:group/5"
    first = await settled(services, await fire(services, chat, "first"))
    result = await services.ingest.ingest(inbound(chat, "/new"))
    assert result.decision.action is Action.COMMAND
    second = await settled(services, await fire(services, chat, "second"))
    assert second.conversation_id != first.conversation_id
    assert pairs(runner.requests[1]) == [("user", "second")]


async def test_context_keeps_the_newest_max_messages(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner, context=ContextSettings(max_messages=3))
    for text in ("a", "b", "c", "d"):
        await settled(services, await fire(services, "telegram:group/5", text))
    assert pairs(runner.requests[-1]) == [("user", "c"), ("assistant", "c"), ("user", "d")]


async def test_echo_answers_exactly_the_new_input(rig: Rig) -> None:
    services = await rig.open()
    echo = ProviderRunner({"echo": EchoProvider()})
    chat = "telegram:group/5"
    pool = await rig.start_pool(services, echo)
    await settled(services, await fire(services, chat, "one"))
    await pool.stop()
    joined = {await fire(services, chat, "two"), await fire(services, chat, "three")}
    await rig.start_pool(services, echo, boot_id="b2")
    (job_id,) = joined
    await settled(services, job_id)
    await settled(services, await fire(services, chat, "four"))
    assert [a.content for a in await answers(services, chat)] == ["one", "two\nthree", "four"]


# -- the run record ----------------------------------------------------------------------------
async def test_run_record_holds_the_exact_request_output_outcome_and_duration(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner()
    await rig.start_pool(services, runner)
    chat = "telegram:group/5"
    job = await settled(services, await fire(services, chat, "hello"))
    (answer,) = await answers(services, chat)
    assert answer.run_id is not None and answer.metadata["job_id"] == job.id
    async with services.store.read() as tx:
        run = await tx.get_run(answer.run_id)
        (delivery,) = await tx.list_deliveries(message_id=answer.id)
    assert run is not None
    (request,) = runner.requests
    assert (run.job_id, run.folder, run.conversation_id, run.provider) == (
        job.id,
        "atlas",
        job.conversation_id,
        "echo",
    )
    assert run.system == request.system
    assert (
        run.messages
        == [m.to_dict() for m in request.messages]
        == [{"role": "user", "content": "hello"}]
    )
    assert (run.output, run.output_raw, run.outcome, run.error) == ("hello", "hello", "ok", None)
    assert isinstance(run.duration_ms, int) and run.duration_ms >= 0
    assert run.finished_at is not None
    assert delivery.chat_jid == chat and delivery.message_type == "assistant"


async def test_failed_and_cancelled_runs_are_recorded_with_their_duration(rig: Rig) -> None:
    services = await rig.open()
    runner = GatedRunner(failures=[ProviderError("boom", retryable=False)])
    await rig.start_pool(services, runner)
    failed = await settled(
        services, await fire(services, "telegram:group/1", "x"), JobStatus.FAILED
    )
    runner.gate.clear()
    stopped = await fire(services, "telegram:group/2", "y")
    await eventually(lambda: runner.total == 1, "the second run to start")
    await services.ingest.ingest(inbound("telegram:group/2", "/stop"))
    await eventually(lambda: runner.cancelled() == [1], "the run to be cancelled")
    await eventually(lambda: not turn_task_alive(stopped), "the cancelled turn to end")

    records = {run.job_id: run for run in await runs(services)}
    assert (records[failed.id].outcome, records[failed.id].error) == ("error", "boom")
    assert records[failed.id].system == runner.requests[0].system
    assert records[stopped].outcome == "cancelled"
    # MESSAGES §4: every run stores its duration.
    assert {job: run.duration_ms is not None for job, run in records.items()} == {
        failed.id: True,
        stopped: True,
    }


async def test_typing_stops_whatever_the_outcome(rig: Rig) -> None:
    services = await rig.open()
    seen: list[Event] = []

    def record(event: Event) -> bool:
        seen.append(event)
        return False

    services.signals.bus.subscribe(accept=record)
    runner = GatedRunner(failures=[ProviderError("boom", retryable=False)])
    await rig.start_pool(services, runner, max_concurrent_turns=1)
    failed = await fire(services, "telegram:group/1", "x")
    await settled(services, failed, JobStatus.FAILED)
    answered = await fire(services, "telegram:group/2", "y")
    await settled(services, answered)
    runner.gate.clear()
    stopped = await fire(services, "telegram:group/3", "z")
    await eventually(lambda: runner.total == 1, "the last run to start")
    await services.ingest.ingest(inbound("telegram:group/3", "/stop"))
    await eventually(lambda: not turn_task_alive(stopped), "the cancelled turn to end")

    for chat in ("telegram:group/1", "telegram:group/2", "telegram:group/3"):
        states = [
            e.data["active"] for e in seen if e.kind == "typing" and e.data["chat_jid"] == chat
        ]
        assert states[0] is True and states[-1] is False, (chat, states)
