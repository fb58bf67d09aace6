"""``postroom mcp``: the MCP server on stdin/stdout, over the data directory."""

from __future__ import annotations

from typing import Annotated

import typer

from postroom.cli.common import context, fail, run, services_for
from postroom.core.errors import PostroomError
from postroom.core.folders import validate_folder
from postroom.engine.tokens import Principal, Scope

__all__ = ["mcp"]


def mcp(
    ctx: typer.Context,
    scope: Annotated[
        str,
        typer.Option(help="What the client may do: read, routes (route and folder tools), admin."),
    ] = Scope.ADMIN.value,
    folder: Annotated[
        str | None, typer.Option(help="Confine the client to this folder's tree.")
    ] = None,
) -> None:
    """Serve the MCP tools on stdin/stdout (for desktop clients that start a command); no
    running server is needed. Writes are audited as mcp:stdio."""
    # The MCP server and its web stack are imported only by this command: the others start fast.
    from postroom.mcp import STDIO, serve_stdio

    cli = context(ctx)
    try:
        principal = Principal(
            STDIO.name,
            Scope.parse(scope),
            None if folder is None else validate_folder(folder, what="--folder"),
        )
        enabled = cli.config().mcp.enabled
    except PostroomError as exc:
        fail(str(exc))
    if not enabled:
        fail("MCP is turned off in this data directory ([mcp] enabled = false).")

    async def body() -> None:
        async with services_for(cli) as services:
            await serve_stdio(services, principal=principal)

    run(body)
