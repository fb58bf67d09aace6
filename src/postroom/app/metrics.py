"""Prometheus metrics of one server, in a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from postroom.store.protocol import Store

__all__ = ["PrometheusMetrics"]


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

    def message_in(self, action: str, layer: str) -> None:
        self._messages.labels(action=action, layer=layer).inc()

    def delivery(self, status: str) -> None:
        self._deliveries.labels(status=status).inc()

    def turn(self, outcome: str, duration_s: float | None) -> None:
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
