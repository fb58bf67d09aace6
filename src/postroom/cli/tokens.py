"""``postroom tokens add|list|rm``: named tokens for the HTTP API and the MCP server."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from postroom.cli.common import actor, context, print_json, run, services_for, stdout
from postroom.engine.tokens import NewToken, token_to_dict
from postroom.store.records import TokenRecord

__all__ = ["app"]

app = typer.Typer(
    help="API and MCP tokens besides [api] token: each with a scope, optionally confined to a "
    "folder.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name (a-z, 0-9, - and _).")],
    scope: Annotated[
        str, typer.Option(help="read (reads only), routes (route and folder tools), admin.")
    ] = "read",
    folder: Annotated[
        str | None, typer.Option(help="Confine the token to this folder's tree.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Make a token and print its secret — the only time it is shown."""
    cli = context(ctx)

    async def body() -> NewToken:
        async with services_for(cli) as services:
            return await services.tokens.add(name, scope=scope, folder=folder, actor=actor())

    made = run(body)
    if as_json:
        print_json(made.to_dict())
        return
    where = f", confined to {made.record.folder}" if made.record.folder else ""
    stdout.print(f"Token {made.record.name} (scope {made.record.scope}{where}):")
    stdout.print(made.secret, markup=False)
    stdout.print("The secret is shown only now; only a hash of it is kept.", style="dim")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The named tokens (never their secrets)."""
    cli = context(ctx)

    async def body() -> list[TokenRecord]:
        async with services_for(cli) as services:
            return await services.tokens.list()

    found = run(body)
    if as_json:
        print_json([token_to_dict(t) for t in found])
        return
    if not found:
        stdout.print("No named tokens; [api] token is the only one.", style="dim")
        return
    table = Table("name", "scope", "folder", "created", "by")
    for token in found:
        table.add_row(
            token.name,
            token.scope,
            token.folder or "·",
            token.created_at.strftime("%Y-%m-%d %H:%M"),
            token.created_by,
        )
    stdout.print(table)


@app.command("rm")
def rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name.")],
    as_json: JsonOption = False,
) -> None:
    """Remove a token: requests presenting it are refused from then on."""
    cli = context(ctx)

    async def body() -> None:
        async with services_for(cli) as services:
            await services.tokens.remove(name, actor=actor())

    run(body)
    if as_json:
        print_json({"name": name, "removed": True})
    else:
        stdout.print(f"Removed token {name}")
