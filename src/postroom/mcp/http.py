"""``/mcp``: the MCP tools over streamable HTTP, inside the server's own ASGI app.

Stateless: every request is answered on its own (no session to stick to a node), so any node
sharing the database can answer any request. The bearer token was already checked by the
API's middleware, which leaves the caller in the request's scope; the tools check its scope.
DNS-rebinding protection refuses a request whose ``Host`` (or ``Origin``) names no host this
server is reached by: the configured host, the loopback names when it listens on loopback,
and ``[mcp] allowed_hosts``.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncIterator, Iterable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from postroom.engine.services import Services
from postroom.engine.tokens import PRINCIPAL_KEY, Principal
from postroom.mcp.server import build_server

__all__ = ["PATH", "McpEndpoint", "allowed_hosts"]

PATH = "/mcp"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _from_request(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    request = ctx.request
    principal = request.scope.get(PRINCIPAL_KEY) if request is not None else None
    return principal if isinstance(principal, Principal) else None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> list[str]:
    """``Host`` values to accept: each name alone and with any port."""
    names = [f"[{host}]" if ":" in host else host, *extra]
    if _is_loopback(host):
        names.extend(_LOOPBACK_NAMES)
    unique = list(dict.fromkeys(names))
    return [form for name in unique for form in (name, f"{name}:*")]


class McpEndpoint:
    """The ``/mcp`` route and the session manager it needs running while the server serves."""

    def __init__(self, services: Services, *, hosts: Iterable[str]) -> None:
        accepted = list(hosts)
        origins = [f"{scheme}://{host}" for host in accepted for scheme in ("http", "https")]
        self._manager = StreamableHTTPSessionManager(
            app=build_server(services, caller=_from_request),
            stateless=True,
            json_response=True,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=accepted,
                allowed_origins=origins,
            ),
        )

    def route(self) -> Route:
        return Route(PATH, endpoint=StreamableHTTPASGIApp(self._manager), name="mcp")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve requests (stateless: each in a task of the manager's group) until exit."""
        async with self._manager.run():
            yield
