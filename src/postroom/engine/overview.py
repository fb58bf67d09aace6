"""The figures of the dashboard's overview, read in one snapshot: the queue by status, what
failed, what was dropped, turns and cost of the last day."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from postroom.store.protocol import Store
from postroom.store.records import DeliveryRecord, JobRecord, JobStatus

__all__ = ["Overview", "read_overview"]

#: How many of each kind of trouble the overview lists (the pages list the rest).
SHOWN = 5
#: Counted up to this many; beyond it the overview says "1000+".
COUNT_CAP = 1000


@dataclass(frozen=True, slots=True)
class Overview:
    queue: dict[str, int]
    failed_jobs: list[JobRecord]
    failed_job_count: int
    abandoned: list[DeliveryRecord]
    abandoned_count: int
    failing_count: int
    drops_24h: int
    turns_24h: int
    cost_today: float
    unpriced_today: bool
    now: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "failed_jobs": self.failed_job_count,
            "abandoned_deliveries": self.abandoned_count,
            "failing_deliveries": self.failing_count,
            "drops_24h": self.drops_24h,
            "turns_24h": self.turns_24h,
            "cost_today": self.cost_today,
        }


async def read_overview(store: Store, *, now: datetime) -> Overview:
    """The overview's figures at *now*."""
    day_ago = now - timedelta(days=1)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    async with store.read() as tx:
        queue = {status.value: 0 for status in JobStatus}
        for status in JobStatus:
            queue[status.value] = len(await tx.list_jobs(status=status.value, limit=COUNT_CAP))
        failed = await tx.list_jobs(status=JobStatus.FAILED.value, limit=SHOWN)
        abandoned = await tx.list_deliveries(status="abandoned", limit=COUNT_CAP, newest_first=True)
        failing = await tx.list_deliveries(status="failed", limit=COUNT_CAP)
        drops = await tx.list_drops(limit=COUNT_CAP)
        last_day = await tx.usage_summary(since=day_ago)
        today = await tx.usage_summary(since=midnight)
    return Overview(
        queue=queue,
        failed_jobs=failed,
        failed_job_count=queue[JobStatus.FAILED.value],
        abandoned=abandoned[:SHOWN],
        abandoned_count=len(abandoned),
        failing_count=len(failing),
        drops_24h=sum(1 for d in drops if d.time >= day_ago),
        turns_24h=sum(row.runs for row in last_day),
        cost_today=sum(row.cost or 0.0 for row in today),
        unpriced_today=any(row.cost is None and row.runs for row in today),
        now=now,
    )
