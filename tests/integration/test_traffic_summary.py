"""The one-line traffic summary ``serve`` logs at info instead of a line per event."""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.testing import capture_logs

from postroom.app.metrics import PrometheusMetrics, TrafficSummary
from postroom.store.sqlite import SqliteStore


async def test_the_summary_counts_a_minute_and_stays_quiet_when_idle(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "postroom.db") as store:
        metrics = PrometheusMetrics(store)
        summary = TrafficSummary(metrics.tally)
        for _ in range(3):
            metrics.message_in("fire", "route")
        metrics.turn("ok", 0.1)
        metrics.turn("error", None)
        metrics.delivery("sent")
        metrics.delivery("retried")
        with capture_logs() as logs:
            summary.log(60.0)
            summary.log(60.0)  # nothing happened since: no line
        assert logs == [
            {
                "event": "serve.summary",
                "log_level": "info",
                "messages": 3,
                "turns": 2,
                "deliveries": 1,
                "failures": 2,
                "period_s": 60.0,
            }
        ]


async def test_the_summary_task_ends_when_stopped(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "postroom.db") as store:
        metrics = PrometheusMetrics(store)
        summary = TrafficSummary(metrics.tally, every_s=3600)
        task = asyncio.create_task(summary.run(), name="summary")
        metrics.message_in("fire", "route")
        with capture_logs() as logs:
            summary.stop()
            await asyncio.wait_for(task, 10)
        assert [e["event"] for e in logs] == ["serve.summary"]  # what happened is not lost
