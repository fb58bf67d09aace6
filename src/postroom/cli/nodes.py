"""``postroom nodes``: the processes sharing a PostgreSQL database (PIPELINE §9)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.cli.common import context, print_json, run, services_for, stdout
from postroom.engine.nodes import adapters_by_node, node_to_dict

__all__ = ["nodes"]


def nodes(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """The nodes sharing the PostgreSQL database: where each listens, its last heartbeat."""
    cli = context(ctx)

    async def body() -> list[dict[str, Any]]:
        async with services_for(cli) as services:
            async with services.store.read() as tx:
                found = await tx.list_nodes()
                leases = await tx.list_adapter_leases()
            now = services.clock()
        held = adapters_by_node(leases, now=now)
        return [node_to_dict(node, now=now, adapters=held.get(node.id, [])) for node in found]

    rows = run(body)
    if as_json:
        print_json(rows)
        return
    if not rows:
        stdout.print(
            "No node is registered: no postroom serve runs on a PostgreSQL database here "
            "(on SQLite, one serve uses the data directory and keeps no node row; set "
            "[database] url to run several).",
            style="dim",
            markup=False,
        )
        return
    for row in rows:
        state = "alive" if row["alive"] else "silent"
        adapters = f"  runs {', '.join(row['adapters'])}" if row["adapters"] else ""
        stdout.print(
            Text(
                f"{row['name']}  {row['host']}:{row['port']}  pid {row['pid']}  {state}  "
                f"heartbeat {row['heartbeat_at']}  started {row['started_at']}  id {row['id']}"
                f"{adapters}"
            )
        )
