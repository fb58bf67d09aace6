"""Run-record storage: does a long conversation cost storage in proportion to its length?

    python bench/runs_storage.py [--turns 200] [--size 1024]

It builds the server with its composition root (``Gateway.build`` over a directory made by
``postroom init``; the ``echo`` provider; workers and the delivery loop running in this
process, no HTTP) and holds one conversation of ``--turns`` turns: each turn ingests a message
of ``--size`` bytes of distinct text and waits until the turn is done. The whole history goes
into every request (``context.max_messages`` above the conversation's length, compaction out
of reach), which is the worst case for run records that store whole requests.

After each turn it measures the bytes the database uses — ``SUM(pgsize - unused)`` over
SQLite's ``dbstat`` table, read through a second connection (it sees the WAL's pages too, so no
checkpoint is needed) — and prints the bytes stored per turn around turn 50 and at the last
turn (the growth over the ten turns before each, divided by ten), their ratio (target: within
1.5x), and the database file size after a final ``TRUNCATE`` checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import string
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from postroom.app.gateway import Gateway
from postroom.config import load_config
from postroom.core import InboundMessage
from postroom.logs import configure_logging
from postroom.store.records import JobStatus

CHAT = "bench:chat/1"
WINDOW = 10
TARGET_RATIO = 1.5
OPEN = (JobStatus.QUEUED, JobStatus.RUNNING)


def used_bytes(database: Path) -> int:
    with sqlite3.connect(database) as db:
        return int(db.execute("SELECT SUM(pgsize - unused) FROM dbstat").fetchone()[0])


def text_of(size: int, turn: int, rng: random.Random) -> str:
    words = []
    length = 0
    while length < size:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return f"turn {turn}: " + " ".join(words)[: size - 12]


async def converse(data: Path, turns: int, size: int) -> list[int]:
    environ = {
        "POSTROOM_CONTEXT__MAX_MESSAGES": str(4 * turns),
        "POSTROOM_MODELS__ECHO__CONTEXT_WINDOW": str(1_000_000_000),
        "POSTROOM_QUEUE__BACKOFF_BASE": "1s",
        # One chat fires a turn after another as fast as they run: no loop guard wanted here.
        "POSTROOM_LIMITS__TURNS_PER_MINUTE": str(1_000_000),
    }
    gateway = await Gateway.build(data, load_config(data, environ))
    services = gateway.services
    await gateway.workers.start()
    delivering = asyncio.create_task(gateway.delivery.run(), name="delivery")
    rng = random.Random(7)
    sizes = [used_bytes(data / "postroom.db")]
    try:
        for turn in range(1, turns + 1):
            result = await services.ingest.ingest(
                InboundMessage(
                    id=f"m{turn}",
                    chat_jid=CHAT,
                    sender="bench:user/1",
                    content=text_of(size, turn, rng),
                    timestamp=datetime.now(UTC),
                    sender_name="Ann",
                )
            )
            job_id = result.decision.job_id
            assert job_id is not None, result.decision.reason
            # Storing the answer wakes `stored`; the timer is only a backstop.
            while (await services.turns.get_job(job_id)).status in OPEN:
                await services.signals.stored.wait(0.5)
            sizes.append(used_bytes(data / "postroom.db"))
            if turn % 50 == 0:
                print(f"  turn {turn}: {sizes[-1] / 1024:,.0f} KB used", flush=True)
    finally:
        await gateway.workers.stop()
        gateway.delivery.stop()
        await delivering
        await gateway.close()
    return sizes


def per_turn(sizes: list[int], turn: int) -> float:
    return (sizes[turn] - sizes[turn - WINDOW]) / WINDOW


def run(args: argparse.Namespace) -> int:
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        subprocess.run(
            [sys.executable, "-m", "postroom", "--data", str(data), "init"],
            check=True,
            capture_output=True,
        )
        print(f"{args.turns} turns of {args.size:,}-byte messages through the engine (echo)")
        sizes = asyncio.run(converse(data, args.turns, args.size))
        database = data / "postroom.db"
        with sqlite3.connect(database) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        file_kb = database.stat().st_size / 1024
    middle = min(50, args.turns)
    early, late = per_turn(sizes, middle), per_turn(sizes, args.turns)
    ratio = late / early
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(f"  bytes stored per turn at turn {middle}: {early / 1024:,.1f} KB")
    print(f"  bytes stored per turn at turn {args.turns}: {late / 1024:,.1f} KB")
    print(f"  ratio: {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")
    print(
        f"  database: {(sizes[-1] - sizes[0]) / 1024:,.0f} KB used by the conversation; "
        f"file {file_kb:,.0f} KB after a TRUNCATE checkpoint"
    )
    return 0 if ratio <= TARGET_RATIO else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    args = parser.parse_args()
    if args.turns < 2 * WINDOW:
        parser.error(f"--turns must be at least {2 * WINDOW}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
