"""The turn queue as ``postroom serve`` builds it, with real workers over a real SQLite file
(PIPELINE §2): enqueue and join, priorities, one running turn per conversation, FIFO, the busy
policies, the operator's retry and cancel, and the ``/stop`` and ``/status`` commands."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from postroom.core import Action, MessageType
from postroom.core.errors import Conflict, NotFound
from postroom.engine import FolderSpec, Services
from postroom.llm import ModelRequest, ProviderError
from postroom.store import Store, StoreTx
from postroom.store.records import JobRecord, JobStatus

from fakeclock import FakeClock
from gated_provider import GatedProvider
from gateway_support import new_data_dir
from support import another_process_store, eventually, inbound, queue_idle
from turn_rig import Rig, all_jobs, answers, fire, rows, settled

#: Every test runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("db_engine")

OWNER = "telegram:user/1"
OWNERS = {"senders": [OWNER]}


class ClaimTap:
    """The pool's :class:`Store`, in front of the real one: runs ``after_claim`` once, right
    after a worker's claim commits and before its next transaction (where the turn's context
    is built) — a moment no sleep could hit reliably."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.after_claim: Callable[[], Awaitable[object]] | None = None
        self._due: Callable[[], Awaitable[object]] | None = None

    def read(self) -> AbstractAsyncContextManager[StoreTx]:
        return self._inner.read()

    def claim(self) -> AbstractAsyncContextManager[StoreTx]:
        return self._inner.claim()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        hook, self._due = self._due, None
        if hook is not None:
            await hook()
        async with self._inner.write() as tx:
            yield _TapTx(tx, self)

    async def close(self) -> None:
        await self._inner.close()

    def claimed(self) -> None:
        if self.after_claim is not None:
            self._due, self.after_claim = self.after_claim, None


class _TapTx:
    def __init__(self, tx: StoreTx, tap: ClaimTap) -> None:
        self._tx = tx
        self._tap = tap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    async def claim_job(self, **kwargs: Any) -> JobRecord | None:
        job = await self._tx.claim_job(**kwargs)
        if job is not None:
            self._tap.claimed()
        return job


@pytest.fixture
async def rig(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path, clock)
    try:
        yield rig
    finally:
        await rig.close()


# -- helpers -----------------------------------------------------------------------------------
async def command(services: Services, chat: str, text: str) -> str:
    result = await services.ingest.ingest(inbound(chat, text))
    assert result.decision.action is Action.COMMAND, result.decision
    assert result.decision.ack is not None
    return result.decision.ack


async def queue_empty(services: Services) -> bool:
    return await queue_idle(services, outbox=False)


def user_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


# -- enqueue, join, priorities (no workers) -----------------------------------------------------
async def test_fired_message_queues_a_turn_and_the_next_one_joins_it(
    rig: Rig, clock: FakeClock
) -> None:
    services = (await rig.build(GatedProvider())).services
    chat = "telegram:group/5"
    first = await services.ingest.ingest(inbound(chat, "first"))
    second = await services.ingest.ingest(inbound(chat, "second"))
    assert first.decision.action is Action.FIRE and first.decision.job_id is not None
    assert second.decision.job_id == first.decision.job_id  # joined: no second job

    job = await services.turns.get_job(first.decision.job_id)
    assert (job.status, job.folder, job.chat_jid, job.topic) == (
        JobStatus.QUEUED,
        "atlas",
        chat,
        "",
    )
    assert (job.priority, job.attempts, job.max_attempts, job.run_at) == (5, 0, 3, clock.now)
    assert job.messages == ((first.id, chat), (second.id, chat))
    assert [j.id for j in await all_jobs(services)] == [job.id]
    stored = await rows(services, chat)
    assert {m.conversation_id for m in stored} == {job.conversation_id}

    # Another chat is another conversation, with its own turn.
    other = await fire(services, "telegram:group/6", "elsewhere")
    other_job = await services.turns.get_job(other)
    assert other != job.id and other_job.conversation_id != job.conversation_id


async def test_priorities_owner_conductor_normal_and_joining_takes_the_minimum(rig: Rig) -> None:
    services = (await rig.build(GatedProvider(), owners=OWNERS)).services
    await services.folders.add_folder("boss", FolderSpec(role="conductor"), actor="test")
    await services.routes.add_route(-20, "chat_jid=telegram:group/30", "boss", actor="test")

    normal = await fire(services, "telegram:group/5", "plain")
    owner = await fire(services, "telegram:group/6", "from the owner", sender=OWNER)
    conductor = await fire(services, "telegram:group/30", "to the conductor")
    priority = {
        job_id: (await services.turns.get_job(job_id)).priority
        for job_id in (normal, owner, conductor)
    }
    assert priority == {normal: 5, owner: 1, conductor: 3}

    # Joining a queued turn lowers its number to the most urgent sender's, never raises it.
    assert await fire(services, "telegram:group/5", "the owner joins", sender=OWNER) == normal
    assert (await services.turns.get_job(normal)).priority == 1
    assert await fire(services, "telegram:group/5", "someone else joins") == normal
    assert (await services.turns.get_job(normal)).priority == 1
    assert await fire(services, "telegram:group/30", "a normal sender joins") == conductor
    assert (await services.turns.get_job(conductor)).priority == 3


# -- concurrency, FIFO and priority order with real workers -----------------------------------
async def test_one_turn_per_conversation_many_in_parallel_up_to_the_cap_fifo_each(
    rig: Rig,
) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 4})).services
    chats = [f"telegram:group/{100 + n}" for n in range(6)]
    sent: dict[str, list[str]] = {chat: [] for chat in chats}
    fired: list[str] = []

    db_running_max: Counter[int] = Counter()
    db_total_max = 0

    async def sample() -> None:
        nonlocal db_total_max
        while True:
            running = await services.turns.list_jobs(status="running", limit=1000)
            per_conversation = Counter(job.conversation_id for job in running)
            for conversation_id, count in per_conversation.items():
                db_running_max[conversation_id] = max(db_running_max[conversation_id], count)
            db_total_max = max(db_total_max, len(running))
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample(), name="jobs-sampler")

    async def send(chat: str, n: int) -> None:
        text = f"{chat.rpartition('/')[2]}-{n}"
        result = await services.ingest.ingest(inbound(chat, text))
        assert result.decision.action is Action.FIRE
        sent[chat].append(text)
        fired.append(result.id)

    try:
        for chat in chats:
            await send(chat, 1)
        await eventually(lambda: runner.total == 4, "four turns in flight")
        running = await services.turns.list_jobs(status="running", limit=100)
        queued = await services.turns.list_jobs(status="queued", limit=100)
        assert len(running) == 4 and len({job.conversation_id for job in running}) == 4
        assert len(queued) == 2
        for n in range(2, 5):  # while every turn is held: follow-ups and joins
            for chat in chats:
                await send(chat, n)
        runner.gate.set()
        for n in range(5, 9):  # while turns finish and start: any interleaving
            for chat in chats:
                await send(chat, n)
                await asyncio.sleep(0.003)
        await eventually(lambda: queue_empty(services), "the queue to drain")
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)

    # Never two running turns in one conversation; never more than the cap; the cap reached.
    assert set(runner.max_in_flight.values()) == {1}
    assert runner.max_total == 4
    assert db_running_max and set(db_running_max.values()) == {1}
    assert db_total_max <= 4

    jobs = await all_jobs(services)
    assert {job.status for job in jobs} == {JobStatus.DONE}
    assert len(runner.requests) == len(jobs)  # each turn ran once
    answered = Counter(message_id for job in jobs for message_id, _ in job.messages)
    assert sorted(answered) == sorted(fired) and set(answered.values()) == {1}
    texts = {m.id: m.content for chat in chats for m in await rows(services, chat)}
    for chat in chats:
        replies = await answers(services, chat)
        chat_jobs = {job.id: job for job in jobs if job.chat_jid == chat}
        assert sorted(reply.metadata["job_id"] for reply in replies) == sorted(chat_jobs)
        assert {job.answer_id for job in chat_jobs.values()} == {reply.id for reply in replies}
        for reply in replies:  # each turn answers exactly the messages recorded for it
            job = chat_jobs[reply.metadata["job_id"]]
            assert reply.content.split("\n") == [
                texts[message_id] for message_id, _ in job.messages
            ]
        # FIFO: answers come in job order, and together they repeat the messages in order.
        job_order = [reply.metadata["job_id"] for reply in replies]
        assert job_order == sorted(job_order)
        assert "\n".join(reply.content for reply in replies).split("\n") == sent[chat]


async def test_priority_decides_across_conversations(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    gateway = await rig.build(runner, owners=OWNERS, queue={"max_concurrent_turns": 1})
    services = gateway.services
    await services.folders.add_folder("boss", FolderSpec(role="conductor"), actor="test")
    await services.routes.add_route(-20, "chat_jid=telegram:group/30", "boss", actor="test")
    await gateway.workers.start()

    first = await fire(services, "telegram:group/201", "a")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    normal_b = await fire(services, "telegram:group/202", "b")
    normal_c = await fire(services, "telegram:group/203", "c")
    conductor = await fire(services, "telegram:group/30", "d")
    owner = await fire(services, "telegram:group/205", "e", sender=OWNER)
    assert first < normal_b < normal_c < conductor < owner
    runner.gate.set()
    await eventually(lambda: queue_empty(services), "the queue to drain")

    assert [chat for _, chat in runner.keys] == [
        "telegram:group/201",
        "telegram:group/205",  # owner (1), queued last
        "telegram:group/30",  # conductor (3)
        "telegram:group/202",  # normal (5), first come first served
        "telegram:group/203",
    ]


# -- busy policies -------------------------------------------------------------------------------
async def test_followup_answers_everything_that_arrived_in_one_turn(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner)).services
    chat = "telegram:group/5"
    running = await fire(services, chat, "m1")
    await eventually(lambda: runner.total == 1, "the first turn to start")

    followups = [await fire(services, chat, text) for text in ("m2", "m3", "m4")]
    assert followups[0] != running and len(set(followups)) == 1
    followup = followups[0]
    assert (await services.turns.get_job(running)).status is JobStatus.RUNNING
    assert (await services.turns.get_job(followup)).status is JobStatus.QUEUED

    runner.gate.set()
    await settled(services, running)
    job = await settled(services, followup)
    assert len(job.messages) == 3
    assert len(runner.requests) == 2 and runner.max_in_flight[("atlas", chat)] == 1
    assert user_texts(runner.requests[1]) == ["m1", "m2", "m3", "m4"]
    assert [(a.content, a.metadata["job_id"]) for a in await answers(services, chat)] == [
        ("m1", running),
        ("m2\nm3\nm4", followup),
    ]


async def test_interrupt_cancels_the_running_turn_and_answers_all_messages(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    gateway = await rig.build(runner)
    services = gateway.services
    await services.folders.add_folder("rush", FolderSpec(busy_policy="interrupt"), actor="test")
    await services.routes.add_route(-20, "chat_jid=telegram:group/77", "rush", actor="test")
    await gateway.workers.start()
    chat = "telegram:group/77"

    interrupted = await fire(services, chat, "m1")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    replacement = await fire(services, chat, "m2")
    assert replacement != interrupted
    await eventually(lambda: runner.cancelled() == [0], "the running call to be cancelled")
    assert (await services.turns.get_job(interrupted)).status is JobStatus.CANCELLED

    runner.gate.set()
    job = await settled(services, replacement)
    m1, m2 = (m for m in await rows(services, chat) if m.message_type is MessageType.USER)
    assert job.messages == ((m1.id, chat), (m2.id, chat))
    assert len(runner.requests) == 2
    assert user_texts(runner.requests[1]) == ["m1", "m2"]
    # The interrupted call was over before the new one started.
    assert runner.events.index(("cancelled", 0)) < runner.events.index(("start", 1))
    (answer,) = await answers(services, chat)
    assert (answer.content, answer.metadata["job_id"]) == ("m1\nm2", replacement)
    assert (await services.turns.get_job(interrupted)).answer_id is None


async def test_a_message_arriving_as_its_turn_starts_is_answered_by_one_turn_only(
    rig: Rig,
) -> None:
    await new_data_dir(rig.data_dir)
    tap = ClaimTap(await another_process_store(rig.data_dir))
    runner = GatedProvider()
    services = (await rig.start(runner, store=tap, queue={"max_concurrent_turns": 1})).services
    chat = "telegram:group/5"
    late: list[int] = []

    async def arrive() -> None:  # after the claim, before the context is read
        late.append(await fire(services, chat, "m2"))

    tap.after_claim = arrive
    first = await fire(services, chat, "m1")
    await eventually(lambda: bool(late), "m2 to arrive as the first turn starts")
    (followup,) = late
    assert followup != first  # the first turn was running: m2 is the follow-up's
    await settled(services, first)
    await settled(services, followup)
    m1, m2 = (m for m in await rows(services, chat) if m.message_type is MessageType.USER)
    assert (await services.turns.get_job(first)).messages == ((m1.id, chat),)
    assert (await services.turns.get_job(followup)).messages == ((m2.id, chat),)
    # PIPELINE §2: every fired message is answered by exactly one turn, the one recorded.
    assert [(a.metadata["job_id"], a.content) for a in await answers(services, chat)] == [
        (first, "m1"),
        (followup, "m2"),
    ]


# -- the operator's cancel and retry -----------------------------------------------------------
async def test_cancel_queued_and_running_turns_then_retry_them(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    running = await fire(services, "telegram:group/1", "a")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    queued = await fire(services, "telegram:group/2", "b")

    cancelled_queued = await services.turns.cancel(queued)
    assert cancelled_queued.status is JobStatus.CANCELLED
    assert cancelled_queued.finished_at is not None
    cancelled_running = await services.turns.cancel(running)
    assert cancelled_running.status is JobStatus.CANCELLED
    await eventually(lambda: runner.cancelled() == [0], "the running call to be cancelled")

    runner.gate.set()
    await eventually(lambda: not any(runner.in_flight.values()), "no call in flight")
    assert len(runner.requests) == 1  # the cancelled queued turn never ran
    assert (await services.turns.get_job(queued)).status is JobStatus.CANCELLED
    assert await answers(services, "telegram:group/1") == []

    for job_id, chat, text in (
        (queued, "telegram:group/2", "b"),
        (running, "telegram:group/1", "a"),
    ):
        again = await services.turns.retry(job_id)
        assert (again.status, again.attempts) == (JobStatus.QUEUED, 0)
        done = await settled(services, job_id)
        (answer,) = await answers(services, chat)
        assert (answer.content, done.answer_id) == (text, answer.id)


async def test_retry_and_cancel_refuse_the_wrong_state_and_unknown_ids(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    running = await fire(services, "telegram:group/1", "a")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    queued = await fire(services, "telegram:group/2", "b")

    with pytest.raises(Conflict):
        await services.turns.retry(running)
    with pytest.raises(Conflict):
        await services.turns.retry(queued)
    runner.gate.set()
    await settled(services, running)
    await settled(services, queued)
    with pytest.raises(Conflict):
        await services.turns.retry(running)
    with pytest.raises(Conflict):
        await services.turns.cancel(running)
    assert (await services.turns.get_job(running)).status is JobStatus.DONE
    for call in (services.turns.retry, services.turns.cancel, services.turns.get_job):
        with pytest.raises(NotFound):
            await call(9999)


# -- /stop and /status ----------------------------------------------------------------------------
async def test_stop_cancels_the_running_turn_and_status_reports_the_queue(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    chat_a, chat_b, chat_c = "telegram:group/1", "telegram:group/2", "telegram:group/3"
    running = await fire(services, chat_a, "a")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    queued_b = await fire(services, chat_b, "b")
    queued_c = await fire(services, chat_c, "c")

    assert "queue: a turn is running" in await command(services, chat_a, "/status")
    assert "queue: a turn is queued (next)" in await command(services, chat_b, "/status")
    assert "queue: a turn is queued (1 ahead)" in await command(services, chat_c, "/status")

    ack = await command(services, chat_a, "/stop")
    assert ack == f"stopped the turn in progress (job {running})"
    await eventually(lambda: runner.cancelled() == [0], "the running call to be cancelled")
    assert (await services.turns.get_job(running)).status is JobStatus.CANCELLED
    notices = [m for m in await rows(services, chat_a) if m.message_type is MessageType.HOST]
    assert [m.content for m in notices][-1] == ack

    runner.gate.set()
    await settled(services, queued_b)
    await settled(services, queued_c)
    assert await answers(services, chat_a) == []
    # The commands themselves never reach a model.
    assert user_texts(runner.requests[1]) == ["b"]
    assert [a.content for a in await answers(services, chat_b)] == ["b"]


async def test_stop_answers_the_stopped_question_and_the_followup_only_what_came_after(
    rig: Rig,
) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    chat = "telegram:group/5"
    stopped = await fire(services, chat, "write me a very long essay")
    await eventually(lambda: runner.total == 1, "the first turn to start")
    followup = await fire(services, chat, "never mind: what time is it?")
    assert followup != stopped

    assert await command(services, chat, "/stop") == f"stopped the turn in progress (job {stopped})"
    await eventually(lambda: runner.cancelled() == [0], "the running call to be cancelled")
    runner.gate.set()
    await settled(services, followup)
    # ROUTING §3.1: the cancellation answered the stopped question; the follow-up answers
    # only what came after it.
    assert user_texts(runner.requests[1]) == ["never mind: what time is it?"]
    assert [a.content for a in await answers(services, chat)] == ["never mind: what time is it?"]

    # Nor does any later turn take the stopped question up.
    later = await fire(services, chat, "thanks")
    await settled(services, later)
    assert user_texts(runner.requests[2]) == ["never mind: what time is it?", "thanks"]
    assert [a.content for a in await answers(services, chat)][-1] == "thanks"


async def test_stop_with_nothing_queued_leaves_the_question_answered(rig: Rig) -> None:
    runner = GatedProvider(open_gate=False)
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    chat = "telegram:group/5"
    stopped = await fire(services, chat, "first")
    await eventually(lambda: runner.total == 1, "the turn to start")
    await command(services, chat, "/stop")
    await settled(services, stopped, JobStatus.CANCELLED)
    runner.gate.set()
    later = await fire(services, chat, "second")
    await settled(services, later)
    assert user_texts(runner.requests[-1]) == ["second"]
    assert [a.content for a in await answers(services, chat)] == ["second"]


async def test_stop_cancels_a_turn_waiting_to_be_retried(rig: Rig, clock: FakeClock) -> None:
    runner = GatedProvider(failures=[ProviderError("anthropic answered HTTP 500", retryable=True)])
    services = (await rig.start(runner, queue={"max_concurrent_turns": 1})).services
    chat = "telegram:group/5"
    waiting = await fire(services, chat, "first")
    await eventually(lambda: runner.events[-1:] == [("failed", 0)], "the first run to fail")

    async def retry_due() -> bool:
        job = await services.turns.get_job(waiting)
        return job.status is JobStatus.QUEUED and job.attempts == 1

    await eventually(retry_due, "the turn to wait for its retry")
    ack = await command(services, chat, "/stop")
    assert ack == f"stopped the turn waiting to run (job {waiting})"
    assert (await services.turns.get_job(waiting)).status is JobStatus.CANCELLED
    clock.advance(minutes=5)  # past the backoff: nothing may run it now
    later = await fire(services, chat, "second")
    await settled(services, later)
    assert len(runner.requests) == 2
    assert user_texts(runner.requests[1]) == ["second"]
