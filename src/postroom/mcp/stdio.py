"""``postroom mcp``: the MCP tools over stdin and stdout, on the data directory, no server.

For desktop clients that start a command. Whoever can run it can read the database, so it
acts with the owner's rights unless told to narrow them; its writes are audited as
``mcp:stdio``.
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from postroom.engine.services import Services
from postroom.engine.tokens import Principal, Scope
from postroom.mcp.server import build_server

__all__ = ["STDIO", "serve_stdio"]

STDIO = Principal("stdio", Scope.ADMIN)


async def serve_stdio(services: Services, *, principal: Principal = STDIO) -> None:
    """Answer MCP requests on stdin/stdout until the client closes stdin."""
    server = build_server(services, caller=lambda _ctx: principal)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
