"""The outbox as the operator sees it: failing and abandoned deliveries, and retrying one."""

from __future__ import annotations

from typing import Any

import structlog

from postroom.core.errors import Conflict, InvalidInput, NotFound
from postroom.engine.clock import Clock
from postroom.engine.signals import Signals
from postroom.store.protocol import Store
from postroom.store.records import DeliveryRecord

__all__ = ["DELIVERY_STATUSES", "DeliveryService"]

log = structlog.get_logger(__name__)

#: ``failed``: still pending, after at least one refused send.
DELIVERY_STATUSES = ("pending", "failed", "sent", "abandoned")


class DeliveryService:
    def __init__(self, *, store: Store, signals: Signals, clock: Clock) -> None:
        self._store = store
        self._signals = signals
        self._clock = clock

    async def list(self, *, status: Any = None, limit: int = 100) -> list[DeliveryRecord]:
        """Outbox rows, newest first, of one status (or every one)."""
        if status is not None and status not in DELIVERY_STATUSES:
            raise InvalidInput(
                f"Unknown delivery status {status!r}; use {', '.join(DELIVERY_STATUSES)}."
            )
        async with self._store.read() as tx:
            return await tx.list_deliveries(status=status, limit=limit, newest_first=True)

    async def retry(self, delivery_id: int, *, actor: str) -> DeliveryRecord:
        """Send an abandoned or failing row again now, with a fresh TTL."""
        async with self._store.write() as tx:
            retried = await tx.requeue_delivery(delivery_id, now=self._clock())
            if retried is None:
                found = await tx.get_delivery(delivery_id)
                if found is None:
                    raise NotFound(f"There is no delivery {delivery_id}.")
                raise Conflict(
                    f"Delivery {delivery_id} is {found.status}"
                    f"{'' if found.status == 'sent' else ' and has not failed'}; only a failed "
                    "or abandoned delivery can be retried."
                )
        self._signals.deliveries.wake()
        log.info("delivery.retried", delivery_id=delivery_id, actor=actor)
        return retried
