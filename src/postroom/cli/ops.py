"""``postroom usage`` and ``postroom doctor``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from rich.text import Text

from postroom.cli.common import context, print_json, run, services_for, stdout, table
from postroom.engine.budgets import BudgetStatus
from postroom.store.records import UsageRow

__all__ = ["doctor", "usage"]

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def usage(
    ctx: typer.Context,
    days: Annotated[int, typer.Option(min=1, max=3650, help="How far back (days).")] = 30,
    budgets: Annotated[
        bool,
        typer.Option(
            "--budgets", help="Only the budgeted folders: today's cost (UTC) against the budget."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Tokens and cost per day, folder and model, and each folder's spend against its
    budget_per_day."""
    cli = context(ctx)
    now = datetime.now(UTC)
    since = now - timedelta(days=days)

    async def body() -> tuple[list[UsageRow], list[BudgetStatus]]:
        async with services_for(cli) as services:
            rows = [] if budgets else await services.history.usage(since=since)
            return rows, await services.budgets.today(now=now)

    rows, spend = run(body)
    if budgets:
        if as_json:
            print_json([b.to_dict() for b in spend])
        else:
            _print_budgets(spend, empty="No folder has a budget_per_day.")
        return
    if as_json:
        print_json([_usage_row(r) for r in rows])
        return
    if not rows:
        stdout.print("No runs in that period.", style="dim")
    else:
        _print_usage(rows)
    if spend:
        _print_budgets(spend, empty="")


def _usage_row(r: UsageRow) -> dict[str, object]:
    return {
        "day": r.day,
        "folder": r.folder,
        "provider": r.provider,
        "model": r.model,
        "runs": r.runs,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cost": None if r.cost is None else round(r.cost, 6),
    }


def _print_usage(rows: list[UsageRow]) -> None:
    lines = table(
        "day",
        "folder",
        "provider",
        "model",
        "runs",
        "in",
        "out",
        "cost (USD)",
        keep=("day", "runs", "in", "out", "cost (USD)"),
    )
    for r in rows:
        lines.add_row(
            r.day,
            r.folder,
            r.provider,
            r.model or "·",
            str(r.runs),
            f"{r.input_tokens:,}",
            f"{r.output_tokens:,}",
            "unpriced" if r.cost is None else f"{r.cost:.4f}",
        )
    stdout.print(lines)
    priced = sum(r.cost for r in rows if r.cost is not None)
    unpriced = sum(r.runs for r in rows if r.cost is None)
    total = f"Total: {sum(r.runs for r in rows)} runs, ${priced:.4f}"
    if unpriced:
        total += (
            f" and {unpriced} run(s) of models without a price (give them one in "
            '[models."<name>"] of postroom.toml)'
        )
    stdout.print(total, markup=False)


def _print_budgets(spend: list[BudgetStatus], *, empty: str) -> None:
    if not spend:
        stdout.print(empty, style="dim")
        return
    lines = table(
        "folder",
        "budget/day (USD)",
        "spent today",
        "left",
        "state",
        keep=("budget/day (USD)", "spent today", "left", "state"),
    )
    for b in spend:
        state = "reached: no turns until 00:00 UTC" if b.reached else "ok"
        if b.unpriced_runs:
            state += f"; {b.unpriced_runs} unpriced run(s) not counted"
        lines.add_row(
            b.folder,
            f"{b.budget:.2f}",
            f"{b.spent:.4f}",
            f"{max(b.budget - b.spent, 0.0):.4f}",
            state,
        )
    stdout.print("Budgets today (UTC; a folder's budget covers the folders under it):")
    stdout.print(lines)


def doctor(
    ctx: typer.Context,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.1, max=600, help="How long each provider or channel may take (s)."
        ),
    ] = 10.0,
    as_json: JsonOption = False,
) -> None:
    """Check the configuration, database, routes, folders, providers, channels and server; say
    what to fix. The checks that wait on the network run at once, each printed as it ends."""
    from postroom.app.doctor import Check, run_doctor  # it imports every channel and provider

    cli = context(ctx)

    def show(check: Check) -> None:
        if as_json:
            return  # the whole list, in a fixed order, at the end
        mark, style = (
            ("✓", "green") if check.ok else ("!", "yellow") if check.warning else ("✗", "red")
        )
        stdout.print(Text(f"{mark} {check.name}: ", style=style) + Text(check.detail))

    async def body() -> list[Check]:
        return await run_doctor(cli.data_dir, cli.config(), report=show, timeout_s=timeout)

    checks = run(body)
    if as_json:
        print_json([c.to_dict() for c in checks])
    if any(not c.ok and not c.warning for c in checks):
        raise typer.Exit(1)
