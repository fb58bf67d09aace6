"""Admission benchmark: the cost of one admission verdict (postroom.core.access.admit).

    python bench/admission.py [--counts 0,100,10000] [--repeats 5]

Workload: half the principals are exact senders (``telegram:user/<n>``), half are globs
(``discord:user/<n>*``); 2,000 senders are drawn, half of them matching an exact principal and
half (``slack:user/<n>``) matching none, so every lookup walks the whole index. The figure is the
median, over the repeats, of microseconds per verdict.
"""

from __future__ import annotations

import argparse
import statistics
import time

from postroom.core.access import AccessPolicy, Principal, PrincipalTable, Role, admit


def table_of(count: int) -> PrincipalTable:
    exact = [Principal(i, f"telegram:user/{i}", Role.MEMBER) for i in range(count // 2)]
    globs = [
        Principal(count + i, f"discord:user/{i}*", Role.MEMBER) for i in range(count - count // 2)
    ]
    return PrincipalTable([*exact, *globs])


def measure(table: PrincipalTable, senders: list[str]) -> float:
    policy = AccessPolicy()
    start = time.perf_counter()
    for sender in senders:
        admit("telegram:group/5", sender, False, table, policy)
    return (time.perf_counter() - start) / len(senders) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="0,100,10000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    senders = [f"telegram:user/{i}" for i in range(1000)] + [f"slack:user/{i}" for i in range(1000)]
    print(f"{'principals':>12}  µs per verdict (median of {args.repeats})")
    for count in (int(c) for c in args.counts.split(",")):
        table = table_of(count)
        figures = [measure(table, senders * 5) for _ in range(args.repeats)]
        print(f"{count:>12,}  {statistics.median(figures):.2f}")


if __name__ == "__main__":
    main()
