"""The delivery loop: sends outbox rows, once, in order per chat (PIPELINE §3).

For each chat only its oldest pending row is eligible, so chunks and messages arrive in the
order they were stored. Sends are pipelined: each chat has at most one send in flight, and up
to ``concurrency`` chats are served at once with no round barrier — a chat whose receiver is
slow holds only its own rows, and a finished send frees its slot for the next due row at once.
A failed send is retried after ``backoff_base × 2^n`` (or the platform's ``retry_after``), and
abandoned — with a host record in the chat's history — once it is older than the TTL, so a
restart never floods a chat with stale answers. Delivering an agent's reply renews the chat's
engagement (ROUTING §4).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from postroom.core.bounds import backoff_s, later
from postroom.core.errors import PostroomError
from postroom.core.folders import FolderDefaults
from postroom.core.jid import split_jid
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.health import DeliveryHealth
from postroom.engine.metrics import Metrics, NullMetrics
from postroom.engine.notices import host_message
from postroom.engine.signals import Signals
from postroom.store.protocol import Store
from postroom.store.records import DeliveryRecord

__all__ = [
    "DeliveryFailed",
    "DeliveryLoop",
    "DeliverySettings",
    "OutgoingChunk",
    "SendResult",
    "Sink",
    "SinkRouter",
    "delivery_to_dict",
]

log = structlog.get_logger(__name__)


class DeliveryFailed(PostroomError):
    """A send did not go through. ``retry_after`` (seconds) when the platform said when to come
    back; ``permanent`` when retrying cannot help (the chat is gone, the bot was removed)."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


@dataclass(frozen=True, slots=True)
class OutgoingChunk:
    """One chunk of one stored message for one chat: what a sink sends."""

    delivery_id: int
    message_id: str
    chat_jid: str
    chunk: int
    chunks: int
    content: str
    kind: str
    message_type: str
    folder: str | None
    topic: str
    reply_to: str | None
    #: 1 for the first try.
    attempt: int

    @classmethod
    def of(cls, record: DeliveryRecord) -> OutgoingChunk:
        return cls(
            delivery_id=record.id,
            message_id=record.message_id,
            chat_jid=record.chat_jid,
            chunk=record.chunk,
            chunks=record.chunks,
            content=record.content,
            kind=record.kind,
            message_type=record.message_type,
            folder=record.folder,
            topic=record.topic,
            reply_to=record.reply_to,
            attempt=record.attempts + 1,
        )


@dataclass(frozen=True, slots=True)
class SendResult:
    #: The platform's id for what it received (for threading and reply chains), if any.
    platform_message_id: str | None = None


class Sink(Protocol):
    """Something that can send one outbox row to its chat."""

    async def send(self, chunk: OutgoingChunk) -> SendResult: ...


class SinkRouter:
    """Which sink serves a chat: its platform's adapter, else its outbound webhook, else the
    event stream alone (publishing there counts as delivery)."""

    def __init__(self, *, fallback: Sink, by_platform: Mapping[str, Sink] | None = None) -> None:
        self._fallback = fallback
        self._by_platform = dict(by_platform or {})

    def register(self, platform: str, sink: Sink) -> None:
        self._by_platform[platform] = sink

    def for_chat(self, chat_jid: str) -> Sink:
        return self._by_platform.get(split_jid(chat_jid)[0], self._fallback)


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    backoff_base_s: float = 2.0
    ttl_s: float = 3600.0
    concurrency: int = 64
    batch: int = 64
    backstop_s: float = 1.0
    max_backoff_s: float = 300.0


def delivery_to_dict(delivery: OutgoingChunk) -> dict[str, object]:
    """The public shape of a delivery (the ``delivery`` event, the outbound webhook body)."""
    return {
        "id": delivery.message_id,
        "chat_jid": delivery.chat_jid,
        "topic": delivery.topic,
        "reply_to": delivery.reply_to,
        "folder": delivery.folder,
        "message_type": delivery.message_type,
        "content": delivery.content,
        "chunk": delivery.chunk,
        "chunks": delivery.chunks,
        "kind": delivery.kind,
    }


class DeliveryLoop:
    """Runs until stopped, sending whatever the outbox holds."""

    def __init__(
        self,
        *,
        store: Store,
        sinks: SinkRouter,
        catalog: Catalog,
        defaults: FolderDefaults,
        signals: Signals,
        clock: Clock,
        settings: DeliverySettings,
        on_sent: Callable[[DeliveryRecord], None] | None = None,
        metrics: Metrics | None = None,
        health: DeliveryHealth | None = None,
    ) -> None:
        self._metrics = metrics or NullMetrics()
        self._health = health
        self._store = store
        self._sinks = sinks
        self._catalog = catalog
        self._defaults = defaults
        self._signals = signals
        self._clock = clock
        self._settings = settings
        self._on_sent = on_sent
        self._stopping = asyncio.Event()
        #: The chat of every send in flight, and its task (one per chat: order is kept).
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        #: Choosing rows and marking their chats in flight is one step: a row read as due by
        #: two overlapping choices (the loop and a round at shutdown) would be sent twice.
        self._choosing = asyncio.Lock()
        #: A due row waited for a slot or for its chat's send: a finished send must wake the
        #: loop. Otherwise it need not, and a quiet server reads nothing after each send.
        self._held_back = False
        #: Rows whose send ended while rows were being chosen: a store whose read may yield
        #: could still show them pending, and they must not go out twice.
        self._ended_while_choosing: set[int] = set()
        self._limit = asyncio.Semaphore(settings.concurrency)
        #: Chats whose last send crashed (its row could not be marked): left alone until the
        #: loop's time (``loop.time()``) given, so a failing store is not hammered.
        self._resting: dict[str, float] = {}

    def stop(self) -> None:
        self._stopping.set()
        self._signals.deliveries.wake()

    async def run(self) -> None:
        """Send due rows as slots free up, until stopped; then wait for the sends in flight."""
        try:
            while not self._stopping.is_set():
                try:
                    wait = await self._dispatch()
                except Exception:
                    # A store error must not end delivery for the rest of the process's life.
                    log.exception("delivery.round_failed")
                    wait = self._settings.backstop_s
                await self._signals.deliveries.wait(wait)
        finally:
            await self._drain()

    async def deliver_due(self) -> bool:
        """Send one round of due rows (at most one per chat, none of a chat with a send in
        flight) and wait for those sends; True if there were any."""
        async with self._choosing:
            self._ended_while_choosing.clear()
            # On a database shared by several nodes, taking a chat's oldest row holds it for
            # this node until it is sent (PIPELINE §9).
            async with self._store.claim() as tx:
                now = self._clock()
                due = await tx.due_deliveries(now=now, limit=self._settings.batch)
                mine = [d for d in due if self._free(d) and await tx.claim_delivery(d.id, now=now)]
            started = [self._start(d) for d in mine]
        if started:
            await asyncio.gather(*started, return_exceptions=True)
        return bool(started)

    async def _dispatch(self) -> float:
        """Start a send for each due row whose chat is free, while slots are free; how long
        the loop may sleep before a row comes due (a finished send or new row wakes it)."""
        async with self._choosing:
            now = self._clock()
            free = self._settings.concurrency - len(self._in_flight)
            self._held_back = False
            self._ended_while_choosing.clear()
            # On a database shared by several nodes, a row this node sends is claimed for it
            # first (PIPELINE §9); the sends start once the claims are committed.
            mine: list[DeliveryRecord] = []
            async with self._store.claim() as tx:
                due: list[DeliveryRecord] = []
                if free > 0:
                    # The chats in flight still have their row pending: ask for them too.
                    due = await tx.due_deliveries(
                        now=now, limit=min(self._settings.batch, free) + len(self._in_flight)
                    )
                    for delivery in due:
                        if not self._free(delivery):
                            self._held_back = True
                        elif free > 0 and await tx.claim_delivery(delivery.id, now=now):
                            mine.append(delivery)
                            free -= 1
                upcoming = None if free <= 0 else await tx.next_delivery_due(after=now)
            for delivery in mine:
                self._start(delivery)
            if free <= 0:
                self._held_back = True
                return self._settings.backstop_s
        wait = self._settings.backstop_s
        if upcoming is not None:
            wait = min(wait, max((upcoming - now).total_seconds(), 0.0))
        if self._resting:
            soonest = min(self._resting.values()) - asyncio.get_running_loop().time()
            wait = min(wait, max(soonest, 0.0))
        return wait

    def _free(self, delivery: DeliveryRecord) -> bool:
        until = self._resting.get(delivery.chat_jid)
        if until is not None:
            if asyncio.get_running_loop().time() < until:
                return False
            del self._resting[delivery.chat_jid]
        return (
            delivery.chat_jid not in self._in_flight
            and delivery.id not in self._ended_while_choosing
        )

    def _start(self, delivery: DeliveryRecord) -> asyncio.Task[None]:
        task = asyncio.create_task(self._send(delivery), name=f"deliver-{delivery.id}")
        self._in_flight[delivery.chat_jid] = task
        task.add_done_callback(lambda done: self._finished(delivery, done))
        return task

    def _finished(self, delivery: DeliveryRecord, task: asyncio.Task[None]) -> None:
        if self._in_flight.get(delivery.chat_jid) is task:
            del self._in_flight[delivery.chat_jid]
        if self._choosing.locked():
            self._ended_while_choosing.add(delivery.id)
        crashed = not task.cancelled() and task.exception() is not None
        if crashed:
            # The row stays pending and is sent again (the same row: a sink's idempotency key
            # is made of it) once the chat has rested; the other chats go on meanwhile.
            log.error("delivery.send_crashed", delivery_id=delivery.id, exc_info=task.exception())
            rest_s = self._settings.backstop_s
            self._resting[delivery.chat_jid] = asyncio.get_running_loop().time() + rest_s
        # More of this message's chunks, or a row that waited: the loop has work now.
        if (
            self._held_back
            or crashed
            or self._choosing.locked()
            or delivery.chunk + 1 < delivery.chunks
        ):
            self._signals.deliveries.wake()

    async def _drain(self) -> None:
        if self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    async def _send(self, delivery: DeliveryRecord) -> None:
        async with self._limit:
            age_s = (self._clock() - delivery.created_at).total_seconds()
            if age_s > self._settings.ttl_s:
                # A restart after a long outage must not flood the chat with stale answers.
                last = f" (last error: {delivery.last_error})" if delivery.last_error else ""
                reason = f"not delivered within {self._settings.ttl_s:g} s{last}"
                await self._abandon(delivery, DeliveryFailed(reason))
                return
            sink = self._sinks.for_chat(delivery.chat_jid)
            try:
                result = await sink.send(OutgoingChunk.of(delivery))
            except DeliveryFailed as exc:
                await self._failed(delivery, exc)
                return
            except Exception as exc:  # an adapter bug must not stop the loop for every chat
                log.exception("delivery.sink_error", delivery_id=delivery.id)
                await self._failed(delivery, DeliveryFailed(f"{type(exc).__name__}: {exc}"))
                return
            await self._sent(delivery, result)

    async def _sent(self, delivery: DeliveryRecord, result: SendResult) -> None:
        now = self._clock()
        async with self._store.write() as tx:
            await tx.mark_delivered(
                delivery.id, now=now, platform_message_id=result.platform_message_id
            )
            if (
                result.platform_message_id
                and delivery.chunk == 0
                and delivery.chat_jid == delivery.message_chat_jid
            ):
                await tx.set_platform_id(
                    delivery.message_id, delivery.message_chat_jid, result.platform_message_id
                )
            if delivery.engage and delivery.folder:
                ttl_s = self._catalog.snapshot.settings(
                    delivery.folder, self._defaults
                ).engagement_ttl_s
                if ttl_s > 0:
                    await tx.engage(
                        delivery.chat_jid,
                        delivery.topic,
                        delivery.folder,
                        # Saturates: a stored TTL can never make a sent row fail to commit.
                        later(now, ttl_s),
                    )
        self._metrics.delivery("sent")
        if self._health is not None:
            self._health.sent(delivery.chat_jid)
        log.debug(
            "delivery.sent",
            delivery_id=delivery.id,
            message_id=delivery.message_id,
            chat_jid=delivery.chat_jid,
            chunk=delivery.chunk,
        )
        self._signals.bus.publish(
            "delivery", delivery_to_dict(OutgoingChunk.of(delivery)) | {"status": "sent"}
        )
        if self._on_sent is not None:
            self._on_sent(delivery)

    async def _failed(self, delivery: DeliveryRecord, error: DeliveryFailed) -> None:
        if error.permanent:
            await self._abandon(delivery, error)
            return
        now = self._clock()
        attempts = delivery.attempts + 1
        delay_s = error.retry_after
        if delay_s is None or not math.isfinite(delay_s):  # unsaid, or said unreadably
            delay_s = backoff_s(
                self._settings.backoff_base_s, attempts - 1, maximum_s=self._settings.max_backoff_s
            )
        # Never wait past the TTL: the row is then abandoned on its next turn (see _send).
        deadline = later(delivery.created_at, self._settings.ttl_s)
        next_try = min(later(now, delay_s), later(deadline, 1e-6))
        async with self._store.write() as tx:
            await tx.reschedule_delivery(
                delivery.id, attempts=attempts, next_try=next_try, error=str(error)
            )
        self._metrics.delivery("retried")
        if self._health is not None:
            self._health.failed(delivery.chat_jid, str(error))
        # The loop may be asleep past the new try.
        self._signals.deliveries.wake()
        log.warning(
            "delivery.failed",
            delivery_id=delivery.id,
            chat_jid=delivery.chat_jid,
            attempts=attempts,
            retry_in_s=(next_try - now).total_seconds(),
            error=str(error),
        )

    async def _abandon(self, delivery: DeliveryRecord, error: DeliveryFailed) -> None:
        now = self._clock()
        async with self._store.write() as tx:
            await tx.abandon_delivery(delivery.id, now=now, error=str(error))
            # A record in the chat's history, not a delivery: the chat cannot be reached.
            await tx.insert_message(
                host_message(
                    delivery.chat_jid,
                    f"⚠️ a message could not be delivered and was dropped: {error}",
                    clock=self._clock,
                    reply_to=delivery.message_id,
                    metadata={"source": "delivery_abandoned", "delivery_id": delivery.id},
                )
            )
        self._metrics.delivery("abandoned")
        if self._health is not None:
            self._health.failed(delivery.chat_jid, str(error))
        self._signals.stored.wake()
        log.warning(
            "delivery.abandoned",
            delivery_id=delivery.id,
            chat_jid=delivery.chat_jid,
            error=str(error),
        )
