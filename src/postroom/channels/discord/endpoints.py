"""Where discord.py connects: Discord itself, or the ``base_url``/``gateway_url`` of the config.

discord.py has no per-client option for its endpoints: every REST request builds its URL from
the class attribute ``discord.http.Route.BASE`` and the first gateway connection uses
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``. Both are process-global, so they are
changed only when an override is configured (tests, self-hosted REST proxies and gateways),
only while the adapter runs, and put back when it stops. A process runs at most one Discord
adapter, so nothing else shares them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import yarl

from postroom.channels.discord._sdk import discord

__all__ = ["Endpoints"]


class Endpoints:
    def __init__(self, *, base_url: str | None, gateway_url: str | None) -> None:
        self._base_url = base_url
        self._gateway = yarl.URL(gateway_url) if gateway_url else None
        self._saved: list[tuple[str, yarl.URL]] = []

    @property
    def overridden(self) -> bool:
        return self._base_url is not None or self._gateway is not None

    def apply(self) -> None:
        """Point discord.py at the configured endpoints (a no-op without overrides)."""
        if not self.overridden:
            return
        websocket = discord.gateway.DiscordWebSocket
        self._saved.append((discord.http.Route.BASE, websocket.DEFAULT_GATEWAY))
        if self._base_url is not None:
            discord.http.Route.BASE = self._base_url
        if self._gateway is not None:
            websocket.DEFAULT_GATEWAY = self._gateway

    def restore(self) -> None:
        """Put back what :meth:`apply` replaced (calls nest: the last apply is undone first)."""
        if not self._saved:
            return
        base, gateway = self._saved.pop()
        discord.http.Route.BASE = base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        self.apply()
        try:
            yield
        finally:
            self.restore()
