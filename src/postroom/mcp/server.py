"""The MCP server: the tools of :mod:`postroom.mcp.tools` behind the official ``mcp`` package's
low-level server, for both transports.

A call is checked in this order, and a refusal is a tool error (``isError``) carrying one
sentence — the same as the HTTP API's — with nothing changed: the caller's scope, its folder
(a tool that cannot be confined to one is refused to a confined token), the arguments, then
whatever the engine refuses. A listing shows only the tools the caller may call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
import structlog
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import ValidationError

from postroom import __version__
from postroom.core.errors import Forbidden, PostroomError
from postroom.engine.services import Services
from postroom.engine.tokens import Principal
from postroom.mcp.arguments import describe_error, schema_of
from postroom.mcp.tools import SURFACE, TOOLS, Tool

__all__ = ["Caller", "build_server", "call_tool"]

log = structlog.get_logger(__name__)

#: Who makes a request: the token of an HTTP request, the fixed caller of a stdio server.
Caller = Callable[[ServerRequestContext[Any, Any]], Principal | None]

INSTRUCTIONS = (
    "postroom routes chat messages to agents. An agent is a folder (a path such as "
    "atlas/content). The route table decides each message's folder: the first row, by seq, "
    "whose match holds. Edit it with add_route, delete_route and set_routes; check a change "
    "first with dry_run or preview_routes, and a single message with explain_route."
)

_BY_NAME = {tool.name: tool for tool in TOOLS}


def _described(tool: Tool[Any]) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=schema_of(tool.arguments),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            open_world_hint=False,
        ),
    )


def _permits(who: Principal, tool: Tool[Any]) -> bool:
    return who.scope.covers(tool.scope) and (tool.confined or who.folder is None)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


async def call_tool(
    services: Services, who: Principal, name: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Run one tool for *who*: its answer as JSON (text and structured content), or a tool
    error with one sentence."""
    tool = _BY_NAME.get(name)
    if tool is None:
        return _error(f"There is no tool {name!r}; list the tools to see them.")
    try:
        who.require(tool.scope, f"the tool {name}")
        if not tool.confined:
            who.require_whole_table(f"the tool {name}")
        args = tool.arguments.model_validate(arguments)
        result = await tool.handler(services, who, args)
    except ValidationError as exc:
        return _error(describe_error(name, exc))
    except PostroomError as exc:
        log.info("mcp.refused", tool=name, actor=who.actor(SURFACE), error=str(exc))
        return _error(str(exc))
    log.info("mcp.called", tool=name, actor=who.actor(SURFACE))
    text = json.dumps(result, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=result
    )


def build_server(services: Services, *, caller: Caller) -> Server[Any]:
    """The low-level server over *services*; *caller* tells who makes each request."""

    def who(ctx: ServerRequestContext[Any, Any]) -> Principal:
        principal = caller(ctx)
        if principal is None:
            raise Forbidden("This request carries no token; send Authorization: Bearer <token>.")
        return principal

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = who(ctx)
        return types.ListToolsResult(tools=[_described(t) for t in TOOLS if _permits(principal, t)])

    async def call(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            principal = who(ctx)
        except Forbidden as exc:
            return _error(str(exc))
        return await call_tool(services, principal, params.name, dict(params.arguments or {}))

    return Server(
        "postroom",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
    )
