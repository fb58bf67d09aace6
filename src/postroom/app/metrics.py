"""Prometheus metrics of one server, in a registry of its own (no process-global state), and
the one-line traffic summary ``serve`` logs at info each minute instead of a line per event."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, fields

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from postroom.store.protocol import Store

__all__ = ["PrometheusMetrics", "Tally", "TrafficSummary"]

log = structlog.get_logger(__name__)

#: How often ``serve`` logs its traffic summary.
SUMMARY_EVERY_S = 60.0


@dataclass
class Tally:
    """What happened since the last summary."""

    messages: int = 0
    turns: int = 0
    deliveries: int = 0
    failures: int = 0

    def take(self) -> Tally:
        """These counts, and zero them."""
        taken = Tally(self.messages, self.turns, self.deliveries, self.failures)
        for field in fields(self):
            setattr(self, field.name, 0)
        return taken


class PrometheusMetrics:
    """Implements :class:`postroom.engine.metrics.Metrics` and renders ``/metrics``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.registry = CollectorRegistry()
        self._messages = Counter(
            "postroom_messages_in",
            "Inbound messages by routing action and layer.",
            ["action", "layer"],
            registry=self.registry,
        )
        self._deliveries = Counter(
            "postroom_deliveries",
            "Outbox deliveries by outcome (sent, retried, abandoned).",
            ["status"],
            registry=self.registry,
        )
        self._turns = Counter(
            "postroom_turns",
            "Finished turns by outcome (ok, error, cancelled).",
            ["outcome"],
            registry=self.registry,
        )
        self._run_seconds = Histogram(
            "postroom_run_seconds",
            "Model run latency.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        self._queue = Gauge(
            "postroom_queue_depth",
            "Turns by status (queued, running).",
            ["status"],
            registry=self.registry,
        )
        self._outbox = Gauge(
            "postroom_outbox_pending", "Deliveries waiting to be sent.", registry=self.registry
        )
        self.tally = Tally()

    def message_in(self, action: str, layer: str) -> None:
        self.tally.messages += 1
        self._messages.labels(action=action, layer=layer).inc()

    def delivery(self, status: str) -> None:
        if status == "sent":
            self.tally.deliveries += 1
        else:
            self.tally.failures += 1
        self._deliveries.labels(status=status).inc()

    def turn(self, outcome: str, duration_s: float | None) -> None:
        self.tally.turns += 1
        if outcome == "error":
            self.tally.failures += 1
        self._turns.labels(outcome=outcome).inc()
        if duration_s is not None:
            self._run_seconds.observe(duration_s)

    async def render(self) -> tuple[bytes, str]:
        async with self._store.read() as tx:
            counts = await tx.job_counts()
        self._queue.labels(status="queued").set(counts["queued"])
        self._queue.labels(status="running").set(counts["running"])
        self._outbox.set(counts["deliveries_pending"])
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class TrafficSummary:
    """Logs, each *every_s* (a minute), one line of what the server did in that time — and of
    the last part-minute at shutdown; nothing when idle."""

    def __init__(self, tally: Tally, *, every_s: float = SUMMARY_EVERY_S) -> None:
        self._tally = tally
        self._every_s = every_s
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        while not self._stopping.is_set():
            try:
                async with asyncio.timeout(self._every_s):
                    await self._stopping.wait()
            except TimeoutError:
                pass
            now = loop.time()
            self.log(now - began)
            began = now
        self.log(loop.time() - began)  # the last part-minute, at shutdown

    def log(self, elapsed_s: float) -> None:
        taken = self._tally.take()
        if taken == Tally():
            return
        log.info(
            "serve.summary",
            messages=taken.messages,
            turns=taken.turns,
            deliveries=taken.deliveries,
            failures=taken.failures,
            period_s=round(elapsed_s, 1),
        )
