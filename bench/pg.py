"""PostgreSQL benchmark: turns/s and latency with 1, 2 and 4 ``postroom serve`` nodes on one
PostgreSQL database against SQLite alone, and the claim rate of the turn queue by itself.

    python bench/pg.py [--nodes 1 2 4] [--quick] [--dsn postgresql://postgres@127.0.0.1/postgres]

The workload is ``bench/e2e.py``'s: the ``echo`` provider without delay, one chat per
conversation, an outbound-webhook sink served by this script; turns/s posts 4,000 messages
(64 requests in flight, spread round-robin over the nodes) and waits for every answer at the
sink; latency is measured from each message's scheduled send time at 200 turns/s. Each run uses
a database of its own (``postroom_bench_<random>``), dropped afterwards. On a two-core machine
the nodes and PostgreSQL share the same cores: the figures say where the time goes, they are not
targets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from e2e import (
    Server,
    Sink,
    init_data,
    latency,
    percentile,
    poster,
    serve_sink,
    start_server,
    stop_server,
    turn_rate,
)
from loadgen import Poster
from postroom.store.postgres import PostgresStore
from postroom.store.records import JobKind, JobStatus, NewJob

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


class RoundRobin:
    """Posters to several nodes behind one ``encode``/``send``: a load balancer's view."""

    def __init__(self, posters: list[Poster]) -> None:
        self._posters = posters
        self._next = 0

    def encode(self, path: str, body: dict[str, object]) -> bytes:
        return self._posters[0].encode(path, body)

    async def send(self, request: bytes) -> int:
        chosen = self._posters[self._next % len(self._posters)]
        self._next += 1
        return await chosen.send(request)


@asynccontextmanager
async def database(dsn: str) -> AsyncIterator[str]:
    name = f"postroom_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(dsn)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def init_pg(data: Path, url: str) -> str:
    subprocess.run(
        [sys.executable, "-m", "postroom", "--data", str(data), "init", "--database", url],
        check=True,
        capture_output=True,
    )
    return str(tomllib.loads((data / "postroom.toml").read_text())["api"]["token"])


@asynccontextmanager
async def balanced(servers: list[Server]) -> AsyncIterator[RoundRobin]:
    """Fresh keep-alive connections to every node, one phase long (a connection left idle
    between phases may have been closed by the server)."""
    async with AsyncExitStack() as stack:
        posters = [await stack.enter_async_context(poster(s)) for s in servers]
        yield RoundRobin(posters)


async def measure(servers: list[Server], sink: Sink, scale: float, tag: str) -> dict[str, float]:
    async with balanced(servers) as client:
        await turn_rate(client, sink, 200, f"warm{tag}")  # type: ignore[arg-type]
    async with balanced(servers) as client:
        turns = await turn_rate(client, sink, int(4_000 * scale), tag)  # type: ignore[arg-type]
    async with balanced(servers) as client:
        lat = await latency(client, sink, 200.0, 10.0 * scale, tag)  # type: ignore[arg-type]
    return {"turns": turns, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}


async def sqlite_alone(sink: Sink, sink_url: str, scale: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        token = init_data(data)
        server = await start_server(data, token, sink_url)
        try:
            return await measure([server], sink, scale, "sqlite")
        finally:
            stop_server(server)


async def pg_nodes(
    dsn: str, nodes: int, sink: Sink, sink_url: str, scale: float
) -> dict[str, float]:
    async with database(dsn) as url:
        with tempfile.TemporaryDirectory() as tmp:
            first = Path(tmp) / "node0"
            token = init_pg(first, url)
            dirs = [first] + [
                Path(shutil.copytree(first, Path(tmp) / f"node{n}")) for n in range(1, nodes)
            ]
            os.environ["POSTROOM_DATABASE__URL"] = url
            servers: list[Server] = []
            try:
                for data in dirs:
                    servers.append(await start_server(data, token, sink_url))
                return await measure(servers, sink, scale, f"pg{nodes}")
            finally:
                del os.environ["POSTROOM_DATABASE__URL"]
                for server in servers:
                    stop_server(server)


async def claim_rate(dsn: str, workers: int, jobs: int) -> float:
    """Claims and finishes per second of the queue alone: *workers* loops on one process."""
    async with database(dsn) as url:
        store = await PostgresStore.open(url, max_size=max(workers, 2))
        now = datetime.now(UTC)
        async with store.write() as tx:
            for n in range(jobs):
                conversation = await tx.current_conversation("main", "", f"c:{n}", now=now)
                await tx.insert_job(
                    NewJob(
                        conversation_id=conversation,
                        folder="main",
                        chat_jid=f"c:{n}",
                        topic="",
                        kind=JobKind.TURN,
                        priority=5,
                        max_attempts=3,
                        run_at=now,
                        created_at=now,
                    )
                )

        async def worker(index: int) -> None:
            lease = now + timedelta(seconds=30)
            while True:
                async with store.write() as tx:
                    job = await tx.claim_job(
                        now=now, lease_until=lease, owner="bench", boot_id="b", token=f"t{index}"
                    )
                if job is None:
                    return
                async with store.write() as tx:
                    await tx.finish_job(job.id, f"t{index}", status=JobStatus.DONE, now=now)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(workers)))
        elapsed = time.perf_counter() - started
        await store.close()
        return jobs / elapsed


async def run(args: argparse.Namespace) -> int:
    scale = 0.25 if args.quick else 1.0
    rows: list[tuple[str, dict[str, float]]] = []
    sink = Sink()
    async with serve_sink(sink) as sink_url:
        rows.append(("SQLite, 1 process", await sqlite_alone(sink, sink_url, scale)))
        print(f"  {rows[-1][0]}: {rows[-1][1]}", flush=True)
        for nodes in args.nodes:
            rows.append(
                (
                    f"PostgreSQL, {nodes} node(s)",
                    await pg_nodes(args.dsn, nodes, sink, sink_url, scale),
                )
            )
            print(f"  {rows[-1][0]}: {rows[-1][1]}", flush=True)
    claims = [(w, await claim_rate(args.dsn, w, int(2_000 * scale))) for w in (1, 2, 4, 8)]
    print()
    print(f"postroom on PostgreSQL — {os.cpu_count()} CPUs; echo provider; 64 requests in flight")
    print(f"{'':>24}  {'turns/s':>9}  {'p50 @200/s':>11}  {'p99 @200/s':>11}")
    for name, figures in rows:
        print(
            f"{name:>24}  {figures['turns']:>9,.0f}  {figures['p50']:>8.1f} ms  "
            f"{figures['p99']:>8.1f} ms"
        )
    print()
    print("queue alone (claim + finish, one transaction each):")
    for workers, rate in claims:
        print(f"{workers:>3} worker(s)  {rate:>7,.0f} turns/s")
    print(f"  (median over worker counts {statistics.median(r for _, r in claims):,.0f})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="a quarter of the load")
    parser.add_argument("--dsn", default=os.environ.get("POSTROOM_TEST_PG_DSN") or DEFAULT_DSN)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
