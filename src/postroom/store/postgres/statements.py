"""The statements that differ on PostgreSQL; every other one is the SQLite store's own
(``postroom.store.sqlite``), written in the SQL both engines speak.

What differs is what many processes on one database need: a claim skips rows another node
holds (``FOR UPDATE SKIP LOCKED``) and the database refuses a second running turn of a
conversation; a message's ``seq`` is taken under a lock held until commit, so seqs become
visible in order; a chat's oldest delivery is claimed for a while, so only one node sends it;
due tasks are locked by the node that enqueues them. Work other nodes should see at once is
announced with ``NOTIFY`` when the transaction commits, once per channel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from postroom.store.postgres.connection import PgConnection
from postroom.store.postgres.nodes import NodeStatements
from postroom.store.protocol import StoreTx
from postroom.store.records import (
    DeliveryRecord,
    JobRecord,
    MemoryFact,
    NewJob,
    NewMessage,
    TaskRecord,
    UsageRow,
)
from postroom.store.sqlite.access import AccessStatements
from postroom.store.sqlite.base import token_bound
from postroom.store.sqlite.blobs import BlobStatements
from postroom.store.sqlite.catalog import CatalogStatements
from postroom.store.sqlite.chats import ChatStatements
from postroom.store.sqlite.codec import to_iso
from postroom.store.sqlite.memory import MemoryStatements, fact_from_row, fts_words, usage_row
from postroom.store.sqlite.messages import INSERT_MESSAGE, MessageStatements, message_values
from postroom.store.sqlite.outbox import DELIVERY_COLUMNS, OutboxStatements, delivery_from_row
from postroom.store.sqlite.queue import JOB_COLUMNS, QueueStatements, job_from_row
from postroom.store.sqlite.runs import TASK_COLUMNS, RunStatements, task_from_row
from postroom.store.sqlite.secrets import SingleServerStatements
from postroom.store.sqlite.skills import SkillStatements
from postroom.store.sqlite.tokens import TokenStatements

__all__ = ["CHANNELS", "DELIVERY_CLAIM_S", "PgTx"]

#: The NOTIFY channels: turns became claimable, deliveries were written, messages were stored,
#: routes or folders changed.
CHANNELS = ("postroom_turns", "postroom_deliveries", "postroom_messages", "postroom_catalog")
#: How long a node holds a chat's oldest delivery while it sends it (a node that dies while
#: sending leaves it to another after this).
DELIVERY_CLAIM_S = 60.0


class PgTx(
    CatalogStatements,
    ChatStatements,
    MessageStatements,
    QueueStatements,
    OutboxStatements,
    RunStatements,
    MemoryStatements,
    TokenStatements,
    SkillStatements,
    BlobStatements,
    AccessStatements,
    NodeStatements,
    SingleServerStatements,
    StoreTx,
):
    """Every statement postroom runs, on the connection of one PostgreSQL transaction."""

    def __init__(
        self,
        conn: PgConnection,
        count_tokens: Callable[[str], int] = token_bound,
        *,
        node: str = "",
    ) -> None:
        super().__init__(conn, count_tokens)
        self._pg = conn
        #: The node this process is: it names the deliveries this node is sending.
        self._node = node
        #: The channels to notify when this transaction commits.
        self.notify: set[str] = set()

    # -- the catalog ------------------------------------------------------------------------
    async def bump_catalog_version(self) -> int:
        self.notify.add("postroom_catalog")
        return await super().bump_catalog_version()

    # -- messages -------------------------------------------------------------------------------
    async def insert_message(self, message: NewMessage) -> int:
        # The row lock on message_seq is held until this transaction ends: no other can take
        # a later seq and commit first, so a reader that has seen seq n has seen every seq < n.
        seq = await self._pg.raw.fetchval("UPDATE message_seq SET last = last + 1 RETURNING last")
        await self._run(INSERT_MESSAGE + "?)", (*message_values(message), seq))
        await self._count_into_conversation(message)
        self.notify.add("postroom_messages")
        return int(seq)

    async def new_conversation(
        self, folder: str, topic: str, chat_jid: str | None, *, now: datetime
    ) -> int:
        # Two nodes starting the same conversation at once: the second waits for the first
        # and uses its row instead of failing on the unique key.
        row = await self._one(
            "INSERT INTO conversations (folder, topic, chat_jid, generation, created_at) "
            "SELECT ?::text, ?::text, ?::text, COALESCE(MAX(generation), 0) + 1, ?::text "
            "FROM conversations WHERE folder = ? AND topic = ? "
            "AND COALESCE(chat_jid, '') = COALESCE(?::text, '') "
            "ON CONFLICT DO NOTHING RETURNING id",
            (folder, topic, chat_jid, to_iso(now), folder, topic, chat_jid),
        )
        if row is not None:
            return int(row[0])
        found = await self.find_conversation(folder, topic, chat_jid)
        assert found is not None
        return found

    # -- the turn queue ---------------------------------------------------------------------------
    async def insert_job(self, job: NewJob) -> int:
        self.notify.add("postroom_turns")
        return await super().insert_job(job)

    async def open_jobs(self, conversation_id: int, *, lock: bool = False) -> list[JobRecord]:
        if not lock:
            return await super().open_jobs(conversation_id)
        # The queued turns first, locked: the lock waits for a claim of one in progress, and
        # a turn that claim started is no longer queued, so no message joins it. The running
        # turns are read after, unlocked — their node's finish takes the seq lock first.
        queued = await self._all(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE conversation_id = ? AND status = 'queued' "
            "ORDER BY id FOR NO KEY UPDATE",
            (conversation_id,),
        )
        running = await self._all(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE conversation_id = ? AND status = 'running'",
            (conversation_id,),
        )
        return sorted((job_from_row(row) for row in [*queued, *running]), key=lambda j: j.id)

    async def claim_job(
        self, *, now: datetime, lease_until: datetime, owner: str, boot_id: str, token: str
    ) -> JobRecord | None:
        try:
            # A savepoint: losing the race for a conversation must not end the transaction.
            async with self._pg.raw.transaction():
                row = await self._one(
                    "UPDATE jobs SET status = 'running', lease_until = ?, lease_owner = ?, "
                    "lease_token = ?, boot_id = ?, started_at = ? "
                    "WHERE id = ("
                    "  SELECT q.id FROM jobs q WHERE q.status = 'queued' AND q.run_at <= ? "
                    "  AND NOT EXISTS (SELECT 1 FROM jobs r "
                    "    WHERE r.conversation_id = q.conversation_id AND r.status = 'running') "
                    # Only a conversation's first due turn (PIPELINE §2: first come first
                    # served): a turn another node is claiming is skipped (locked), and its
                    # conversation with it. Were a later turn taken instead, a rollback of that
                    # claim (a deadlock, a killed node) would let the later turn run first, and
                    # the earlier one would then find its messages already answered.
                    "  AND NOT EXISTS (SELECT 1 FROM jobs e "
                    "    WHERE e.conversation_id = q.conversation_id AND e.status = 'queued' "
                    "    AND e.run_at <= ? AND (e.priority, e.id) < (q.priority, q.id)) "
                    "  ORDER BY q.priority, q.id LIMIT 1 FOR UPDATE SKIP LOCKED"
                    f") RETURNING {JOB_COLUMNS}",
                    (
                        to_iso(lease_until),
                        owner,
                        token,
                        boot_id,
                        to_iso(now),
                        to_iso(now),
                        to_iso(now),
                    ),
                )
        except asyncpg.exceptions.UniqueViolationError:
            # Another node started a turn of this conversation a moment ago (the partial
            # unique index): this one waits for it; the claimer tries again when woken.
            return None
        if row is None:
            return None
        return await self._with_messages(job_from_row(row))

    async def finish_job(self, job_id: int, token: str, **kwargs: Any) -> bool:
        # The conversation's next turn may now be claimed.
        self.notify.add("postroom_turns")
        return await super().finish_job(job_id, token, **kwargs)

    async def retry_job_later(
        self, job_id: int, token: str, *, attempts: int, run_at: datetime, error: str
    ) -> bool:
        self.notify.add("postroom_turns")
        return await super().retry_job_later(
            job_id, token, attempts=attempts, run_at=run_at, error=error
        )

    async def release_lease(self, job_id: int, token: str) -> bool:
        self.notify.add("postroom_turns")
        return await super().release_lease(job_id, token)

    async def release_expired_leases(self, *, now: datetime) -> list[int]:
        released = await super().release_expired_leases(now=now)
        if released:
            self.notify.add("postroom_turns")
        return released

    async def release_previous_boot(self, *, owner: str, boot_id: str) -> list[int]:
        released = await super().release_previous_boot(owner=owner, boot_id=boot_id)
        if released:
            self.notify.add("postroom_turns")
        # What this node was sending when its previous process died is sent again now (a
        # platform may get a chunk twice around a kill, never lose one).
        if await self._run(
            "UPDATE deliveries SET claimed_until = NULL, claimed_by = NULL "
            "WHERE claimed_by = ? AND status = 'pending'",
            (owner,),
        ):
            self.notify.add("postroom_deliveries")
        return released

    async def cancel_job(self, job_id: int, *, now: datetime) -> JobRecord | None:
        self.notify.add("postroom_turns")
        return await super().cancel_job(job_id, now=now)

    async def requeue_job(self, job_id: int, *, now: datetime) -> JobRecord | None:
        self.notify.add("postroom_turns")
        return await super().requeue_job(job_id, now=now)

    # -- the outbox -------------------------------------------------------------------------------
    async def insert_deliveries(self, deliveries: Iterable[Any]) -> None:
        self.notify.add("postroom_deliveries")
        await super().insert_deliveries(deliveries)

    async def due_deliveries(self, *, now: datetime, limit: int) -> list[DeliveryRecord]:
        # Each chat's oldest pending row, if due and not held by a node sending it now.
        rows = await self._all(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id IN ("
            "  SELECT MIN(id) FROM deliveries WHERE status = 'pending' GROUP BY chat_jid"
            ") AND next_try <= ? AND (claimed_until IS NULL OR claimed_until < ?) "
            "ORDER BY id LIMIT ?",
            (to_iso(now), to_iso(now), limit),
        )
        return [delivery_from_row(row) for row in rows]

    async def claim_delivery(self, delivery_id: int, *, now: datetime) -> bool:
        # Held until it is sent, rescheduled or abandoned, or the claim runs out; a row
        # another node holds (or sent meanwhile) is not taken.
        return (
            await self._run(
                "UPDATE deliveries SET claimed_until = ?, claimed_by = ? WHERE id = ? "
                "AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < ?)",
                (
                    to_iso(now + timedelta(seconds=DELIVERY_CLAIM_S)),
                    self._node,
                    delivery_id,
                    to_iso(now),
                ),
            )
            == 1
        )

    async def mark_delivered(
        self, delivery_id: int, *, now: datetime, platform_message_id: str | None
    ) -> None:
        await super().mark_delivered(delivery_id, now=now, platform_message_id=platform_message_id)
        await self._unclaim(delivery_id)

    async def reschedule_delivery(
        self, delivery_id: int, *, attempts: int, next_try: datetime, error: str
    ) -> None:
        # next_try (the platform's retry_after included) is in the row: every node honours it.
        await super().reschedule_delivery(
            delivery_id, attempts=attempts, next_try=next_try, error=error
        )
        await self._unclaim(delivery_id)

    async def abandon_delivery(self, delivery_id: int, *, now: datetime, error: str) -> None:
        await super().abandon_delivery(delivery_id, now=now, error=error)
        await self._unclaim(delivery_id)

    async def _unclaim(self, delivery_id: int) -> None:
        await self._run(
            "UPDATE deliveries SET claimed_until = NULL, claimed_by = NULL WHERE id = ?",
            (delivery_id,),
        )
        self.notify.add("postroom_deliveries")

    # -- scheduled tasks --------------------------------------------------------------------------
    async def due_tasks(self, *, now: datetime) -> list[TaskRecord]:
        # Locked until this tick's transaction ends, and skipped by every other node's tick:
        # by then next_run has moved on, so a due run is enqueued by one node only.
        rows = await self._all(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE enabled = 1 AND next_run IS NOT NULL "
            "AND next_run <= ? ORDER BY next_run, id FOR UPDATE SKIP LOCKED",
            (to_iso(now),),
        )
        return [task_from_row(row) for row in rows]

    # -- memory and usage ----------------------------------------------------------------------
    async def search_facts(self, folder: str, query: str, *, limit: int) -> list[MemoryFact]:
        words = fts_words(query)
        if not words:
            return []
        rows = await self._all(
            "SELECT id, folder, category, fact, created_at FROM memory_facts, "
            "to_tsquery('english', ?) AS q WHERE folder = ? AND words @@ q "
            "ORDER BY ts_rank(words, q) DESC, id LIMIT ?",
            (" | ".join(_lexeme(word) for word in words), folder, limit),
        )
        return [fact_from_row(row) for row in rows]

    async def usage_summary(self, *, since: datetime | None = None) -> list[UsageRow]:
        rows = await self._all(
            "SELECT substr(started_at, 1, 10) AS day, folder, provider, model, COUNT(*), "
            "COALESCE(SUM((usage::jsonb ->> 'input_tokens')::bigint), 0), "
            "COALESCE(SUM((usage::jsonb ->> 'output_tokens')::bigint), 0), "
            "CASE WHEN bool_or(cost IS NULL AND "
            "(COALESCE((usage::jsonb ->> 'input_tokens')::bigint, 0) "
            "+ COALESCE((usage::jsonb ->> 'output_tokens')::bigint, 0)) > 0) THEN NULL "
            "ELSE COALESCE(SUM(cost), 0) END "
            "FROM runs WHERE started_at >= ? GROUP BY day, folder, provider, model "
            "ORDER BY day, folder, provider, model",
            (to_iso(since) if since else "",),
        )
        return [usage_row(r) for r in rows]


def _lexeme(word: str) -> str:
    """A word as one quoted tsquery term (quotes doubled: no syntax from the query)."""
    return "'" + word.replace("'", "''").replace("\\", "\\\\") + "'"
