"""The live feed over a real SQLite store: stored messages reach the subscribers that want
them, in seq order; when nobody wants messages it reads none, and a later subscriber gets
only what was stored after it subscribed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from postroom.engine.feed import MessageFeed
from postroom.engine.signals import Event, Signals, Subscription
from postroom.store import NewMessage, SqliteStore

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, list[str]]]:
    statements: list[str] = []
    store = await SqliteStore.open(tmp_path / "postroom.db", trace=statements.append)
    yield store, statements
    await store.close()


async def store_messages(store: SqliteStore, *ids: str) -> None:
    async with store.write() as tx:
        for id in ids:
            await tx.insert_message(
                NewMessage(
                    id=id, chat_jid="web:chat/1", sender="web:user/1", content=id, timestamp=T
                )
            )


def drain(subscription: Subscription) -> list[Event]:
    events = []
    while not subscription._queue.empty():
        event = subscription._queue.get_nowait()
        assert event is not None
        events.append(event)
    return events


async def test_messages_reach_subscribers_in_seq_order(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, _ = traced
    signals = Signals()
    feed = MessageFeed(store=store, signals=signals)
    await feed.start_at_end()
    live = signals.bus.subscribe(kinds=frozenset({"message"}))
    await store_messages(store, "a", "b", "c")
    assert await feed.publish_new() == 3
    assert [(e.kind, e.data["id"], e.data["seq"]) for e in drain(live)] == [
        ("message", "a", 1),
        ("message", "b", 2),
        ("message", "c", 3),
    ]
    assert feed.cursor == 3


async def test_nobody_wanting_messages_reads_none_and_late_subscribers_start_now(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, statements = traced
    signals = Signals()
    feed = MessageFeed(store=store, signals=signals)
    await feed.start_at_end()
    typing_only = signals.bus.subscribe(kinds=frozenset({"typing"}))
    assert not signals.bus.wants("message") and signals.bus.wants("typing")

    await store_messages(store, "old-1", "old-2")
    statements.clear()
    assert await feed.publish_new() == 0
    assert feed.cursor == 2  # moved past what nobody was there to see
    assert not any("FROM messages WHERE seq >" in s for s in statements), statements

    late = signals.bus.subscribe(kinds=frozenset({"message"}))
    await store_messages(store, "new-1")
    assert await feed.publish_new() == 1
    assert [e.data["id"] for e in drain(late)] == ["new-1"]
    assert drain(typing_only) == []  # kinds it did not ask for never reach it


async def test_a_subscriber_without_kinds_takes_every_kind(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, _ = traced
    signals = Signals()
    feed = MessageFeed(store=store, signals=signals)
    await feed.start_at_end()
    everything = signals.bus.subscribe()
    assert signals.bus.wants("message") and signals.bus.wants("delivery")
    await store_messages(store, "a")
    await feed.publish_new()
    signals.typing("web:chat/1", "main", True)
    assert [e.kind for e in drain(everything)] == ["message", "typing"]
    everything.close()
    assert not signals.bus.wants("message")
