"""History benchmark: reading a conversation and building a run's context must not slow down as
the database grows.

    python bench/history.py [--sizes 1000,10000,100000,1000000] [--repeats 200]

The measured conversation holds 1,000 messages (folder ``main``, chat ``bench:chat/measured``);
other conversations fill the database up to each total size (1,000 to 1,000,000 stored messages
in all). For each size it times, on a real SQLite file (WAL):

* reading the last 50 messages of the measured chat (the history API's query), and
* building a run's context for a turn of that conversation (``ContextBuilder.attach_observed``
  in a write transaction, as the claim does, then ``ContextBuilder.build``: history, memory,
  system prompt — everything up to the model call).

It prints the median and p95 in milliseconds and the ratio to the smallest database. Target:
both stay within 2x from 1,000 to 1,000,000 stored messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from postroom.core.folders import FolderDefaults
from postroom.engine.catalog import Catalog
from postroom.engine.context_builder import ContextBuilder, ContextSettings
from postroom.engine.memory import MemoryService
from postroom.store.records import JobKind, JobRecord, JobStatus
from postroom.store.sqlite import SqliteStore

MEASURED_CHAT = "bench:chat/measured"
MEASURED_SIZE = 1_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(seq: int, chat: str, conversation: int, assistant: bool) -> tuple[object, ...]:
    moment = (T0 + timedelta(seconds=seq)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sender, name, text, kind, metadata = (
        ("bot", "Postroom", "answer", "assistant", json.dumps({"job_id": seq}))
        if assistant
        else ("bench:user/1", "Ann", "question", "user", "{}")
    )
    return (
        f"m{seq}",
        chat,
        sender,
        name,
        f"{text} number {seq} " * 4,
        moment,
        int(assistant),
        kind,
        metadata,
        seq,
        "message",
        "",
        None,
        None,
        "main",
        0,
        conversation,
    )


async def build_database(path: Path, total: int) -> None:
    """Schema through the store's migrations, then rows in bulk (bypassing ingest: only the
    shape of the data matters here, not how it arrived)."""
    store = await SqliteStore.open(path)  # creates the schema through the migrations
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    now = T0.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    conn.execute(
        "INSERT INTO folders (path, persona, created_at) VALUES ('main', 'You are a bench.', ?)",
        (now,),
    )
    conn.execute(
        "INSERT INTO conversations (id, folder, topic, chat_jid, generation, created_at) "
        "VALUES (1, 'main', '', ?, 1, ?)",
        (MEASURED_CHAT, now),
    )
    others = max(total - MEASURED_SIZE, 0)
    chats = max(others // 100, 1)
    conn.executemany(
        "INSERT INTO conversations (id, folder, topic, chat_jid, generation, created_at) "
        "VALUES (?, 'main', '', ?, 1, ?)",
        [(2 + c, f"bench:chat/{c}", now) for c in range(chats)],
    )
    columns = (
        "id, chat_jid, sender, sender_name, content, timestamp, is_from_me, message_type, "
        "metadata, seq, verb, topic, reply_to, platform_id, routed_to, observed, "
        "conversation_id"
    )
    insert = f"INSERT INTO messages ({columns}) VALUES ({', '.join('?' * 17)})"
    seq = 0
    batch: list[tuple[object, ...]] = []
    # The other conversations first, interleaved with the measured one so its rows are spread
    # across the whole table, as in a real database.
    measured_every = max(others // MEASURED_SIZE, 1)
    measured_left = MEASURED_SIZE
    for n in range(others):
        seq += 1
        chat = n % chats
        batch.append(_row(seq, f"bench:chat/{chat}", 2 + chat, n % 2 == 1))
        if measured_left and n % measured_every == 0:
            seq += 1
            batch.append(_row(seq, MEASURED_CHAT, 1, measured_left % 2 == 0))
            measured_left -= 1
        if len(batch) >= 50_000:
            conn.executemany(insert, batch)
            batch.clear()
    while measured_left:
        seq += 1
        batch.append(_row(seq, MEASURED_CHAT, 1, measured_left % 2 == 0))
        measured_left -= 1
    conn.executemany(insert, batch)
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _job() -> JobRecord:
    return JobRecord(
        id=10**9,
        conversation_id=1,
        folder="main",
        chat_jid=MEASURED_CHAT,
        topic="",
        kind=JobKind.TURN,
        task_id=None,
        priority=5,
        status=JobStatus.RUNNING,
        attempts=0,
        max_attempts=3,
        run_at=T0,
        lease_until=None,
        lease_owner=None,
        lease_token=None,
        last_error=None,
        answer_id=None,
        created_at=T0,
        started_at=T0,
        finished_at=None,
        messages=(),
    )


async def measure(path: Path, repeats: int) -> tuple[list[float], list[float], int]:
    store = await SqliteStore.open(path)
    try:
        catalog = Catalog()
        async with store.read() as tx:
            await catalog.reload(tx)
            total = (await tx.list_messages(limit=1))[-1].seq
        builder = ContextBuilder(
            store=store,
            catalog=catalog,
            clock=lambda: T0,
            settings=ContextSettings(),
            memory=MemoryService(store=store),
        )
        settings = catalog.snapshot.settings("main", FolderDefaults())
        job = _job()
        reads: list[float] = []
        builds: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            async with store.read() as tx:
                rows = await tx.list_messages(chat_jid=MEASURED_CHAT, limit=50)
            reads.append((time.perf_counter() - started) * 1000)
            assert len(rows) == 50
            started = time.perf_counter()
            # What a claimed turn's context costs: the observed rows joining it (in the
            # claiming transaction), then the build.
            async with store.write() as tx:
                await builder.attach_observed(tx, job, [MEASURED_CHAT])
            prepared = await builder.build(job, settings)
            builds.append((time.perf_counter() - started) * 1000)
            assert len(prepared.request.messages) == ContextSettings().max_messages
        return reads, builds, total
    finally:
        await store.close()


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        "postroom history benchmark — SQLite file (WAL); measured conversation: "
        f"{MEASURED_SIZE:,} messages; {args.repeats} repeats per size"
    )
    print(f"{'stored':>10} {'read 50: median':>16} {'p95':>8} {'context: median':>16} {'p95':>8}")
    base: tuple[float, float] | None = None
    worst = (0.0, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            path = Path(tmp) / f"history-{size}.db"
            started = time.perf_counter()
            await build_database(path, size)
            built_s = time.perf_counter() - started
            reads, builds, total = await measure(path, args.repeats)
            read_ms, build_ms = statistics.median(reads), statistics.median(builds)
            if base is None:
                base = (read_ms, build_ms)
            worst = (max(worst[0], read_ms / base[0]), max(worst[1], build_ms / base[1]))
            print(
                f"{total:>10,} {read_ms:>13.3f} ms {p95(reads):>5.3f} ms "
                f"{build_ms:>13.3f} ms {p95(builds):>5.3f} ms   (database built in {built_s:.1f} s)"
            )
    print()
    print(
        f"largest/smallest: read {worst[0]:.2f}x, context {worst[1]:.2f}x (target <= 2x): "
        f"{'PASS' if max(worst) <= 2 else 'MISS'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
