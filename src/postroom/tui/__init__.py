"""The terminal UI (``postroom chat``): a client of a running ``postroom serve``.

It talks to the server only over the ``/ws/tui`` WebSocket, authenticated with the API token,
and imports nothing of the server's but the pure domain (``postroom.core``).
"""

from __future__ import annotations

from postroom.tui.app import PostroomTUI
from postroom.tui.connection import Connection, LinkState, LinkStatus, auth_headers, socket_url

__all__ = [
    "Connection",
    "LinkState",
    "LinkStatus",
    "PostroomTUI",
    "auth_headers",
    "socket_url",
]
