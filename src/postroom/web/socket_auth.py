"""How a WebSocket client presents the API token without putting it in the URL.

A URL ends up in access logs, proxies and browser history, so the token travels elsewhere:
``Authorization: Bearer <token>`` (clients that can set headers: the terminal UI), or — for a
script in a browser, whose WebSocket API cannot set headers — the subprotocol list
``["postroom", "postroom.token.<hex of the token's UTF-8>"]`` (hex: a subprotocol admits only
a few characters). The server selects ``postroom``, never echoing the token back. (The web
chat's operator needs neither: it rides on the dashboard's signed-in session.)
"""

from __future__ import annotations

from starlette.websockets import WebSocket

__all__ = ["SUBPROTOCOL", "TOKEN_PREFIX", "presented_token", "subprotocol"]

SUBPROTOCOL = "postroom"
TOKEN_PREFIX = "postroom.token."


def _offered(websocket: WebSocket) -> list[str]:
    return [str(p) for p in websocket.scope.get("subprotocols", [])]


def presented_token(websocket: WebSocket) -> str | None:
    """The token the client presented, ``None`` when it presented none (a malformed one is
    ``""``: presented, and wrong)."""
    header = websocket.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""
    for offered in _offered(websocket):
        if offered.startswith(TOKEN_PREFIX):
            try:
                return bytes.fromhex(offered.removeprefix(TOKEN_PREFIX)).decode("utf-8")
            except ValueError:
                return ""
    return None


def subprotocol(websocket: WebSocket) -> str | None:
    """What to accept the socket with: ``postroom`` when offered (a browser that offered
    subprotocols fails a connection accepted without one), else none."""
    return SUBPROTOCOL if SUBPROTOCOL in _offered(websocket) else None
