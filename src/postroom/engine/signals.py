"""In-process wake-ups and the live event bus.

Nothing on the hot path polls: storing a turn wakes a worker, writing the outbox wakes the
delivery loop, storing a message wakes the feed that publishes it. Each loop also wakes on a
slow backstop timer, which is how work written by another process (the CLI) is picked up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

__all__ = ["Event", "EventBus", "Signals", "Subscription", "Waker"]

log = structlog.get_logger(__name__)


class Waker:
    """A level-triggered wake-up: ``wake()`` any number of times, ``wait()`` returns once."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake-up or *timeout_s*; True if woken."""
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await self._event.wait()
        except TimeoutError:
            return False
        finally:
            self._event.clear()
        return True


@dataclass(frozen=True, slots=True)
class Event:
    """A live event: ``message`` (a stored message), ``delivery``, ``typing``."""

    kind: str
    data: dict[str, Any]


class Subscription:
    """One subscriber's queue. A subscriber that falls too far behind is closed (it re-reads
    the history to catch up), so a slow client can never hold memory or the publisher."""

    def __init__(
        self,
        bus: EventBus,
        maxsize: int,
        accept: Callable[[Event], bool] | None,
        kinds: frozenset[str] | None,
    ) -> None:
        self._bus = bus
        #: The event kinds this subscriber takes at all (``None``: every kind).
        self.kinds = kinds
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self._accept = accept
        self.lagged = False

    def offer(self, event: Event) -> None:
        if self.kinds is not None and event.kind not in self.kinds:
            return
        if self._accept is not None and not self._accept(event):
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagged = True
            self.close()

    def close(self) -> None:
        self._bus.unsubscribe(self)
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def with_keepalives(
        self, every_s: float, gone: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[Event | None]:
        """The events as they come, and ``None`` whenever none came for *every_s* (a stream
        sends a keep-alive then); ends once *gone* says the client left, or the bus closes."""
        events = self._events()
        while True:
            try:
                async with asyncio.timeout(every_s):
                    event = await anext(events)
            except TimeoutError:
                if await gone():
                    return
                yield None
                continue
            except StopAsyncIteration:
                return
            yield event

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            if self.lagged and self._queue.empty():
                return
            event = await self._queue.get()
            if event is None:
                return
            yield event


class EventBus:
    """Fan-out of live events to subscribers (SSE clients, web chats, channel typing)."""

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()

    def subscribe(
        self,
        *,
        maxsize: int = 1000,
        accept: Callable[[Event], bool] | None = None,
        kinds: frozenset[str] | None = None,
    ) -> Subscription:
        """*kinds* names the only event kinds wanted (``None``: all); *accept* filters further."""
        subscription = Subscription(self, maxsize, accept, kinds)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        event = Event(kind, data)
        for subscription in list(self._subscribers):
            subscription.offer(event)

    def wants(self, kind: str) -> bool:
        """Whether any subscriber takes events of *kind* (else they need not be built)."""
        return any(s.kinds is None or kind in s.kinds for s in self._subscribers)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)


@dataclass
class Signals:
    """The wake-ups and notifications components of one process share."""

    bus: EventBus = field(default_factory=EventBus)
    turns: Waker = field(default_factory=Waker)
    deliveries: Waker = field(default_factory=Waker)
    stored: Waker = field(default_factory=Waker)
    _cancel_hooks: list[Callable[[int], None]] = field(default_factory=list)

    def on_cancel(self, hook: Callable[[int], None]) -> None:
        self._cancel_hooks.append(hook)

    def cancel_turn(self, job_id: int) -> None:
        """A running turn was cancelled in the database; stop its work now."""
        for hook in self._cancel_hooks:
            hook(job_id)

    def typing(self, chat_jid: str, folder: str | None, active: bool) -> None:
        self.bus.publish("typing", {"chat_jid": chat_jid, "folder": folder, "active": active})
