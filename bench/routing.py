"""Routing benchmark: decisions per second of the pure resolution (postroom.core.resolution).

    python bench/routing.py [--seconds 1.0] [--repeats 5]

Workload (TESTING.md, "Benchmarks: fixed workloads"): route tables of 10, 1,000 and 10,000 rows,
made of 70% per-chat literal rows (``chat_jid=<exact>``), 15% platform rows, 10% wildcard-room
rows (``platform=discord room=guild/<id>/*``), 4% verb rows (``platform=<p> verb=post``) and one
catch-all. Messages are drawn so that every kind of row wins: 60% hit a per-chat row, 15% a
platform row, 10% a wildcard room, 5% a verb row, 10% fall through to the catch-all. Each
decision includes trigger detection, steering parsing, the table lookup, the layers and the
reason trail. The process is pinned to one CPU. The figure is the median of the repeats.

Targets: >= 100,000 decisions/s at 1,000 rows; 10,000 rows costing no more than 3x 10 rows.
For comparison, the last table is 1,000 rows the index cannot help with (every row a glob on
the first room segment), evaluated by scanning.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime

from postroom.core import (
    EMPTY_CHAT,
    Route,
    RouteIndex,
    RoutingMessage,
    Trigger,
    parse_match,
    parse_target,
    resolve,
)

CHAT_PLATFORMS = ("telegram", "slack", "whatsapp", "matrix", "email")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def build_table(rows: int) -> tuple[list[Route], dict[str, list[str]]]:
    """Rows of the mix and, per kind, the chat JIDs whose messages a row of that kind wins."""
    n_platform = max(1, round(rows * 0.15))
    n_wild = max(1, round(rows * 0.10))
    n_verb = max(1, round(rows * 0.04))
    n_chat = rows - n_platform - n_wild - n_verb - 1
    specs: list[tuple[int, str, str]] = []
    chats: dict[str, list[str]] = {"chat": [], "platform": [], "wild": [], "verb": [], "rest": []}
    for i in range(n_chat):
        jid = f"{CHAT_PLATFORMS[i % len(CHAT_PLATFORMS)]}:group/{i}"
        specs.append((0, f"chat_jid={jid}", f"f{i % 50}"))
        chats["chat"].append(jid)
    for i in range(n_platform):
        specs.append((10, f"platform=api{i}", f"f{i % 50}"))
        chats["platform"].append(f"api{i}:room/{i}")
    for i in range(n_wild):
        specs.append((20, f"platform=discord room=guild/{i}/*", f"f{i % 50}"))
        chats["wild"].append(f"discord:guild/{i}/channel/{i * 7}")
    for i in range(n_verb):
        specs.append((30, f"platform=social{i} verb=post", f"f{i % 50}#observe"))
        chats["verb"].append(f"social{i}:account/{i}")
    specs.append((9999, "", "main"))
    chats["rest"] = [f"{p}:user/{i}" for i, p in enumerate(CHAT_PLATFORMS * 20)]
    routes = [
        Route(id=i + 1, seq=seq, match=parse_match(match), target=parse_target(target))
        for i, (seq, match, target) in enumerate(specs)
    ]
    return routes, chats


def build_unindexed(rows: int) -> list[Route]:
    """Rows whose first room segment is a glob: nothing literal to file them under."""
    routes = [
        Route(id=i + 1, seq=0, match=parse_match(f"room=*/chan{i}"), target=parse_target("main"))
        for i in range(rows - 1)
    ]
    routes.append(Route(id=rows, seq=9999, match=parse_match(""), target=parse_target("main")))
    return routes


def build_messages(chats: dict[str, list[str]], count: int, seed: int) -> list[RoutingMessage]:
    rng = random.Random(seed)
    texts = (
        "hi",
        "what's the status?",
        "@Postroom summarize",
        "#billing refund please",
        "thanks!",
        "@content draft the post",
    )
    weights = (("chat", 60), ("platform", 15), ("wild", 10), ("verb", 5), ("rest", 10))
    kinds = [k for k, w in weights for _ in range(w)]
    out: list[RoutingMessage] = []
    for _ in range(count):
        kind = rng.choice(kinds)
        jid = rng.choice(chats[kind])
        platform_name = jid.partition(":")[0]
        out.append(
            RoutingMessage(
                chat_jid=jid,
                sender=f"{platform_name}:user/{rng.randrange(10_000)}",
                content=rng.choice(texts),
                verb="post" if kind == "verb" else "message",
            )
        )
    return out


def measure(
    index: RouteIndex,
    messages: list[RoutingMessage],
    folders: frozenset[str],
    seconds: float,
    repeats: int,
) -> tuple[float, list[float]]:
    trigger = Trigger()
    chat = EMPTY_CHAT
    rates: list[float] = []
    for _ in range(repeats):
        done = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            for message in messages:
                resolve(message, index, chat, folders, now=NOW, trigger=trigger)
            done += len(messages)
            now = time.perf_counter()
            if now >= deadline:
                break
        rates.append(done / (now - start))
    return statistics.median(rates), rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per repeat (default 1.0)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats (default 5)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    folders = frozenset({"main", *(f"f{i}" for i in range(50))})
    print(
        f"postroom routing benchmark — Python {platform.python_version()} on "
        f"{platform.machine()}, pinned to one CPU; {args.repeats} x {args.seconds:g} s each"
    )
    print(f"{'table':>28} {'decisions/s (median)':>22} {'µs/decision':>12}  min..max")
    results: dict[int, float] = {}
    for rows in (10, 1_000, 10_000):
        routes, chats = build_table(rows)
        index = RouteIndex(routes)
        messages = build_messages(chats, 5_000, seed=rows)
        rate, rates = measure(index, messages, folders, args.seconds, args.repeats)
        results[rows] = rate
        print(
            f"{f'{rows:,} rows (mixed)':>28} {rate:>22,.0f} {1e6 / rate:>12.2f}  "
            f"{min(rates):,.0f}..{max(rates):,.0f}"
        )
    routes = build_unindexed(1_000)
    unindexed = RouteIndex(routes)
    messages = [
        RoutingMessage(chat_jid=f"discord:guild/{i}/chan{i}", sender="discord:user/1", content="hi")
        for i in range(0, 2_000, 3)
    ]
    rate, rates = measure(unindexed, messages, folders, args.seconds, args.repeats)
    print(
        f"{'1,000 rows (unindexable)':>28} {rate:>22,.0f} {1e6 / rate:>12.2f}  "
        f"{min(rates):,.0f}..{max(rates):,.0f}"
    )
    ratio = results[10] / results[10_000]
    print()
    print(
        f"1,000 rows: {results[1_000]:,.0f} decisions/s (target >= 100,000): "
        f"{'PASS' if results[1_000] >= 100_000 else 'MISS'}"
    )
    print(
        f"10,000 rows cost {ratio:.2f}x 10 rows (target <= 3x): {'PASS' if ratio <= 3 else 'MISS'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
