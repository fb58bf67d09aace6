"""Running the enabled channel adapters: build them from ``[channels.<name>]``, route their
platforms' deliveries to them, start and stop them, pass typing signals, report their state.

An adapter package exposes ``build(section: Mapping[str, Any]) -> BaseChannel``, which
validates its own configuration (unknown keys are errors naming the key). Adapters and their
SDKs are imported only when enabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import structlog
from starlette.routing import BaseRoute

from postroom.channels.base import BaseChannel, ChannelContext
from postroom.channels.hook import disabled_routes
from postroom.config import Config
from postroom.core.errors import ConfigError
from postroom.core.jid import split_jid
from postroom.engine.clock import Clock, system_clock
from postroom.engine.delivery import SinkRouter
from postroom.engine.signals import Signals

__all__ = ["ADAPTERS", "ChannelHost", "build_channels", "enabled_channels"]

log = structlog.get_logger(__name__)

#: Adapter packages by channel name; ``http`` (outbound webhooks) and ``web`` are built in.
ADAPTERS: Mapping[str, str] = {
    "telegram": "postroom.channels.telegram",
    "discord": "postroom.channels.discord",
    "slack": "postroom.channels.slack",
    "whatsapp": "postroom.channels.whatsapp",
    "email": "postroom.channels.email",
    "matrix": "postroom.channels.matrix",
    "mastodon": "postroom.channels.mastodon",
    "hook": "postroom.channels.hook",
}


def enabled_channels(config: Config) -> list[str]:
    """The names of the adapters whose section says ``enabled = true`` (the hook channel
    whenever it has a section), without importing any SDK."""
    return [
        name
        for name, section in sorted(config.channels.items())
        if name in ADAPTERS
        and isinstance(section, Mapping)
        and section.get("enabled", name == "hook")
    ]


def build_channels(config: Config) -> list[BaseChannel]:
    """The enabled adapters, each validated."""
    channels: list[BaseChannel] = []
    for name in enabled_channels(config):
        section = config.channels[name]
        module = importlib.import_module(ADAPTERS[name])
        try:
            channels.append(module.build({k: v for k, v in section.items() if k != "enabled"}))
        except ConfigError as exc:
            raise ConfigError(f"[channels.{name}]: {exc}") from exc
    return channels


#: How long one adapter's probe may take before it counts as failed.
PROBE_TIMEOUT_S = 10.0


class ChannelHost:
    def __init__(
        self,
        channels: list[BaseChannel],
        *,
        signals: Signals,
        sinks: SinkRouter,
        clock: Clock = system_clock,
    ) -> None:
        self.channels = channels
        self._signals = signals
        self._clock = clock
        #: When each adapter last passed a probe (its credentials answered).
        self._probed: dict[str, datetime] = {}
        self._by_platform: dict[str, BaseChannel] = {}
        for channel in channels:
            for platform in channel.platforms:
                self._by_platform[platform] = channel
                sinks.register(platform, channel)
        self._typing: asyncio.Task[None] | None = None
        self._started: list[BaseChannel] = []

    @property
    def leased(self) -> list[BaseChannel]:
        """The started adapters that hold one connection per account (PIPELINE §9)."""
        return [channel for channel in self._started if channel.single_connection]

    def listening(self) -> list[str]:
        """The single-connection adapters receiving on this process now."""
        return [channel.name for channel in self.leased if channel.listening]

    def routes(self) -> list[BaseRoute]:
        routes = [route for channel in self.channels for route in channel.routes()]
        if not any(channel.name == "hook" for channel in self.channels):
            routes.extend(disabled_routes())
        return routes

    async def start(self, context: ChannelContext, *, listen: bool = True) -> None:
        """Start every adapter; with ``listen=False`` (nodes sharing a database) the
        single-connection ones only send until their lease is taken (:attr:`leased`)."""
        for channel in self.channels:
            try:
                await channel.start(context, listen=listen)
            except Exception as exc:  # one broken adapter must not keep the others down
                log.error("channel.start_failed", channel=channel.name, error=str(exc))
                continue
            self._started.append(channel)
        if self._by_platform:
            self._typing = asyncio.create_task(self._relay_typing(), name="channel-typing")

    async def stop(self) -> None:
        if self._typing is not None:
            self._typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._typing
        for channel in self.channels:
            try:
                await channel.stop()
            except Exception as exc:  # keep stopping the rest
                log.warning("channel.stop_failed", channel=channel.name, error=str(exc))
        self._started.clear()

    def status(self) -> list[dict[str, Any]]:
        out = []
        for channel in self.channels:
            status = channel.status().to_dict()
            probed = self._probed.get(channel.name)
            status["probed_at"] = probed.isoformat() if probed else None
            out.append(status)
        return out

    async def probe(self) -> None:
        """Check every adapter's credentials with one cheap call (as ``doctor`` does): a pass
        counts as a recent event for its health, a failure is recorded as its last error."""

        async def one(channel: BaseChannel) -> None:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    await channel.check()
            except Exception as exc:  # any failure of a probe is the channel's problem to show
                channel.failed(exc if str(exc) else f"probe failed ({type(exc).__name__})")
                return
            self._probed[channel.name] = self._clock()
            if channel.status().state == "error":
                channel.connected()

        await asyncio.gather(*(one(c) for c in self.channels))

    async def fetch_attachment(self, chat_jid: str, url: str, cap_bytes: int) -> bytes | None:
        """An attachment of a message in *chat_jid*, fetched by its platform's adapter."""
        channel = self._by_platform.get(split_jid(chat_jid)[0])
        if channel is None:
            return None
        return await channel.fetch_attachment(url, cap_bytes=cap_bytes)

    async def _relay_typing(self) -> None:
        subscription = self._signals.bus.subscribe(kinds=frozenset({"typing"}))
        try:
            async for event in subscription:
                chat_jid = str(event.data.get("chat_jid", ""))
                channel = self._by_platform.get(split_jid(chat_jid)[0])
                if channel is not None:
                    await channel.typing(chat_jid, bool(event.data.get("active")))
        finally:
            subscription.close()
