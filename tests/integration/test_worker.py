"""Workers as ``postroom serve`` builds them, over a real SQLite file (PIPELINE §2–§3, MESSAGES
§4): retries and backoff, the final host notice, leases and crash recovery, graceful shutdown,
the context a run is given, and the run record it leaves."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from postroom.app.gateway import Gateway
from postroom.app.wiring import owner_id
from postroom.config import Config
from postroom.core import Action, MessageType
from postroom.engine import FolderSpec, Services
from postroom.engine.signals import Event
from postroom.llm import EchoProvider, ModelRequest, ProviderError
from postroom.store import NewMessage, Store
from postroom.store.records import JobStatus
from postroom.store.sqlite import base as sqlite_base

from fakeclock import FakeClock
from gated_provider import GatedProvider
from gateway_support import RecordingChannel, new_data_dir, serving
from support import (
    SQLITE_ONLY,
    another_process_store,
    eventually,
    inbound,
    queue_idle,
    runs,
    seed_spec_table,
)
from turn_rig import (
    CLAIM,
    SWEEP,
    Rig,
    answers,
    fire,
    job_when,
    rows,
    settled,
    statements,
    turn_task_alive,
)

#: Every test runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("db_engine")


@pytest.fixture
async def rig(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path, clock)
    try:
        yield rig
    finally:
        await rig.close()


async def last_job(services: Services) -> int:
    (job,) = await services.turns.list_jobs(limit=1)
    return job.id


TRACE = MessageType.TRACE


def pairs(request: ModelRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages]


async def looks(services: Services, part: str, count: int, what: str) -> list[float]:
    """Wait until the store ran *count* statements containing *part* from now on."""
    with statements(services, part) as seen:
        await eventually(lambda: len(seen) >= count, what)
    return seen


# -- retries and failure -------------------------------------------------------------------------
async def test_failed_runs_back_off_then_fail_with_a_host_notice_and_can_be_retried(
    rig: Rig, clock: FakeClock
) -> None:
    runner = GatedProvider(failures=[ProviderError(f"upstream 503 ({n})") for n in (1, 2, 3)])
    services = (await rig.start(runner)).services
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "hello")

    job = await job_when(services, job_id, lambda j: j.attempts == 1, "first failure")
    assert job.status is JobStatus.QUEUED and job.lease_until is None
    assert job.run_at == clock.now + timedelta(seconds=120)  # backoff_base × 2^1
    assert job.last_error == "upstream 503 (1)"
    # Not due: the dispatcher looks at the queue (woken by the turn's end, then by its backstop
    # timer) and leaves it there.
    await looks(services, CLAIM, 2, "two looks at the queue")
    assert len(runner.requests) == 1
    # The chat is told at once how long the answer will take, not left in silence.
    (retrying,) = [m for m in await rows(services, chat) if m.message_type is MessageType.HOST]
    assert retrying.content == "⚠️ trying again in 2 minutes"
    assert retrying.metadata == {"source": "turn_retry", "job_id": job_id}

    advance(services, clock, seconds=120)
    job = await job_when(services, job_id, lambda j: j.attempts == 2, "second failure")
    assert job.status is JobStatus.QUEUED
    assert job.run_at == clock.now + timedelta(seconds=240)  # backoff_base × 2^2

    advance(services, clock, seconds=240)
    job = await settled(services, job_id, JobStatus.FAILED)
    assert (job.attempts, job.last_error) == (3, "upstream 503 (3)")
    assert len(runner.requests) == 3
    assert await answers(services, chat) == []
    # Later retries are not announced again; the last failure is.
    notices = [m for m in await rows(services, chat) if m.message_type is MessageType.HOST]
    assert [m.content for m in notices] == [
        "⚠️ trying again in 2 minutes",
        f"⚠️ could not answer (job {job_id}): upstream 503 (3)",
    ]
    notice = notices[-1]
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
    runner = GatedProvider(failures=[ProviderError("invalid API key", retryable=False)])
    services = (await rig.start(runner)).services
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
    runner = GatedProvider()
    gateway = await rig.build(runner)
    services = gateway.services
    job_id = await fire(services, "telegram:group/5", "hello")
    async with services.store.write() as tx:
        claimed = await tx.claim_job(
            now=clock(),
            lease_until=clock() + timedelta(seconds=30),
            owner=owner_id(rig.data_dir),
            boot_id="old",
            token="old-token",
        )
    assert claimed is not None and claimed.id == job_id

    await gateway.workers.start()
    # Answered with the clock standing still: the restart never waited for the lease.
    job = await settled(services, job_id)
    assert job.attempts == 0 and len(runner.requests) == 1
    (answer,) = await answers(services, "telegram:group/5")
    assert answer.content == "hello" and job.answer_id == answer.id
    async with services.store.write() as tx:
        assert not await tx.finish_job(job_id, "old-token", status=JobStatus.FAILED, now=clock())


async def test_an_expired_lease_is_requeued_by_the_sweeper(rig: Rig, clock: FakeClock) -> None:
    runner = GatedProvider()
    gateway = await rig.build(runner, queue={"lease": "300ms"})  # swept every 0.1 s
    services = gateway.services
    job_id = await fire(services, "telegram:group/5", "hello")
    async with services.store.write() as tx:
        await tx.claim_job(
            now=clock(),
            lease_until=clock() + timedelta(seconds=5),
            owner="another-server",
            boot_id="x",
            token="ghost",
        )
    await gateway.workers.start()

    await looks(services, SWEEP, 2, "two sweeps")  # a live lease of another server is left alone
    job = await services.turns.get_job(job_id)
    assert (job.status, job.lease_owner) == (JobStatus.RUNNING, "another-server")
    assert runner.requests == []

    clock.advance(seconds=10)  # that server died: its lease runs out
    job = await settled(services, job_id)
    assert job.attempts == 0 and len(runner.requests) == 1
    assert [a.content for a in await answers(services, "telegram:group/5")] == ["hello"]


async def test_a_stalled_worker_cannot_commit_a_turn_it_lost(rig: Rig, clock: FakeClock) -> None:
    runner = GatedProvider()
    runner.holds[0] = asyncio.Event()
    # The lease is short and never renewed within the test: the first run stalls past it.
    services = (await rig.start(runner, queue={"lease": "300ms", "lease_renew": "30s"})).services
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


async def test_a_turn_of_three_lease_lengths_keeps_its_lease_and_finishes_once(
    tmp_path: Path,
) -> None:
    """PIPELINE §2: a run that lasts many times the lease keeps it by renewal (real time here:
    the lease is compared with the clock), and its answer is stored and delivered once."""
    data = await new_data_dir(tmp_path / "data")
    runner = GatedProvider()
    runner.holds[0] = asyncio.Event()
    channel = RecordingChannel()
    config = Config.model_validate({"queue": {"lease": "1s", "lease_renew": "100ms"}})
    gateway = await Gateway.build(data, config, providers={"echo": runner}, channels=[channel])
    services = gateway.services
    await seed_spec_table(services)
    chat = "telegram:group/5"
    async with serving(gateway):
        job_id = await fire(services, chat, "take your time")
        await eventually(lambda: runner.total == 1, "the run to start")
        asyncio.get_running_loop().call_later(3.5, runner.holds[0].set)  # 3.5 leases
        with statements(services, "UPDATE jobs SET lease_until") as renewals:
            job = await settled(services, job_id)
        await eventually(lambda: channel.to(chat), "the answer to be delivered")
        await eventually(lambda: queue_idle(services), "the outbox to be idle")
        assert len(renewals) >= 10, renewals
        (answer,) = await answers(services, chat)
        assert (job.attempts, job.answer_id) == (0, answer.id)
        assert len(runner.requests) == 1 and runner.cancelled() == []
        assert [r.outcome for r in await runs(services)] == ["ok"]
        async with services.store.read() as tx:
            (delivery,) = await tx.list_deliveries(message_id=answer.id)
        assert delivery.status == "sent"
        assert channel.to(chat) == [("assistant", "take your time")]


async def take_lease(store: Store, job_id: int, now: datetime) -> None:
    """Another server takes the job: it finds the lease expired and claims the turn."""
    async with store.write() as tx:
        assert await tx.release_expired_leases(now=now) == [job_id]
        taken = await tx.claim_job(
            now=now,
            lease_until=now + timedelta(seconds=30),
            owner="another-server",
            boot_id="x",
            token="ghost",
        )
    assert taken is not None and taken.id == job_id


async def running_turn(rig: Rig, chat: str) -> tuple[GatedProvider, Services, int]:
    """A turn whose model call is held, on a server that renews leases every 50 ms."""
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"lease_renew": "50ms"})).services
    job_id = await fire(services, chat, "hello")
    await eventually(lambda: runner.total == 1, "the run to start")
    return runner, services, job_id


async def stopped_leaving_nothing(
    runner: GatedProvider, services: Services, chat: str, job_id: int
) -> None:
    """The held call was cancelled, the turn's task ended, and it stored nothing — no answer,
    not even a run record (the turn is not this worker's any more)."""
    await eventually(lambda: runner.cancelled() == [0], "the run to stop")
    await eventually(lambda: not turn_task_alive(job_id), "the turn to end")
    runner.gate.set()
    assert await answers(services, chat) == []
    assert await runs(services) == []


async def test_a_worker_whose_lease_was_taken_stops_at_once_and_commits_nothing(
    rig: Rig, clock: FakeClock
) -> None:
    chat = "telegram:group/5"
    runner, services, job_id = await running_turn(rig, chat)
    # Another process (no signal reaches this one) takes the turn over.
    other = await another_process_store(rig.data_dir)
    try:
        await take_lease(other, job_id, clock() + timedelta(seconds=31))
        await stopped_leaving_nothing(runner, services, chat, job_id)
        job = await services.turns.get_job(job_id)
        assert (job.status, job.lease_owner, job.attempts) == (
            JobStatus.RUNNING,
            "another-server",
            0,
        )
        # That server gives the turn back (it stopped): this one answers it, once.
        async with other.write() as tx:
            assert await tx.release_lease(job_id, "ghost")
    finally:
        await other.close()
    services.signals.turns.wake()
    job = await settled(services, job_id)
    (answer,) = await answers(services, chat)
    assert (answer.content, job.answer_id, job.attempts) == ("hello", answer.id, 0)
    assert len(runner.requests) == 2


async def test_a_turn_cancelled_by_another_process_stops_and_commits_nothing(
    rig: Rig, clock: FakeClock
) -> None:
    """``postroom jobs cancel`` runs in another process: the worker learns it when it renews."""
    chat = "telegram:group/5"
    runner, services, job_id = await running_turn(rig, chat)
    other = await another_process_store(rig.data_dir)
    try:
        async with other.write() as tx:
            assert await tx.cancel_job(job_id, now=clock()) is not None
    finally:
        await other.close()
    await stopped_leaving_nothing(runner, services, chat, job_id)
    assert (await services.turns.get_job(job_id)).status is JobStatus.CANCELLED


async def test_an_answered_turn_is_never_run_again(rig: Rig, clock: FakeClock) -> None:
    runner = GatedProvider()
    first = await rig.start(runner)
    job_id = await fire(first.services, "telegram:group/5", "hello")
    await settled(first.services, job_id)
    await rig.stop(first)

    services = (await rig.start(runner, queue={"lease": "300ms"})).services  # a restart
    clock.advance(hours=2)
    # Start-up recovery has run; then sweeps and looks at the queue happen.
    await looks(services, SWEEP, 2, "two sweeps")
    await looks(services, CLAIM, 1, "a look at the queue")
    async with services.store.write() as tx:
        assert await tx.release_expired_leases(now=clock()) == []
        assert await tx.release_previous_boot(owner=owner_id(rig.data_dir), boot_id="b3") == []
    assert len(runner.requests) == 1
    assert (await services.turns.get_job(job_id)).status is JobStatus.DONE
    assert len(await answers(services, "telegram:group/5")) == 1


# -- claiming ----------------------------------------------------------------------------------
async def test_a_turn_queued_behind_a_running_one_is_not_polled_for(rig: Rig) -> None:
    """The conversation's next turn is due but blocked until the running one ends: the
    dispatcher sleeps until that end wakes it (or its one-second backstop timer fires), rather
    than claiming again and again."""
    runner = GatedProvider()
    runner.holds[0] = asyncio.Event()
    services = (await rig.start(runner)).services
    chat = "telegram:group/5"
    first = await fire(services, chat, "first")
    await eventually(lambda: runner.total == 1, "the first run to start")
    with statements(services, CLAIM) as claims:
        second = await fire(services, chat, "second")
        assert second != first
        # The enqueue's wake-up: one claim, which finds the conversation busy; the next look
        # is the backstop's, a second later.
        await eventually(lambda: len(claims) >= 2, "the backstop's look at the queue")
        assert claims[1] - claims[0] >= 0.5, claims
    runner.holds[0].set()
    await settled(services, second)
    assert [a.content for a in await answers(services, chat)] == ["first", "second"]


async def test_turns_fill_the_free_slots_and_no_more(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    gateway = await rig.start(runner, queue={"max_concurrent_turns": 3})
    services, pool = gateway.services, gateway.workers
    jobs = [await fire(services, f"telegram:group/{n}", "hi") for n in range(4)]
    await eventually(lambda: runner.total == 3, "three turns to start")
    assert pool.running_jobs == jobs[:3]
    runner.gate.set()
    for job_id in jobs:
        await settled(services, job_id)
    await eventually(lambda: pool.running_jobs == [], "every turn task to end")
    # Never a fourth at once: the last turn started only after one of the first three ended.
    assert runner.max_total == 3
    assert runner.events.index(("start", 3)) > min(
        runner.events.index(("done", n)) for n in range(3)
    )


@SQLITE_ONLY
async def test_claiming_goes_on_after_a_claim_fails(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock past the busy timeout fails a claim; the
    dispatcher logs it and claims again later instead of ending for good."""
    monkeypatch.setattr(sqlite_base, "BUSY_TIMEOUT_MS", 100)
    services = (await rig.start(GatedProvider())).services
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
    runner = GatedProvider(open_gate=False)
    gateway = await rig.start(runner, queue={"shutdown_grace": "100ms"})
    job_id = await fire(gateway.services, "telegram:group/5", "hello")
    await eventually(lambda: runner.total == 1, "the turn to start")

    await rig.stop(gateway)
    restarted = await rig.build(GatedProvider())
    services = restarted.services
    job = await services.turns.get_job(job_id)
    assert (job.status, job.attempts, job.lease_until, job.lease_token) == (
        JobStatus.QUEUED,
        0,
        None,
        None,
    )
    assert runner.cancelled() == [0]
    assert await answers(services, "telegram:group/5") == []

    await restarted.workers.start()
    job = await settled(services, job_id)
    assert job.attempts == 0
    assert [a.content for a in await answers(services, "telegram:group/5")] == ["hello"]


async def test_shutdown_lets_a_turn_finish_within_the_grace_and_stops_claiming(
    rig: Rig,
) -> None:
    runner = GatedProvider(open_gate=False)
    gateway = await rig.start(runner, queue={"shutdown_grace": "10s"})
    services = gateway.services
    running = await fire(services, "telegram:group/1", "a")
    await eventually(lambda: runner.total == 1, "the turn to start")

    stopping = asyncio.create_task(gateway.workers.stop(), name="pool-stop")
    await asyncio.sleep(0)  # stop() has begun: no more claims
    waiting = await fire(services, "telegram:group/2", "b")
    runner.gate.set()
    await asyncio.wait_for(stopping, timeout=10)

    # Stopped: the turn that was running finished; the one queued during the grace never ran.
    assert len(runner.requests) == 1
    assert (await services.turns.get_job(running)).status is JobStatus.DONE
    assert (await services.turns.get_job(waiting)).status is JobStatus.QUEUED
    assert [a.content for a in await answers(services, "telegram:group/1")] == ["a"]


# -- the context of a run ------------------------------------------------------------------------
async def test_context_leaves_out_host_trace_and_commands_and_ends_with_the_notices(
    rig: Rig, clock: FakeClock
) -> None:
    runner = GatedProvider()
    gateway = await rig.build(runner)
    services = gateway.services
    persona = "You are Scribe, a careful note taker."
    await services.folders.add_folder("scribe", FolderSpec(persona=persona), actor="test")
    await services.routes.add_route(-20, "chat_jid=telegram:group/50", "scribe", actor="test")
    await gateway.workers.start()
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
    runner = GatedProvider()
    services = (await rig.start(runner)).services
    chat = "telegram:group/5"
    job_id = await fire(services, chat, "@content draft post")
    job = await settled(services, job_id)
    assert job.folder == "atlas/content"
    assert pairs(runner.requests[0]) == [("user", "draft post")]
    user_row, answer = [m for m in await rows(services, chat) if m.message_type is not TRACE]
    assert user_row.content == "@content draft post"  # the history keeps the original
    assert (answer.content, answer.routed_to) == ("draft post", "atlas/content")


async def test_observed_rows_join_the_next_turn_as_one_block_within_the_window(
    rig: Rig,
) -> None:
    runner = GatedProvider()
    services = (await rig.start(runner, observe={"window_messages": 3})).services
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
    runner = GatedProvider()
    services = (await rig.start(runner)).services
    chat = "telegram:group/5"
    first = await settled(services, await fire(services, chat, "first"))
    result = await services.ingest.ingest(inbound(chat, "/new"))
    assert result.decision.action is Action.COMMAND
    second = await settled(services, await fire(services, chat, "second"))
    assert second.conversation_id != first.conversation_id
    assert pairs(runner.requests[1]) == [("user", "second")]


async def test_context_keeps_the_newest_max_messages(rig: Rig) -> None:
    runner = GatedProvider()
    services = (await rig.start(runner, context={"max_messages": 3})).services
    for text in ("a", "b", "c", "d"):
        await settled(services, await fire(services, "telegram:group/5", text))
    assert pairs(runner.requests[-1]) == [("user", "c"), ("assistant", "c"), ("user", "d")]


async def test_echo_answers_exactly_the_new_input(rig: Rig) -> None:
    chat = "telegram:group/5"
    first = await rig.start(EchoProvider())
    await settled(first.services, await fire(first.services, chat, "one"))
    await rig.stop(first)
    restarted = await rig.build(EchoProvider())
    services = restarted.services
    joined = {await fire(services, chat, "two"), await fire(services, chat, "three")}
    await restarted.workers.start()
    (job_id,) = joined
    await settled(services, job_id)
    await settled(services, await fire(services, chat, "four"))
    assert [a.content for a in await answers(services, chat)] == ["one", "two\nthree", "four"]


# -- the run record ----------------------------------------------------------------------------
async def test_run_record_holds_the_exact_request_output_outcome_and_duration(rig: Rig) -> None:
    runner = GatedProvider()
    services = (await rig.start(runner)).services
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
    runner = GatedProvider(failures=[ProviderError("boom", retryable=False)])
    services = (await rig.start(runner)).services
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
    runner = GatedProvider(failures=[ProviderError("boom", retryable=False)])
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    seen: list[Event] = []

    def record(event: Event) -> bool:
        seen.append(event)
        return False

    services.signals.bus.subscribe(accept=record)
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


def advance(services: Services, clock: FakeClock, **delta: float) -> None:
    """Move the clock and tell the workers (as their backstop timer would, a second later)."""
    clock.advance(**delta)
    services.signals.turns.wake()


async def test_a_finished_turn_wakes_no_claim_when_nothing_is_queued(rig: Rig) -> None:
    """Under light load a turn costs one claiming transaction: its end does not send the
    dispatcher to look at an empty queue (a turn queued behind it would: see above)."""
    gateway = await rig.start(GatedProvider())
    services, pool = gateway.services, gateway.workers
    await settled(services, await fire(services, "telegram:group/9", "warm-up"))
    await eventually(lambda: pool.running_jobs == [], "the warm-up turn's task to end")
    with statements(services, CLAIM) as claims:
        for n in range(3):
            await settled(services, await fire(services, f"telegram:group/{n}", "hi"))
            await eventually(lambda: pool.running_jobs == [], "the turn's task to end")
        # Each turn: one transaction that claims it and finds no other (two statements).
        assert len(claims) == 6, claims
