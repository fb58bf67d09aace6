"""What a turn costs as conversations grow, behind a slow receiver, and at default settings.

    python bench/turn_costs.py [--repeats N] [--only NAME ...] [--turns 1000]

Each workload starts ``postroom serve`` as a subprocess on a fresh data directory (SQLite, the
``echo`` provider without delay) with an outbound-webhook sink for the ``bench`` platform served
by this script (the same harness as ``bench/e2e.py``), and prints, with medians over the repeats:

* ``long``: one chat, sequential turns (each message posted once the previous answer arrived):
  the p50 of the time from post to answer for turns 1–100 and for the last hundred turns;
* ``spread``: 2,000 messages, one in flight at a time, over 10 chats and over 2,000 chats:
  messages/s of each, and their ratio;
* ``slow``: a receiver that answers each webhook after 100 ms, 1,000 chats with one message
  each, 64 posts in flight: turns delivered per second;
* ``default``: the server's default settings (log level, turn slots) with a prompt receiver,
  4,000 chats with one message each: turns delivered per second.

To measure another checkout, run this script with ``PYTHONPATH`` pointing at its ``src``: the
server is started with this interpreter and environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from e2e import READY, Server, Sink, init_data, message, post_many, serve_sink
from loadgen import Poster

MESSAGES_PATH = "/api/v1/messages"


class SlowSink(Sink):
    """A receiver that takes *delay_s* to answer each webhook."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.delay_s:
            await asyncio.sleep(self.delay_s)
        await super().app(scope, receive, send)


async def start(data: Path, token: str, sink_url: str, *, defaults: bool) -> Server:
    env = {**os.environ, "POSTROOM_CHANNELS__HTTP__BENCH__OUTBOUND_URL": sink_url}
    command = [sys.executable, "-m", "postroom", "--data", str(data)]
    if not defaults:
        command += ["--log-level", "warning"]
    command += ["serve", "--port", "0"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, env=env)  # noqa: ASYNC220
    assert process.stderr is not None
    loop = asyncio.get_running_loop()
    port = None
    while port is None:
        line = await loop.run_in_executor(None, process.stderr.readline)
        if not line:
            raise RuntimeError("postroom serve exited during start-up")
        match = READY.search(line.decode(errors="replace"))
        if match:
            port = int(match.group(1))
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as client:
        while (await client.get(f"{url}/healthz")).status_code != 200:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    loop.run_in_executor(None, lambda: [None for _ in process.stderr or []])
    return Server(process, url, token, time.perf_counter() - started)


def stop(server: Server) -> None:
    server.process.send_signal(signal.SIGINT)
    try:
        server.process.wait(30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(5)


Workload = Callable[[Poster, Sink], Awaitable[dict[str, float]]]


def cpu_s(pid: int) -> float:
    """The CPU time (user + system) process *pid* has used: a figure that, unlike rates,
    hardly moves when other work shares the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def with_server(
    sink: Sink, workload: Workload, *, label: str, defaults: bool = False, pool: int = 64
) -> dict[str, float]:
    async with serve_sink(sink) as sink_url:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            token = init_data(data)
            server = await start(data, token, sink_url, defaults=defaults)
            try:
                port = int(server.url.rsplit(":", 1)[1])
                async with Poster("127.0.0.1", port, token=token, size=pool) as client:
                    used = cpu_s(server.process.pid)
                    answers = sink.count
                    figures = await workload(client, sink)
                    used = cpu_s(server.process.pid) - used
                    figures[f"{label}: server CPU ms/answer"] = used * 1000 / (sink.count - answers)
                    return figures
            finally:
                stop(server)


async def one_at_a_time(client: Poster, sink: Sink, bodies: list[dict[str, Any]]) -> list[float]:
    """Post each body once the previous answer arrived; the seconds each turn took."""
    took: list[float] = []
    for body in bodies:
        target = sink.count + 1
        began = time.perf_counter()
        status = await client.send(client.encode(MESSAGES_PATH, body))
        if status >= 300:
            raise RuntimeError(f"the server answered {status}")
        if not await sink.wait_for(target, 60):
            raise RuntimeError(f"no answer to {body['id']}")
        took.append(time.perf_counter() - began)
    return took


def long_chat(turns: int) -> Workload:
    async def run(client: Poster, sink: Sink) -> dict[str, float]:
        bodies = [message("bench", i, 1, "long") for i in range(turns)]
        took = await one_at_a_time(client, sink, bodies)
        return {
            "first 100 p50 ms": statistics.median(took[:100]) * 1000,
            "last 100 p50 ms": statistics.median(took[-100:]) * 1000,
        }

    return run


def spread(chats: int, count: int = 2_000) -> Workload:
    async def run(client: Poster, sink: Sink) -> dict[str, float]:
        bodies = [message("bench", i, chats, f"spread{chats}") for i in range(count)]
        began = time.perf_counter()
        await one_at_a_time(client, sink, bodies)
        return {f"{chats} chats msg/s": count / (time.perf_counter() - began)}

    return run


def burst(count: int, name: str) -> Workload:
    async def run(client: Poster, sink: Sink) -> dict[str, float]:
        bodies = [message("bench", i, count, f"burst{name}") for i in range(count)]
        target = sink.count + count
        began = time.perf_counter()
        await post_many(client, bodies)
        if not await sink.wait_for(target, 300):
            raise RuntimeError(f"only {sink.count} of {count} answers delivered")
        return {name: count / (time.perf_counter() - began)}

    return run


async def measure(name: str, args: argparse.Namespace) -> dict[str, float]:
    if name == "long":
        return await with_server(Sink(), long_chat(args.turns), label="long", pool=1)
    if name == "spread":
        few = await with_server(Sink(), spread(10), label="10 chats", pool=1)
        many = await with_server(Sink(), spread(2_000), label="2,000 chats", pool=1)
        out = few | many
        out["10/2,000 ratio"] = out["10 chats msg/s"] / out["2000 chats msg/s"]
        return out
    if name == "slow":
        return await with_server(
            SlowSink(0.1), burst(1_000, "100 ms receiver turns/s"), label="slow receiver"
        )
    if name == "default":
        return await with_server(
            Sink(), burst(4_000, "default turns/s"), label="default", defaults=True
        )
    raise SystemExit(f"unknown workload {name}")


async def run(args: argparse.Namespace) -> int:
    results: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        for name in args.only:
            figures = await measure(name, args)
            for key, value in figures.items():
                results.setdefault(key, []).append(value)
            shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
            print(f"  run {repeat + 1} {name}: {shown}", flush=True)
    print()
    print(f"postroom turn costs — {args.repeats} runs, medians; SQLite; echo provider")
    for key, values in results.items():
        low, high = min(values), max(values)
        print(f"{key:>36}  {statistics.median(values):>10,.2f}   ({low:,.2f}..{high:,.2f})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument(
        "--only", nargs="+", default=["long", "spread", "slow", "default"], help="workloads"
    )
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
