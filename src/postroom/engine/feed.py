"""The live feed: publishes every stored message on the event bus, in ``seq`` order.

It tails the messages table instead of trusting each writer to publish, so messages stored by
another process (``postroom send`` from the CLI) reach live clients too, and a subscriber sees
them in exactly the order of the history.
"""

from __future__ import annotations

import asyncio

import structlog

from postroom.engine.signals import Signals
from postroom.engine.views import message_to_dict
from postroom.store.protocol import Store

__all__ = ["MessageFeed"]

log = structlog.get_logger(__name__)


class MessageFeed:
    def __init__(self, *, store: Store, signals: Signals, backstop_s: float = 1.0) -> None:
        self._store = store
        self._signals = signals
        self._backstop_s = backstop_s
        self._cursor = 0
        self._stopping = asyncio.Event()

    @property
    def cursor(self) -> int:
        """The seq of the last message published."""
        return self._cursor

    async def start_at_end(self) -> None:
        async with self._store.read() as tx:
            latest = await tx.list_messages(limit=1)
        self._cursor = latest[-1].seq if latest else 0

    def stop(self) -> None:
        self._stopping.set()
        self._signals.stored.wake()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                if await self.publish_new():
                    continue
            except Exception:
                log.exception("feed.read_failed")  # the cursor stays: the next read resumes
            await self._signals.stored.wait(self._backstop_s)

    async def publish_new(self) -> int:
        async with self._store.read() as tx:
            # Checked inside the read, with no suspension before the query: a subscriber that
            # arrives after this check reads its history after these messages were stored.
            if not self._signals.bus.wants("message"):
                self._cursor = max(self._cursor, await tx.last_seq())
                return 0
            batch = await tx.get_messages_since(None, self._cursor, limit=500)
        for message in batch:
            self._signals.bus.publish("message", message_to_dict(message))
            self._cursor = message.seq
        return len(batch)
