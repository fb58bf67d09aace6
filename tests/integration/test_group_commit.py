"""Group commit: the write transactions of one turn of the event loop share one COMMIT, and
each still succeeds or fails on its own."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from postroom.store import NewMessage, SqliteStore

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
CHAT = "telegram:group/5"


def msg(id: str) -> NewMessage:
    return NewMessage(id=id, chat_jid=CHAT, sender="telegram:user/1", content=id, timestamp=T)


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, list[str]]]:
    statements: list[str] = []
    store = await SqliteStore.open(tmp_path / "postroom.db", trace=statements.append)
    yield store, statements
    await store.close()


def stored_ids(store: SqliteStore) -> list[str]:
    """What another process sees: only what was committed."""
    conn = sqlite3.connect(store.path)
    try:
        return [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY seq")]
    finally:
        conn.close()


async def insert(store: SqliteStore, id: str, *, fail: bool = False) -> None:
    async with store.write() as tx:
        await tx.insert_message(msg(id))
        if fail:
            raise RuntimeError(f"{id} failed")
    # The block's exit returned: the row is committed, visible to another connection.
    assert id in stored_ids(store)


async def test_transactions_of_one_loop_turn_share_one_commit(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, statements = traced
    statements.clear()
    await asyncio.gather(*(insert(store, f"m{i}") for i in range(5)))
    assert statements.count("COMMIT") == 1
    # The first runs directly in the group's SQLite transaction; each later one in a savepoint.
    assert statements.count("SAVEPOINT tx") == statements.count("RELEASE tx") == 4
    assert stored_ids(store) == [f"m{i}" for i in range(5)]

    # One transaction alone still commits once, before its block's exit returns.
    statements.clear()
    await insert(store, "alone")
    assert statements.count("COMMIT") == 1


async def test_a_failing_transaction_rolls_back_alone(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, statements = traced
    statements.clear()
    results = await asyncio.gather(
        insert(store, "a"),
        insert(store, "b", fail=True),
        insert(store, "c"),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], RuntimeError)
    assert "ROLLBACK TO tx" in statements
    assert statements.count("COMMIT") == 1
    assert stored_ids(store) == ["a", "c"]


async def test_a_failing_first_transaction_rolls_back_alone(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, statements = traced
    statements.clear()
    results = await asyncio.gather(
        insert(store, "a", fail=True),
        insert(store, "b"),
        insert(store, "c"),
        return_exceptions=True,
    )
    assert isinstance(results[0], RuntimeError)
    assert results[1] is None and results[2] is None
    # Without a savepoint of its own, the first is undone by rolling back the SQLite
    # transaction; the others then form a new group.
    assert statements[:3] == ["BEGIN IMMEDIATE", statements[1], "ROLLBACK"]
    assert stored_ids(store) == ["b", "c"]


async def test_a_failed_commit_fails_every_transaction_of_its_group(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, _ = traced

    async def orphan_job_message() -> None:
        # A deferred foreign key is checked at COMMIT: the shared commit itself fails.
        async with store.write() as tx:
            await tx._run("PRAGMA defer_foreign_keys = ON")
            await tx._run(
                "INSERT INTO job_messages (message_id, chat_jid, job_id) VALUES ('x', ?, 999)",
                (CHAT,),
            )

    results = await asyncio.gather(
        insert(store, "a"), orphan_job_message(), insert(store, "b"), return_exceptions=True
    )
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results), results
    assert stored_ids(store) == []
    # The store goes on working.
    await insert(store, "c")
    assert stored_ids(store) == ["c"]


async def test_a_group_sqlite_rolled_back_fails_its_other_members(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    """Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction;
    the group's other members must fail, not report a commit that never happened."""
    store, _ = traced

    async def lose_the_transaction() -> None:
        async with store.write() as tx:
            await tx.insert_message(msg("lost"))
            await tx._run("ROLLBACK")  # what SQLite does by itself on such errors
            raise sqlite3.OperationalError("disk I/O error")

    results = await asyncio.gather(
        insert(store, "a"), lose_the_transaction(), return_exceptions=True
    )
    assert isinstance(results[0], RuntimeError) and "rolled back" in str(results[0])
    assert isinstance(results[1], sqlite3.OperationalError)
    assert stored_ids(store) == []
    await insert(store, "b")
    assert stored_ids(store) == ["b"]


async def test_a_cancelled_waiter_does_not_cancel_the_commit(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    store, _ = traced
    first = asyncio.create_task(insert(store, "a"))
    second = asyncio.create_task(insert(store, "b"))
    await asyncio.sleep(0)  # both ran their statements and wait for the shared commit
    first.cancel()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert stored_ids(store) == ["a", "b"]


async def test_close_commits_a_pending_group(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "postroom.db")
    writing = asyncio.create_task(insert(store, "a"))
    await asyncio.sleep(0)  # the statements ran; the commit is not done yet
    await store.close()
    await writing
    assert stored_ids(store) == ["a"]
