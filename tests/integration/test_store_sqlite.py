"""The store against real databases: SQLite files, and (the tests taking ``store``) the same
tests on PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from postroom.core import ChatState, Engagement, MessageType
from postroom.core.folders import Folder, Session
from postroom.store import DropRecord, NewMessage, RouteSpec, SchemaTooNew, SqliteStore, Store
from postroom.store.sqlite.migrate import available_migrations
from postroom.store.sqlite.wal import WalLimits

from support import eventually

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
#: What either engine raises when a key or reference is violated.
INTEGRITY = (sqlite3.IntegrityError, asyncpg.IntegrityConstraintViolationError)


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(tmp_path / "postroom.db")
    yield opened
    await opened.close()


def msg(
    id: str, chat: str = "telegram:group/5", sender: str = "telegram:user/1", **kw: object
) -> NewMessage:
    return NewMessage(id=id, chat_jid=chat, sender=sender, content=f"text {id}", timestamp=T, **kw)  # type: ignore[arg-type]


def test_pragmas_and_schema(tmp_path: Path, sqlite_store: SqliteStore) -> None:
    conn = sqlite3.connect(tmp_path / "postroom.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = [row[1] for row in conn.execute("PRAGMA table_info(messages)")]
        seed = [
            "id",
            "chat_jid",
            "sender",
            "sender_name",
            "content",
            "timestamp",
            "is_from_me",
            "message_type",
            "metadata",
        ]
        assert columns[: len(seed)] == seed
        for extension in (
            "seq",
            "verb",
            "topic",
            "reply_to",
            "platform_id",
            "routed_to",
            "observed",
            "conversation_id",
            "run_id",
            "compacted",
        ):
            assert extension in columns
        pk = [row[1] for row in conn.execute("PRAGMA table_info(messages)") if row[5]]
        assert pk == ["id", "chat_jid"]
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(messages)")}
        assert "idx_messages_by_chat" in indexes
        drop_columns = {row[1] for row in conn.execute("PRAGMA table_info(drops)")}
        assert drop_columns == {"id", "chat_jid", "time", "sender", "verb", "reason"}
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        assert {
            "messages",
            "chats",
            "routes",
            "route_audit",
            "folders",
            "engagements",
            "drops",
            "conversations",
            "schema_migrations",
        } <= tables
        version = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        assert version == len(available_migrations())
    finally:
        conn.close()


async def test_connection_settings(sqlite_store: SqliteStore) -> None:
    for transaction in (sqlite_store.write, sqlite_store.read):
        async with transaction() as tx:
            conn = tx._conn  # the pragmas are per connection: read them where statements run
            ((synchronous,),) = await conn.fetchall("PRAGMA synchronous")
            ((foreign_keys,),) = await conn.fetchall("PRAGMA foreign_keys")
            ((journal,),) = await conn.fetchall("PRAGMA journal_mode")
            ((temp_store,),) = await conn.fetchall("PRAGMA temp_store")
        assert synchronous == 1  # NORMAL
        assert foreign_keys == 1
        assert journal == "wal"
        assert temp_store == 2  # MEMORY: a savepoint's journal is never a temporary file


async def test_a_write_waiting_for_another_process_never_stalls_the_event_loop(
    sqlite_store: SqliteStore,
) -> None:
    """The write connection runs on the loop's thread, so it must not sit in SQLite's busy
    handler while another process (the CLI) holds the write lock: it waits asynchronously."""
    other = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        async def write() -> None:
            async with sqlite_store.write() as tx:
                await tx.set_state("main", "k", "v", now=datetime.now(UTC))

        clock = asyncio.create_task(ticker())
        writing = asyncio.create_task(write())
        await eventually(lambda: ticks >= 20, "the loop to keep running")
        assert not writing.done()  # still waiting for the lock while the loop ran
        other.execute("COMMIT")
        await asyncio.wait_for(writing, 5)
        clock.cancel()
    finally:
        other.close()
    async with sqlite_store.read() as tx:
        assert await tx.get_state("main") == {"k": "v"}


async def test_reopen_is_idempotent_and_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "postroom.db"
    first = await SqliteStore.open(path)
    async with first.write() as tx:
        await tx.insert_message(msg("a"))
    await first.close()
    second = await SqliteStore.open(path)
    async with second.read() as tx:
        assert [m.id for m in await tx.list_messages(chat_jid="telegram:group/5")] == ["a"]
    await second.close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', '2030-01-01')")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer"):
        await SqliteStore.open(path)


async def test_seq_is_monotonic_and_id_chat_is_the_key(store: Store) -> None:
    async with store.write() as tx:
        seqs = [await tx.insert_message(msg(i)) for i in ("a", "b", "c")]
        other = await tx.insert_message(msg("a", chat="telegram:group/6"))
    assert seqs == [1, 2, 3]
    assert other == 4
    with pytest.raises(INTEGRITY):
        async with store.write() as tx:
            await tx.insert_message(msg("a"))


async def _insert_then_fail(store: Store) -> None:
    async with store.write() as tx:
        await tx.insert_message(msg("x"))
        raise RuntimeError("boom")


async def test_failed_transaction_leaves_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError):
        await _insert_then_fail(store)
    async with store.read() as tx:
        assert await tx.list_messages(chat_jid="telegram:group/5") == []


async def test_list_messages_newest_limit_in_seq_order(store: Store) -> None:
    async with store.write() as tx:
        for i in range(10):
            await tx.insert_message(msg(f"m{i}", routed_to="atlas" if i % 2 else None))
    async with store.read() as tx:
        last3 = await tx.list_messages(chat_jid="telegram:group/5", limit=3)
        after = await tx.list_messages(chat_jid="telegram:group/5", after_seq=8)
        routed = await tx.list_messages(folder="atlas", limit=100)
    assert [m.id for m in last3] == ["m7", "m8", "m9"]
    assert [m.seq for m in after] == [9, 10]
    assert {m.id for m in routed} == {"m1", "m3", "m5", "m7", "m9"}


async def test_several_senders_counts_people_not_the_bots_echoes(store: Store) -> None:
    chat = "telegram:group/5"

    async def several(within: int = 1000) -> bool:
        async with store.read() as tx:
            return await tx.several_senders(chat, within=within)

    async with store.write() as tx:
        await tx.insert_message(msg("a1"))
        await tx.insert_message(msg("echo", sender="telegram:user/99", is_from_me=True))
        await tx.insert_message(msg("note", sender="host", message_type=MessageType.HOST))
    assert not await several()
    async with store.write() as tx:
        await tx.insert_message(msg("b1", sender="telegram:user/2"))
        for i in range(3):
            await tx.insert_message(msg(f"a{i + 2}"))
    assert await several()
    # Only the newest rows count: the second person spoke four messages ago.
    assert not await several(within=3)


async def test_message_round_trip(store: Store) -> None:
    original = NewMessage(
        id="x1",
        chat_jid="discord:guild/1/channel/2",
        sender="discord:user/7",
        sender_name="Ann",
        content="héllo ✨",
        timestamp=T,
        message_type=MessageType.USER,
        metadata={"routed_content": "hi", "n": [1, 2]},
        verb="mention",
        topic="t1",
        reply_to="x0",
        platform_id="p-1",
        routed_to="main",
        observed=True,
    )
    async with store.write() as tx:
        seq = await tx.insert_message(original)
    async with store.read() as tx:
        (stored,) = await tx.list_messages(chat_jid="discord:guild/1/channel/2")
    assert stored.seq == seq
    assert (stored.id, stored.sender_name, stored.content, stored.timestamp) == (
        "x1",
        "Ann",
        "héllo ✨",
        T,
    )
    assert stored.metadata == {"routed_content": "hi", "n": [1, 2]}
    assert (stored.verb, stored.topic, stored.reply_to, stored.platform_id) == (
        "mention",
        "t1",
        "x0",
        "p-1",
    )
    assert stored.routed_to == "main" and stored.observed and not stored.compacted


async def test_reply_target_by_id_and_platform_id(store: Store) -> None:
    async with store.write() as tx:
        await tx.insert_message(
            NewMessage(
                id="a1",
                chat_jid="c:1",
                sender="bot",
                content="answer",
                timestamp=T,
                message_type=MessageType.ASSISTANT,
                is_from_me=True,
                routed_to="atlas",
                topic="x",
                platform_id="tg-77",
            )
        )
        by_id = await tx.find_reply_target("c:1", "a1")
        by_platform = await tx.find_reply_target("c:1", "tg-77")
        other_chat = await tx.find_reply_target("c:2", "a1")
    assert by_id is not None and by_id.routed_to == "atlas" and by_id.topic == "x"
    assert by_id.message_type is MessageType.ASSISTANT and by_id.is_from_me
    assert by_platform == by_id
    assert other_chat is None


async def test_chat_state_sticky_and_engagements(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.chat_state("c:1") == ChatState()
        await tx.set_sticky_group("c:1", "atlas/social", now=T)
        await tx.set_sticky_topic("c:1", "support", now=T)
        await tx.engage("c:1", "", "atlas", T + timedelta(minutes=30))
        await tx.engage("c:1", "t", "atlas/content", T + timedelta(minutes=5))
        state = await tx.chat_state("c:1")
        assert state.sticky_group == "atlas/social" and state.sticky_topic == "support"
        assert state.engagements == {
            "": Engagement("atlas", T + timedelta(minutes=30)),
            "t": Engagement("atlas/content", T + timedelta(minutes=5)),
        }
        await tx.set_sticky_group("c:1", None, now=T)
        assert await tx.end_engagements("c:1") == 2
        state = await tx.chat_state("c:1")
    assert state == ChatState(None, "support", {})


async def test_missing_notice_is_rate_limited(store: Store) -> None:
    async with store.write() as tx:
        assert await tx.claim_missing_notice("c:1", now=T, interval_s=3600)
        assert not await tx.claim_missing_notice(
            "c:1", now=T + timedelta(minutes=59), interval_s=3600
        )
        assert await tx.claim_missing_notice("c:1", now=T + timedelta(minutes=61), interval_s=3600)


async def test_conversation_generations(store: Store) -> None:
    async with store.write() as tx:
        first = await tx.new_conversation("atlas", "", "c:1", now=T)
        second = await tx.new_conversation("atlas", "", "c:1", now=T)
        shared = await tx.new_conversation("atlas", "", None, now=T)
        rows = list(
            await tx._conn.fetchall(
                "SELECT id, chat_jid, generation FROM conversations ORDER BY id"
            )
        )
    assert [r[2] for r in rows] == [1, 2, 1]
    assert (first, second, shared) == (rows[0][0], rows[1][0], rows[2][0])


async def test_drops_keep_no_content_and_dedupe(store: Store) -> None:
    drop = DropRecord("d1", "matrix:room/1", T, "matrix:user/@a:x", "message", "no_route")
    async with store.write() as tx:
        await tx.insert_drop(drop)
        await tx.insert_drop(drop)  # a redelivery is a duplicate, not an error
        prior = await tx.prior_outcome("d1", "matrix:room/1")
    async with store.read() as tx:
        assert await tx.list_drops(limit=10) == [drop]
    assert prior is not None and prior.drop_reason == "no_route" and prior.seq is None


async def test_routes_audit_and_catalog_version(store: Store) -> None:
    async with store.write() as tx:
        v0 = await tx.catalog_version()
        rid = await tx.insert_route(
            RouteSpec(0, "platform=x", "main"), created_at=T, created_by="me"
        )
        await tx.add_route_audit(
            at=T, actor="me", action="add", route_id=rid, before=None, after={"seq": 0}
        )
        v1 = await tx.bump_catalog_version()
        (record,) = await tx.list_routes()
        (audit,) = await tx.list_route_audit(limit=5)
    assert v1 == v0 + 1
    assert (record.id, record.seq, record.match, record.target, record.created_by) == (
        rid,
        0,
        "platform=x",
        "main",
        "me",
    )
    assert (audit.actor, audit.action, audit.route_id, audit.before, audit.after) == (
        "me",
        "add",
        rid,
        None,
        {"seq": 0},
    )


async def test_route_ids_are_never_reused(store: Store) -> None:
    async with store.write() as tx:
        first = await tx.insert_route(RouteSpec(0, "", "main"), created_at=T, created_by="")
        await tx.delete_routes([first])
        second = await tx.insert_route(RouteSpec(0, "", "main"), created_at=T, created_by="")
    assert second > first


async def test_folders_round_trip_and_parent_integrity(store: Store) -> None:
    async with store.write() as tx:
        await tx.insert_folder(
            Folder(
                "atlas",
                persona="p",
                session=Session.SHARED,
                mirror=("telegram:user/1",),
                created_at=T,
            )
        )
        await tx.insert_folder(Folder("atlas/dc-bob", inherits=True, created_at=T))
        got = await tx.get_folder("atlas")
        child = await tx.get_folder("atlas/dc-bob")
    assert got is not None and got.session is Session.SHARED and got.mirror == ("telegram:user/1",)
    assert child is not None and child.inherits and child.parent == "atlas"
    # A child without its parent, or deleting a parent with children, is refused by the database.
    with pytest.raises(INTEGRITY):
        async with store.write() as tx:
            await tx.insert_folder(Folder("ghost/child", created_at=T))
    with pytest.raises(INTEGRITY):
        async with store.write() as tx:
            await tx.delete_folder("atlas")


async def test_reads_do_not_wait_for_an_open_write(store: Store) -> None:
    async with store.write() as tx:
        await tx.insert_message(msg("pending"))
        async with store.read() as reader:
            # WAL: the reader sees the last committed state, not the open transaction.
            assert await reader.list_messages(chat_jid="telegram:group/5") == []
    async with store.read() as reader:
        assert len(await reader.list_messages(chat_jid="telegram:group/5")) == 1


async def test_closed_store_refuses_use(tmp_path: Path) -> None:
    opened = await SqliteStore.open(tmp_path / "x.db")
    await opened.close()
    await opened.close()  # closing twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        async with opened.read():
            pass


async def test_the_write_ahead_log_is_checkpointed_off_the_event_loop(tmp_path: Path) -> None:
    """Automatic checkpoints are off on the write connection (they would sync the file on the
    loop's thread); the store checkpoints on its maintenance thread every ``checkpoint_every``
    commits instead, so the WAL stays bounded."""
    store = await SqliteStore.open(tmp_path / "postroom.db")
    every = store.wal.limits.checkpoint_every
    wal = tmp_path / "postroom.db-wal"
    try:
        # Asked outside a transaction: each round below is exactly `every` commits.
        writer = store._writer.connection
        assert writer.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        sizes = []
        for round in range(5):
            for n in range(every):
                async with store.write() as tx:
                    await tx.set_state("main", f"k{n}", "v" * 2000, now=datetime.now(UTC))
            # The round's last commit started the checkpoint on the maintenance thread.
            await store.wal.wait()
            assert store.wal.count == round + 1
            assert store.wal.last is not None and not store.wal.last.busy
            sizes.append(wal.stat().st_size)
    finally:
        await store.close()
    # Without checkpoints the log would only grow (every commit appends pages); with them it
    # is reused from the start once a checkpoint completed.
    assert max(sizes) <= sizes[0] * 1.1, sizes  # unchecked, it grows by ~25% a round


async def test_the_write_ahead_log_stays_bounded_while_writes_never_pause(tmp_path: Path) -> None:
    """Under continuous writes a passive checkpoint never catches up with the log, so SQLite
    never starts it over: the store truncates it once it passes ``truncate_bytes``, between
    two group commits, whatever the load — with a reader reading all along."""
    limits = WalLimits(checkpoint_every=100, check_every=8, truncate_bytes=512 * 1024)
    store = await SqliteStore.open(tmp_path / "postroom.db", wal=limits)
    stop = asyncio.Event()

    async def read_all_along() -> None:
        while not stop.is_set():
            async with store.read() as tx:
                await tx.get_state("main")
            await asyncio.sleep(0)

    reader = asyncio.create_task(read_all_along())
    largest = 0
    try:
        for n in range(3_000):  # about 24 MB of log without truncation
            async with store.write() as tx:
                await tx.set_state("main", f"k{n % 50}", f"{n}" + "v" * 4000, now=datetime.now(UTC))
            largest = max(largest, store.wal.wal_bytes())
        await store.wal.wait()
        checkpoints = store.wal.count
    finally:
        stop.set()
        await reader
        await store.close()
    # The log grows by about 8 KB a commit: at most check_every commits past the threshold
    # before the look that starts the checkpoint, plus what commits while the passive pass runs.
    assert largest < 4 * limits.truncate_bytes, largest
    assert checkpoints > 0


async def test_a_truncating_checkpoint_empties_the_log_and_says_when_readers_hold_it(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "postroom.db")
    try:
        for n in range(50):
            async with store.write() as tx:
                await tx.set_state("main", f"k{n}", "v" * 2000, now=datetime.now(UTC))
        assert store.wal.wal_bytes() > 0
        # Another process reading an old snapshot keeps the log in use: the checkpoint waits
        # at most busy_ms for it, then says it could not finish — writers were never stalled.
        other = sqlite3.connect(tmp_path / "postroom.db", isolation_level=None)
        other.execute("BEGIN")
        other.execute("SELECT count(*) FROM memory_state").fetchall()
        async with store.write() as tx:
            await tx.set_state("main", "later", "x", now=datetime.now(UTC))
        held = await store.checkpoint(truncate=True)
        assert held.busy and held.mode == "TRUNCATE"
        other.execute("ROLLBACK")
        other.close()
        done = await store.checkpoint(truncate=True)
        assert not done.busy and store.wal.wal_bytes() == 0
        async with store.read() as tx:
            assert (await tx.get_state("main"))["later"] == "x"
    finally:
        await store.close()
