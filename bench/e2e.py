"""End-to-end benchmark of ``postroom serve``: throughput, latency, memory and start-up.

    python bench/e2e.py [--repeats 3] [--quick]

It starts ``postroom serve`` as a subprocess on a temporary data directory (SQLite file, the
``echo`` provider without delay, logs at warning), with an outbound-webhook sink for the
``bench`` platform served by this script, and drives it through the HTTP API with many
concurrent chats (``session = "per-chat"``: one conversation per chat). It prints, with
medians over the repeats:

* observed-only traffic (routed to ``main#observe``: stored and routed, no turn): messages/s;
* full turns (ingest → turn → answer stored → delivered to the sink): turns/s;
* latency from each message's scheduled send time to its answer's arrival at the sink, at a
  fixed offered load of 200 turns/s: p50, p95, p99;
* resident memory of the server with 10,000 chats and 200,000 messages in the database, and the
  cost of one more idle chat;
* start-up time of ``postroom serve`` to a healthy ``/healthz``.

Targets on the 2-core machine: >= 2,000 observed messages/s, >= 500 turns/s, p99 < 50 ms at 200
turns/s, RSS < 150 MB with 10,000 chats, start-up < 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from loadgen import Poster

READY = re.compile(r"postroom serving on http://127\.0\.0\.1:(\d+)")
CONCURRENCY = 64
MESSAGES_PATH = "/api/v1/messages"


# -- the outbound-webhook sink ---------------------------------------------------------------
@dataclass
class Sink:
    arrivals: dict[str, float] = field(default_factory=dict)
    count: int = 0
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        now = time.perf_counter()
        payload = json.loads(body)
        self.arrivals.setdefault(payload["reply_to"] or payload["id"], now)
        self.count += 1
        for target, future in list(self.waiters):
            if self.count >= target and not future.done():
                future.set_result(None)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def wait_for(self, count: int, timeout_s: float) -> bool:
        if self.count >= count:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((count, future))
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return False
        return True


@asynccontextmanager
async def serve_sink(sink: Sink) -> Any:
    server = uvicorn.Server(
        uvicorn.Config(
            sink.app, host="127.0.0.1", port=0, log_config=None, lifespan="off", interface="asgi3"
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no "started" event
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        server.should_exit = True
        await task


# -- the server under test -----------------------------------------------------------------
@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    token: str
    started_s: float


def init_data(data: Path) -> str:
    subprocess.run(
        [sys.executable, "-m", "postroom", "--data", str(data), "init"],
        check=True,
        capture_output=True,
    )
    db = sqlite3.connect(data / "postroom.db")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    db.execute("DELETE FROM routes")
    db.executemany(
        "INSERT INTO routes (seq, match, target, created_at, created_by) VALUES (?, ?, ?, ?, ?)",
        [
            (0, "platform=obs", "main#observe", now, "bench"),
            (1, "platform=bench", "main", now, "bench"),
        ],
    )
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'catalog_version'")
    db.commit()
    db.close()
    return tomllib.loads((data / "postroom.toml").read_text())["api"]["token"]


async def start_server(data: Path, token: str, sink_url: str) -> Server:
    env = {
        **os.environ,
        "POSTROOM_CHANNELS__HTTP__BENCH__OUTBOUND_URL": sink_url,
        "POSTROOM_QUEUE__MAX_CONCURRENT_TURNS": "16",
    }
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: ASYNC220 - stderr is read line by line below
        [
            sys.executable,
            "-m",
            "postroom",
            "--data",
            str(data),
            "--log-level",
            "warning",
            "serve",
            "--port",
            "0",
        ],
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    port = None
    loop = asyncio.get_running_loop()
    while port is None:
        line = await loop.run_in_executor(None, process.stderr.readline)
        if not line:
            raise RuntimeError("postroom serve exited during start-up")
        match = READY.search(line.decode(errors="replace"))
        if match:
            port = int(match.group(1))
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    break
            except httpx.HTTPError:
                await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - started
    # Keep draining stderr so the server never blocks on a full pipe.
    loop.run_in_executor(None, lambda: [None for _ in process.stderr or []])
    return Server(process, url, token, elapsed)


def stop_server(server: Server) -> None:
    server.process.send_signal(signal.SIGINT)
    try:
        server.process.wait(30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(5)


def poster(server: Server) -> Poster:
    port = int(server.url.rsplit(":", 1)[1])
    return Poster("127.0.0.1", port, token=server.token, size=CONCURRENCY)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- workloads -------------------------------------------------------------------------------
async def post_many(client: Poster, bodies: list[dict[str, Any]]) -> None:
    """Post every body with CONCURRENCY requests in flight."""
    requests = [client.encode(MESSAGES_PATH, body) for body in bodies]
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)

    async def worker() -> None:
        while not queue.empty():
            status = await client.send(queue.get_nowait())
            if status >= 300:
                raise RuntimeError(f"the server answered {status}")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def message(platform: str, index: int, chats: int, prefix: str) -> dict[str, Any]:
    chat = index % chats
    return {
        "id": f"{prefix}-{index}",
        "chat_jid": f"{platform}:chat/{chat}",
        "sender": f"{platform}:user/{chat}",
        "sender_name": f"user {chat}",
        "content": f"message {index} of the benchmark",
    }


async def observed_rate(client: Poster, count: int, tag: str) -> float:
    bodies = [message("obs", i, 500, f"obs{tag}") for i in range(count)]
    started = time.perf_counter()
    await post_many(client, bodies)
    return count / (time.perf_counter() - started)


async def turn_rate(client: Poster, sink: Sink, count: int, tag: str) -> float:
    # One message per chat: a message for a chat whose turn is still queued would join it
    # (one answer for both), and the sink would never see as many answers as messages.
    bodies = [message("bench", i, count, f"turn{tag}") for i in range(count)]
    target = sink.count + count
    started = time.perf_counter()
    await post_many(client, bodies)
    if not await sink.wait_for(target, 120):
        raise RuntimeError(f"only {sink.count - (target - count)} of {count} turns delivered")
    return count / (time.perf_counter() - started)


async def latency(client: Poster, sink: Sink, rate: float, seconds: float, tag: str) -> list[float]:
    count = int(rate * seconds)
    bodies = [message("bench", i, count, f"lat{tag}") for i in range(count)]
    requests = [client.encode(MESSAGES_PATH, body) for body in bodies]
    scheduled: dict[str, float] = {}
    begin = time.perf_counter() + 0.1
    tasks = []

    async def send(index: int) -> None:
        at = begin + index / rate
        await asyncio.sleep(max(at - time.perf_counter(), 0))
        scheduled[bodies[index]["id"]] = at
        status = await client.send(requests[index])
        if status >= 300:
            raise RuntimeError(f"the server answered {status}")

    target = sink.count + count
    for index in range(count):
        tasks.append(asyncio.create_task(send(index)))
    await asyncio.gather(*tasks)
    if not await sink.wait_for(target, 120):
        raise RuntimeError("not every turn was delivered")
    return [(sink.arrivals[m] - at) * 1000 for m, at in scheduled.items()]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fill_database(data: Path, chats: int, messages: int) -> None:
    """10,000 chats and 200,000 messages, written directly (the server is stopped)."""
    db = sqlite3.connect(data / "postroom.db")
    db.execute("PRAGMA synchronous = OFF")
    start = db.execute("SELECT COALESCE(MAX(seq), 0) FROM messages").fetchone()[0]
    moment = datetime.now(UTC)
    rows = []
    for n in range(messages):
        chat = n % chats
        stamp = (moment + timedelta(microseconds=n)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        rows.append(
            (
                f"fill-{n}",
                f"obs:chat/fill{chat}",
                f"obs:user/{chat}",
                "user",
                f"stored message {n}",
                stamp,
                0,
                "user",
                "{}",
                start + n + 1,
                "message",
                "",
                "main",
                1,
            )
        )
    db.executemany(
        "INSERT INTO messages (id, chat_jid, sender, sender_name, content, timestamp, "
        "is_from_me, message_type, metadata, seq, verb, topic, routed_to, observed) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.executemany(
        "INSERT OR IGNORE INTO chats (chat_jid, updated_at) VALUES (?, ?)",
        [(f"obs:chat/fill{c}", moment.isoformat()) for c in range(chats)],
    )
    db.commit()
    db.close()


# -- main ------------------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> int:
    scale = 0.25 if args.quick else 1.0
    results: dict[str, list[float]] = {
        "observed": [],
        "turns": [],
        "p50": [],
        "p95": [],
        "p99": [],
        "startup": [],
    }
    sink = Sink()
    async with serve_sink(sink) as sink_url:
        for repeat in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp) / "data"
                token = init_data(data)
                server = await start_server(data, token, sink_url)
                results["startup"].append(server.started_s)
                try:
                    async with poster(server) as client:
                        await observed_rate(client, 500, f"w{repeat}")  # warm-up
                        results["observed"].append(
                            await observed_rate(client, int(10_000 * scale), str(repeat))
                        )
                        results["turns"].append(
                            await turn_rate(client, sink, int(4_000 * scale), str(repeat))
                        )
                        lat = await latency(client, sink, 200.0, 10.0 * scale, str(repeat))
                        results["p50"].append(percentile(lat, 0.50))
                        results["p95"].append(percentile(lat, 0.95))
                        results["p99"].append(percentile(lat, 0.99))
                finally:
                    stop_server(server)
                print(
                    f"  run {repeat + 1}: observed {results['observed'][-1]:,.0f}/s, "
                    f"turns {results['turns'][-1]:,.0f}/s, p99 {results['p99'][-1]:.1f} ms, "
                    f"start-up {results['startup'][-1]:.2f} s",
                    flush=True,
                )
        # Memory: a database of 10,000 chats and 200,000 messages.
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            token = init_data(data)
            fill_database(data, 10_000, int(200_000 * scale))
            server = await start_server(data, token, sink_url)
            try:
                async with poster(server) as client:
                    await observed_rate(client, 1_000, "mem-warm")
                    before = rss_mb(server.process.pid)
                    bodies = [message("obs", i, 2_000, "idle") for i in range(2_000)]
                    bodies = [b | {"chat_jid": f"obs:chat/idle{i}"} for i, b in enumerate(bodies)]
                    await post_many(client, bodies)
                    after = rss_mb(server.process.pid)
            finally:
                stop_server(server)
    median = {key: statistics.median(values) for key, values in results.items()}
    per_chat_kb = (after - before) * 1024 / 2_000
    print()
    print(
        f"postroom end-to-end benchmark — {args.repeats} runs, medians; 2 CPUs; "
        f"SQLite; echo provider; {CONCURRENCY} concurrent clients"
    )
    rows = [
        (
            "observed messages/s",
            f"{median['observed']:,.0f}",
            ">= 2,000",
            median["observed"] >= 2000,
        ),
        ("turns/s (delivered)", f"{median['turns']:,.0f}", ">= 500", median["turns"] >= 500),
        ("latency p50 @200/s", f"{median['p50']:.1f} ms", "", True),
        ("latency p95 @200/s", f"{median['p95']:.1f} ms", "", True),
        ("latency p99 @200/s", f"{median['p99']:.1f} ms", "< 50 ms", median["p99"] < 50),
        ("RSS, 10k chats/200k msgs", f"{before:.0f} MB", "< 150 MB", before < 150),
        ("one more idle chat", f"{per_chat_kb:.2f} KB", "flat", True),
        ("start-up to /healthz", f"{median['startup']:.2f} s", "< 1.5 s", median["startup"] < 1.5),
    ]
    for name, value, target, ok in rows:
        verdict = "" if not target else ("PASS" if ok else "MISS")
        print(f"{name:>26}  {value:>12}  {target:>9}  {verdict}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a quarter of the load")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
