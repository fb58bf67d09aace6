"""The write-ahead log under steady load: does it stay bounded?

    python bench/wal.py [--seconds 600] [--rate 50]

It starts ``postroom serve`` as a subprocess (the same harness as ``bench/e2e.py``: a temporary
data directory, the ``echo`` provider, an outbound-webhook sink served by this script) and
posts ``--rate`` messages a second that each fire a turn (one chat per message, so every one
is answered), at a fixed schedule, for ``--seconds``. Every 50 ms it samples the size of
``postroom.db-wal`` with ``os.stat`` from this process, and it times every ``POST``. It prints
the largest WAL size seen (target: never above 64 MB), the WAL size and database size at the
end, the answers delivered, and the ``POST`` latency (p50, p99, max), which shows whether a
truncating checkpoint ever held ingest up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from e2e import (
    MESSAGES_PATH,
    Sink,
    init_data,
    message,
    percentile,
    poster,
    serve_sink,
    start_server,
    stop_server,
)

TARGET_MB = 64.0
SAMPLE_S = 0.05


def size_mb(path: Path) -> float:
    try:
        return os.stat(path).st_size / 1024 / 1024
    except FileNotFoundError:
        return 0.0


async def sample(path: Path, stop: asyncio.Event, sizes: list[float]) -> None:
    while not stop.is_set():
        sizes.append(size_mb(path))
        await asyncio.sleep(SAMPLE_S)


async def run(args: argparse.Namespace) -> int:
    count = int(args.rate * args.seconds)
    sink = Sink()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        token = init_data(data)
        wal = data / "postroom.db-wal"
        async with serve_sink(sink) as sink_url:
            server = await start_server(data, token, sink_url)
            sizes: list[float] = []
            latencies: list[float] = []
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample(wal, stop, sizes))
            try:
                async with poster(server) as client:
                    begin = time.perf_counter() + 0.1

                    async def send(index: int) -> None:
                        at = begin + index / args.rate
                        await asyncio.sleep(max(at - time.perf_counter(), 0))
                        body = message("bench", index, count, "wal")
                        started = time.perf_counter()
                        status = await client.send(client.encode(MESSAGES_PATH, body))
                        latencies.append((time.perf_counter() - started) * 1000)
                        if status >= 300:
                            raise RuntimeError(f"the server answered {status}")

                    await asyncio.gather(*(send(i) for i in range(count)))
                    delivered = await sink.wait_for(count, 120)
            finally:
                stop.set()
                await sampler
                final_wal = size_mb(wal)
                database = size_mb(data / "postroom.db")
                stop_server(server)
    print(
        f"postroom WAL benchmark — {args.seconds:g} s at {args.rate:g} fired messages/s "
        f"({count:,} turns), SQLite, echo provider"
    )
    every_ms = SAMPLE_S * 1000
    print(f"  WAL size sampled every {every_ms:.0f} ms with os.stat ({len(sizes):,} samples)")
    largest = max(sizes, default=0.0)
    verdict = "PASS" if largest <= TARGET_MB else "MISS"
    print(f"  largest WAL: {largest:.1f} MB (target <= {TARGET_MB:.0f} MB): {verdict}")
    print(f"  at the end: WAL {final_wal:.1f} MB, database {database:.1f} MB")
    print(f"  answers delivered: {sink.count:,} of {count:,}" + ("" if delivered else " (timeout)"))
    print(
        f"  POST latency: p50 {percentile(latencies, 0.5):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms"
    )
    return 0 if largest <= TARGET_MB and delivered else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=50.0, help="fired messages per second")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
