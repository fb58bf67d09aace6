"""Statements on the outbox (PIPELINE §3): one row per (message, target chat, chunk).

A chat is served strictly in order: only its oldest pending row may be sent, so a chunk that
is waiting for a retry holds back everything after it in that chat (and nothing in others).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from postroom.store.records import DeliveryRecord, NewDelivery
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["DELIVERY_COLUMNS", "OutboxStatements", "delivery_from_row"]

DELIVERY_COLUMNS = (
    "id, message_id, message_chat_jid, chat_jid, chunk, chunks, content, kind, message_type, "
    "folder, topic, reply_to, engage, status, attempts, next_try, last_error, "
    "platform_message_id, created_at, sent_at"
)


class OutboxStatements(Statements):
    async def insert_deliveries(self, deliveries: Iterable[NewDelivery]) -> None:
        await self._many(
            "INSERT INTO deliveries (message_id, message_chat_jid, chat_jid, chunk, chunks, "
            "content, kind, message_type, folder, topic, reply_to, engage, next_try, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (message_id, message_chat_jid, chat_jid, chunk) DO NOTHING",
            (
                (
                    d.message_id,
                    d.message_chat_jid,
                    d.chat_jid,
                    d.chunk,
                    d.chunks,
                    d.content,
                    d.kind,
                    d.message_type,
                    d.folder,
                    d.topic,
                    d.reply_to,
                    int(d.engage),
                    to_iso(d.next_try),
                    to_iso(d.created_at),
                )
                for d in deliveries
            ),
        )

    async def due_deliveries(self, *, now: datetime, limit: int) -> list[DeliveryRecord]:
        rows = await self._all(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id IN ("
            "  SELECT MIN(id) FROM deliveries WHERE status = 'pending' GROUP BY chat_jid"
            ") AND next_try <= ? ORDER BY id LIMIT ?",
            (to_iso(now), limit),
        )
        return [delivery_from_row(row) for row in rows]

    async def mark_delivered(
        self, delivery_id: int, *, now: datetime, platform_message_id: str | None
    ) -> None:
        await self._run(
            "UPDATE deliveries SET status = 'sent', sent_at = ?, platform_message_id = ?, "
            "attempts = attempts + 1 WHERE id = ? AND status = 'pending'",
            (to_iso(now), platform_message_id, delivery_id),
        )

    async def reschedule_delivery(
        self, delivery_id: int, *, attempts: int, next_try: datetime, error: str
    ) -> None:
        await self._run(
            "UPDATE deliveries SET attempts = ?, next_try = ?, last_error = ? "
            "WHERE id = ? AND status = 'pending'",
            (attempts, to_iso(next_try), error, delivery_id),
        )

    async def abandon_delivery(self, delivery_id: int, *, now: datetime, error: str) -> None:
        await self._run(
            "UPDATE deliveries SET status = 'abandoned', sent_at = ?, last_error = ? "
            "WHERE id = ? AND status = 'pending'",
            (to_iso(now), error, delivery_id),
        )

    async def next_delivery_due(self, *, after: datetime | None = None) -> datetime | None:
        row = await self._one(
            "SELECT MIN(next_try) FROM deliveries WHERE status = 'pending' AND next_try > ?",
            (to_iso(after) if after is not None else "",),
        )
        return from_iso(row[0]) if row and row[0] else None

    async def list_deliveries(
        self,
        *,
        message_id: str | None = None,
        status: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[DeliveryRecord]:
        where: list[str] = []
        params: list[Any] = []
        if message_id is not None:
            where.append("message_id = ?")
            params.append(message_id)
        if status == "failed":  # still pending, after at least one refused send
            where.append("status = 'pending' AND last_error IS NOT NULL")
        elif status is not None:
            where.append("status = ?")
            params.append(status)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        order = "DESC" if newest_first else ""
        rows = await self._all(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries {clause} ORDER BY id {order} LIMIT ?",
            [*params, limit],
        )
        return [delivery_from_row(row) for row in rows]

    async def get_delivery(self, delivery_id: int) -> DeliveryRecord | None:
        row = await self._one(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id = ?", (delivery_id,)
        )
        return None if row is None else delivery_from_row(row)

    async def requeue_delivery(self, delivery_id: int, *, now: datetime) -> DeliveryRecord | None:
        # A fresh start: the TTL counts from now, the backoff from the first attempt again.
        row = await self._one(
            "UPDATE deliveries SET status = 'pending', attempts = 0, next_try = ?, "
            "created_at = ?, sent_at = NULL WHERE id = ? AND (status = 'abandoned' "
            f"OR (status = 'pending' AND last_error IS NOT NULL)) RETURNING {DELIVERY_COLUMNS}",
            (to_iso(now), to_iso(now), delivery_id),
        )
        return None if row is None else delivery_from_row(row)


def delivery_from_row(row: Any) -> DeliveryRecord:
    return DeliveryRecord(
        id=row[0],
        message_id=row[1],
        message_chat_jid=row[2],
        chat_jid=row[3],
        chunk=row[4],
        chunks=row[5],
        content=row[6],
        kind=row[7],
        message_type=row[8],
        folder=row[9],
        topic=row[10],
        reply_to=row[11],
        engage=bool(row[12]),
        status=row[13],
        attempts=row[14],
        next_try=from_iso(row[15]),
        last_error=row[16],
        platform_message_id=row[17],
        created_at=from_iso(row[18]),
        sent_at=from_iso(row[19]) if row[19] else None,
    )
