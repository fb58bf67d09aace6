"""Several nodes on one PostgreSQL database, in one test process (PIPELINE §9): each a gateway
built by ``Gateway.build`` over a data directory of its own and the shared database."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.core import Action, InboundMessage
from postroom.engine import FolderSpec
from postroom.store import NewMessage
from postroom.store.postgres import PostgresStore
from postroom.store.records import JobKind, JobRecord, JobStatus, NewDelivery, NewJob

from fakeclock import FakeClock

Nodes = Callable[[int], Awaitable[list[Gateway]]]


def inbound(chat_jid: str, text: str, *, id: str) -> InboundMessage:
    return InboundMessage(
        id=id,
        chat_jid=chat_jid,
        sender="telegram:user/42",
        content=text,
        timestamp=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
    )


@pytest.fixture
async def nodes(pg_url: str, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Nodes]:
    """Build *n* nodes on the test's database (the first seeds a folder ``main``)."""
    built: list[Gateway] = []

    async def build(n: int) -> list[Gateway]:
        config = Config.model_validate({"database": {"url": pg_url}, "scheduler": {"tick": "1s"}})
        for _ in range(n):
            data_dir = tmp_path / f"node{len(built)}"
            data_dir.mkdir()
            built.append(await Gateway.build(data_dir, config, clock=clock))
        if not await built[0].services.folders.list_folders():
            await built[0].services.folders.add_folder("main", FolderSpec(), actor="test")
        return built[-n:]

    yield build
    for gateway in built:
        await gateway.close()


async def test_a_route_added_through_one_node_decides_the_next_message_on_another(
    nodes: Nodes,
) -> None:
    a, b = await nodes(2)
    await a.services.folders.add_folder("support", FolderSpec(), actor="test")
    await a.services.routes.add_route(10, "chat_jid=telegram:group/9", "main", actor="test")
    first = await b.services.ingest.ingest(inbound("telegram:group/9", "hello", id="m1"))
    assert first.decision.folder == "main"
    await a.services.routes.add_route(5, "chat_jid=telegram:group/9", "support", actor="test")
    second = await b.services.ingest.ingest(inbound("telegram:group/9", "again", id="m2"))
    assert (second.decision.action, second.decision.folder) == (Action.FIRE, "support")


async def test_a_task_due_on_three_ticking_nodes_is_enqueued_once_per_due_time(
    nodes: Nodes, clock: FakeClock
) -> None:
    gateways = await nodes(3)
    first = gateways[0].services
    await first.tasks.add(
        folder="main",
        chat_jid="telegram:group/1",
        schedule="every 2s",
        prompt="Report.",
        actor="test",
    )
    queued: list[int] = []
    for _ in range(10):  # 20 s of a task due every 2 s
        clock.advance(seconds=2)
        ticks = await asyncio.gather(*(g.scheduler.tick() for g in gateways))
        now_queued = [job for tick in ticks for job in tick]
        queued.extend(now_queued)
        # The turn ran (here: it is cancelled), so the next due time is not held back.
        for job_id in now_queued:
            await first.turns.cancel(job_id)
    assert len(queued) == len(set(queued)) == 10


async def test_the_database_refuses_a_second_running_turn_of_a_conversation(
    pg_url: str, clock: FakeClock
) -> None:
    async with await PostgresStore.open(pg_url) as store:
        async with store.write() as tx:
            conversation = await tx.current_conversation("main", "", "c:1", now=clock())
            ids = [
                await tx.insert_job(
                    NewJob(
                        conversation_id=conversation,
                        folder="main",
                        chat_jid="c:1",
                        topic="",
                        kind=JobKind.TURN,
                        priority=5,
                        max_attempts=3,
                        run_at=clock(),
                        created_at=clock(),
                    )
                )
                for _ in range(2)
            ]
        with pytest.raises(asyncpg.UniqueViolationError):
            await _run_all(store, ids)


async def _run_all(store: PostgresStore, job_ids: list[int]) -> None:
    """Mark every turn running by hand, as no claim would."""
    async with store.write() as tx:
        for job_id in job_ids:
            await tx._run("UPDATE jobs SET status = 'running' WHERE id = ?", (job_id,))


async def test_claims_on_two_nodes_take_different_turns(pg_url: str, clock: FakeClock) -> None:
    async with await PostgresStore.open(pg_url) as one, await PostgresStore.open(pg_url) as two:
        async with one.write() as tx:
            for chat in ("c:1", "c:2"):
                conversation = await tx.current_conversation("main", "", chat, now=clock())
                await tx.insert_job(
                    NewJob(
                        conversation_id=conversation,
                        folder="main",
                        chat_jid=chat,
                        topic="",
                        kind=JobKind.TURN,
                        priority=5,
                        max_attempts=3,
                        run_at=clock(),
                        created_at=clock(),
                    )
                )
        lease = clock() + timedelta(seconds=30)
        async with one.write() as first_tx:
            first = await first_tx.claim_job(
                now=clock(), lease_until=lease, owner="one", boot_id="b1", token="t1"
            )
            # The first claim's transaction is still open: the second skips its locked row.
            async with two.write() as second_tx:
                second = await second_tx.claim_job(
                    now=clock(), lease_until=lease, owner="two", boot_id="b2", token="t2"
                )
        assert first is not None and second is not None
        assert {first.chat_jid, second.chat_jid} == {"c:1", "c:2"}


async def test_a_claim_that_rolls_back_leaves_the_conversation_s_later_turn_unclaimed(
    pg_url: str, clock: FakeClock
) -> None:
    """A claim skips a turn another node is claiming; it must not take that conversation's
    later turn instead: should the other claim roll back (a deadlock, a killed node), the
    later turn would run first, and the earlier one would find its messages already answered."""
    async with await PostgresStore.open(pg_url) as one, await PostgresStore.open(pg_url) as two:
        async with one.write() as tx:
            conversation = await tx.current_conversation("main", "", "c:1", now=clock())
            earlier, _ = [await tx.insert_job(_turn(conversation, clock)) for _ in "ab"]
        lease = clock() + timedelta(seconds=30)
        first, taken = await _claim_beside_a_claim_that_rolls_back(one, two, pg_url, lease, clock)
        assert first == earlier
        assert taken is None, f"turn {taken} was claimed while turn {earlier} was queued"
        async with two.write() as tx:
            again = await tx.claim_job(
                now=clock(), lease_until=lease, owner="two", boot_id="b2", token="t3"
            )
        assert again is not None and again.id == earlier


async def _claim_beside_a_claim_that_rolls_back(
    one: PostgresStore, two: PostgresStore, pg_url: str, lease: datetime, clock: FakeClock
) -> tuple[int | None, int | None]:
    """What *one* claimed in a transaction that then rolled back, and what *two* claimed
    meanwhile (once its claim returned or waited for *one*'s)."""
    first: JobRecord | None = None
    with contextlib.suppress(_RolledBack):
        async with one.write() as tx:
            first = await tx.claim_job(
                now=clock(), lease_until=lease, owner="one", boot_id="b1", token="t1"
            )
            second = asyncio.create_task(_claim_once(two, lease, clock))
            await _until_done_or_waiting(second, pg_url)
            raise _RolledBack
    return (None if first is None else first.id), await second


class _RolledBack(Exception):
    """Ends a transaction the way a failed or killed claim ends."""


def _turn(conversation: int, clock: FakeClock) -> NewJob:
    return NewJob(
        conversation_id=conversation,
        folder="main",
        chat_jid="c:1",
        topic="",
        kind=JobKind.TURN,
        priority=5,
        max_attempts=3,
        run_at=clock(),
        created_at=clock(),
    )


async def _claim_once(store: PostgresStore, lease: datetime, clock: FakeClock) -> int | None:
    async with store.write() as tx:
        job = await tx.claim_job(
            now=clock(), lease_until=lease, owner="two", boot_id="b2", token="t2"
        )
    return None if job is None else job.id


async def _until_done_or_waiting(
    task: asyncio.Task[Any], pg_url: str, statement: str = "UPDATE jobs SET status"
) -> None:
    """Until *task* returned, or one of its statements (that start with *statement*) waits for
    a lock another transaction holds."""
    conn = await asyncpg.connect(pg_url)
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while not task.done():
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND starts_with(query, $1)",
                statement,
            )
            if waiting:
                return
            assert asyncio.get_running_loop().time() < deadline, "the claim neither ran nor waited"
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


async def test_a_message_never_joins_a_turn_another_node_is_starting(
    nodes: Nodes, pg_url: str, clock: FakeClock
) -> None:
    """Arriving while a node claims the conversation's queued turn, a message waits for that
    claim and then queues a turn of its own: joined to the turn already started, it would
    never be answered."""
    a, b = await nodes(2)
    await a.services.routes.add_route(10, "chat_jid=telegram:group/3", "main", actor="test")
    await a.services.ingest.ingest(inbound("telegram:group/3", "first", id="m1"))
    lease = clock() + timedelta(seconds=30)
    async with a.services.store.write() as tx:
        started = await tx.claim_job(
            now=clock(), lease_until=lease, owner="a", boot_id="b1", token="t1"
        )
        assert started is not None
        arriving = asyncio.create_task(
            b.services.ingest.ingest(inbound("telegram:group/3", "second", id="m2"))
        )
        await _until_done_or_waiting(arriving, pg_url, "")
    await arriving
    async with b.services.store.read() as tx:
        job = await tx.job_for_message("m2", "telegram:group/3")
    assert job is not None and job.id != started.id, f"m2 joined turn {started.id} as it started"
    assert job.status is JobStatus.QUEUED


async def test_a_chat_has_one_delivery_in_flight_across_nodes(
    pg_url: str, clock: FakeClock
) -> None:
    async with await PostgresStore.open(pg_url) as one, await PostgresStore.open(pg_url) as two:
        async with one.write() as tx:
            await tx.insert_message(
                NewMessage(id="a1", chat_jid="c:1", sender="bot", content="x", timestamp=clock())
            )
            await tx.insert_deliveries(
                NewDelivery(
                    message_id="a1",
                    message_chat_jid="c:1",
                    chat_jid="c:1",
                    chunk=chunk,
                    chunks=2,
                    content=f"part {chunk}",
                    kind="answer",
                    message_type="assistant",
                    folder="main",
                    topic="",
                    reply_to=None,
                    engage=False,
                    next_try=clock(),
                    created_at=clock(),
                )
                for chunk in (0, 1)
            )
        async with one.claim() as tx:
            (taken,) = await tx.due_deliveries(now=clock(), limit=10)
            assert await tx.claim_delivery(taken.id, now=clock())
        async with two.claim() as tx:
            assert await tx.due_deliveries(now=clock(), limit=10) == []
            assert not await tx.claim_delivery(taken.id, now=clock())
        async with one.write() as tx:
            await tx.mark_delivered(taken.id, now=clock(), platform_message_id="p0")
        async with two.claim() as tx:
            (following,) = await tx.due_deliveries(now=clock(), limit=10)
        assert (taken.chunk, following.chunk) == (0, 1)


async def test_nodes_register_heartbeat_and_are_listed(nodes: Nodes, clock: FakeClock) -> None:
    a, b = await nodes(2)
    assert a.nodes is not None and b.nodes is not None
    await a.nodes.start(host="127.0.0.1", port=9001)
    await b.nodes.start(host="127.0.0.1", port=9002)
    try:
        listed = await a.nodes.list()
        assert sorted(n["port"] for n in listed) == [9001, 9002]
        assert all(n["alive"] for n in listed)
        clock.advance(seconds=60)  # b's heartbeats seem old now
        seen = {n["port"]: n["alive"] for n in await a.nodes.list()}
        assert seen == {9001: True, 9002: False}
    finally:
        await b.nodes.stop()
        await a.nodes.stop()
    # Both rows are gone; a node still lists itself.
    assert [n["port"] for n in await a.nodes.list()] == [9001]
