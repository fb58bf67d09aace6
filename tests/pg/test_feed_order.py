"""The live feed on PostgreSQL never skips a message: two nodes store messages in transactions
that would commit out of order, and a subscriber still sees both, in seq order (PIPELINE §9)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from postroom.engine.feed import MessageFeed
from postroom.engine.signals import Event, Signals, Subscription
from postroom.store import NewMessage
from postroom.store.postgres import PostgresStore

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
async def nodes(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    first = await PostgresStore.open(pg_url)
    second = await PostgresStore.open(pg_url)
    yield first, second
    await second.close()
    await first.close()


def message(id: str) -> NewMessage:
    return NewMessage(id=id, chat_jid="web:chat/1", sender="web:user/1", content=id, timestamp=T)


def drain(subscription: Subscription) -> list[Event]:
    events = []
    while not subscription._queue.empty():
        event = subscription._queue.get_nowait()
        assert event is not None
        events.append(event)
    return events


async def test_a_later_seq_cannot_commit_first_so_the_feed_sees_both(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    node_a, node_b = nodes
    signals = Signals()
    feed = MessageFeed(store=node_a, signals=signals)
    await feed.start_at_end()
    live = signals.bus.subscribe(kinds=frozenset({"message"}))

    stored_a = asyncio.Event()
    commit_a = asyncio.Event()
    seqs: dict[str, int] = {}

    async def slow_writer() -> None:
        async with node_a.write() as tx:
            seqs["first"] = await tx.insert_message(message("first"))
            stored_a.set()
            await commit_a.wait()

    async def fast_writer() -> None:
        async with node_b.write() as tx:
            seqs["second"] = await tx.insert_message(message("second"))

    slow = asyncio.create_task(slow_writer())
    await stored_a.wait()
    # The second transaction starts after the first took its seq and tries to commit first.
    fast = asyncio.create_task(fast_writer())
    done, _ = await asyncio.wait({fast}, timeout=0.5)
    assert not done, "a later seq committed while an earlier one was still open"
    assert await feed.publish_new() == 0
    commit_a.set()
    await asyncio.gather(slow, fast)
    assert seqs["second"] > seqs["first"]
    while await feed.publish_new():
        pass
    assert [e.data["id"] for e in drain(live)] == ["first", "second"]


async def _store_then_fail(store: PostgresStore) -> None:
    async with store.write() as tx:
        await tx.insert_message(message("rolled-back"))
        raise RuntimeError("boom")


async def test_a_failed_transaction_leaves_no_gap_the_feed_waits_on(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    node_a, node_b = nodes
    signals = Signals()
    feed = MessageFeed(store=node_b, signals=signals)
    await feed.start_at_end()
    live = signals.bus.subscribe(kinds=frozenset({"message"}))
    with pytest.raises(RuntimeError):
        await _store_then_fail(node_a)
    async with node_a.write() as tx:
        await tx.insert_message(message("kept"))
    assert await feed.publish_new() == 1
    assert [(e.data["id"], e.data["seq"]) for e in drain(live)] == [("kept", 1)]
