"""The MCP server (INTERFACES §5): postroom's tools over streamable HTTP at ``/mcp`` and over
stdio (``postroom mcp``), one implementation for both, thin over the engine's functions."""

from postroom.mcp.http import McpEndpoint, allowed_hosts
from postroom.mcp.server import build_server, call_tool
from postroom.mcp.stdio import STDIO, serve_stdio
from postroom.mcp.tools import TOOLS, Tool

__all__ = [
    "STDIO",
    "TOOLS",
    "McpEndpoint",
    "Tool",
    "allowed_hosts",
    "build_server",
    "call_tool",
    "serve_stdio",
]
