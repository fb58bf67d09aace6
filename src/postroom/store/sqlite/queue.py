"""Statements on the turn queue (PIPELINE §2).

Claiming is one ``UPDATE … WHERE id = (SELECT …) RETURNING``: the most urgent due queued turn
whose conversation has no running turn becomes running under a fresh lease token. Every later
change to a running turn names that token, so a worker whose lease was taken away (it stalled,
the turn was requeued and claimed again) can never finish or fail a turn it no longer holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from postroom.store.records import JobKind, JobRecord, JobStatus, NewJob
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["JOB_COLUMNS", "QueueStatements", "job_from_row"]

JOB_COLUMNS = (
    "id, conversation_id, folder, chat_jid, topic, kind, task_id, priority, status, attempts, "
    "max_attempts, run_at, lease_until, lease_owner, lease_token, last_error, answer_id, "
    "created_at, started_at, finished_at, depth"
)


class QueueStatements(Statements):
    async def open_jobs(self, conversation_id: int, *, lock: bool = False) -> list[JobRecord]:
        # A write transaction holds the database's one write lock: nothing can claim meanwhile.
        rows = await self._all(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE conversation_id = ? "
            "AND status IN ('queued', 'running') ORDER BY id",
            (conversation_id,),
        )
        return [job_from_row(row) for row in rows]

    async def insert_job(self, job: NewJob) -> int:
        row = await self._one(
            "INSERT INTO jobs (conversation_id, folder, chat_jid, topic, kind, task_id, "
            "priority, max_attempts, run_at, created_at, depth) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                job.conversation_id,
                job.folder,
                job.chat_jid,
                job.topic,
                job.kind.value,
                job.task_id,
                job.priority,
                job.max_attempts,
                to_iso(job.run_at),
                to_iso(job.created_at),
                job.depth,
            ),
        )
        return int(row[0])

    async def attach_to_job(self, job_id: int, refs: Iterable[tuple[str, str]]) -> None:
        await self._many(
            "INSERT INTO job_messages (message_id, chat_jid, job_id) VALUES (?, ?, ?)",
            ((message_id, chat_jid, job_id) for message_id, chat_jid in refs),
        )

    async def move_job_messages(self, from_job: int, to_job: int) -> None:
        await self._run("UPDATE job_messages SET job_id = ? WHERE job_id = ?", (to_job, from_job))

    async def raise_job_priority(self, job_id: int, priority: int) -> None:
        await self._run(
            "UPDATE jobs SET priority = ? WHERE id = ? AND priority > ?",
            (priority, job_id, priority),
        )

    async def claim_job(
        self, *, now: datetime, lease_until: datetime, owner: str, boot_id: str, token: str
    ) -> JobRecord | None:
        row = await self._one(
            "UPDATE jobs SET status = 'running', lease_until = ?, lease_owner = ?, "
            "lease_token = ?, boot_id = ?, started_at = ? "
            "WHERE id = ("
            # INDEXED BY: walk the queue in claim order and stop at the first claimable
            # turn; left to itself the planner sorts every queued row on each claim.
            "  SELECT q.id FROM jobs q INDEXED BY idx_jobs_queued "
            "  WHERE q.status = 'queued' AND q.run_at <= ? "
            "  AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.conversation_id = q.conversation_id "
            "                  AND r.status = 'running') "
            "  ORDER BY q.priority, q.id LIMIT 1"
            f") RETURNING {JOB_COLUMNS}",
            (to_iso(lease_until), owner, token, boot_id, to_iso(now), to_iso(now)),
        )
        if row is None:
            return None
        return await self._with_messages(job_from_row(row))

    async def renew_lease(self, job_id: int, token: str, lease_until: datetime) -> bool:
        changed = await self._run(
            "UPDATE jobs SET lease_until = ? WHERE id = ? AND lease_token = ? "
            "AND status = 'running'",
            (to_iso(lease_until), job_id, token),
        )
        return changed == 1

    async def get_job(self, job_id: int) -> JobRecord | None:
        row = await self._one(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        if row is None:
            return None
        return await self._with_messages(job_from_row(row))

    async def job_for_message(self, message_id: str, chat_jid: str) -> JobRecord | None:
        row = await self._one(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ("
            "SELECT job_id FROM job_messages WHERE message_id = ? AND chat_jid = ?)",
            (message_id, chat_jid),
        )
        if row is None:
            return None
        return await self._with_messages(job_from_row(row))

    async def list_jobs(self, *, status: str | None, limit: int) -> list[JobRecord]:
        if status is None:
            rows = await self._all(
                f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id DESC LIMIT ?", (limit,)
            )
        else:
            rows = await self._all(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? ORDER BY id DESC LIMIT ?",
                (status, limit),
            )
        jobs = [job_from_row(row) for row in rows]
        if not jobs:
            return []
        refs: dict[int, list[tuple[str, str]]] = {}
        marks = ", ".join("?" for _ in jobs)
        for message_id, chat_jid, job_id in await self._all(
            f"SELECT message_id, chat_jid, job_id FROM job_messages WHERE job_id IN ({marks}) "
            "ORDER BY rowid",
            [job.id for job in jobs],
        ):
            refs.setdefault(job_id, []).append((message_id, chat_jid))
        return [_replace_messages(job, refs.get(job.id, [])) for job in jobs]

    async def finish_job(
        self,
        job_id: int,
        token: str,
        *,
        status: JobStatus,
        now: datetime,
        answer_id: str | None = None,
        error: str | None = None,
        attempts: int | None = None,
    ) -> bool:
        changed = await self._run(
            "UPDATE jobs SET status = ?, finished_at = ?, answer_id = COALESCE(?, answer_id), "
            "last_error = COALESCE(?, last_error), attempts = COALESCE(?, attempts), "
            "lease_until = NULL, lease_token = NULL "
            "WHERE id = ? AND lease_token = ? AND status = 'running'",
            (status.value, to_iso(now), answer_id, error, attempts, job_id, token),
        )
        return changed == 1

    async def retry_job_later(
        self, job_id: int, token: str, *, attempts: int, run_at: datetime, error: str
    ) -> bool:
        changed = await self._run(
            "UPDATE jobs SET status = 'queued', attempts = ?, run_at = ?, last_error = ?, "
            "lease_until = NULL, lease_token = NULL, lease_owner = NULL "
            "WHERE id = ? AND lease_token = ? AND status = 'running'",
            (attempts, to_iso(run_at), error, job_id, token),
        )
        return changed == 1

    async def release_lease(self, job_id: int, token: str) -> bool:
        changed = await self._run(
            "UPDATE jobs SET status = 'queued', lease_until = NULL, lease_token = NULL, "
            "lease_owner = NULL WHERE id = ? AND lease_token = ? AND status = 'running'",
            (job_id, token),
        )
        return changed == 1

    async def release_expired_leases(self, *, now: datetime) -> list[int]:
        rows = await self._all(
            "UPDATE jobs SET status = 'queued', lease_until = NULL, lease_token = NULL, "
            "lease_owner = NULL WHERE status = 'running' AND lease_until < ? RETURNING id",
            (to_iso(now),),
        )
        return [int(row[0]) for row in rows]

    async def release_previous_boot(self, *, owner: str, boot_id: str) -> list[int]:
        rows = await self._all(
            "UPDATE jobs SET status = 'queued', lease_until = NULL, lease_token = NULL, "
            "lease_owner = NULL WHERE status = 'running' AND lease_owner = ? "
            "AND COALESCE(boot_id, '') != ? RETURNING id",
            (owner, boot_id),
        )
        return [int(row[0]) for row in rows]

    async def cancel_job(self, job_id: int, *, now: datetime) -> JobRecord | None:
        row = await self._one(
            "UPDATE jobs SET status = 'cancelled', finished_at = ?, lease_until = NULL, "
            "lease_token = NULL WHERE id = ? AND status IN ('queued', 'running') "
            f"RETURNING {JOB_COLUMNS}",
            (to_iso(now), job_id),
        )
        return None if row is None else await self._with_messages(job_from_row(row))

    async def requeue_job(self, job_id: int, *, now: datetime) -> JobRecord | None:
        row = await self._one(
            "UPDATE jobs SET status = 'queued', attempts = 0, run_at = ?, finished_at = NULL, "
            "last_error = NULL WHERE id = ? AND status IN ('failed', 'cancelled') "
            f"RETURNING {JOB_COLUMNS}",
            (to_iso(now), job_id),
        )
        return None if row is None else await self._with_messages(job_from_row(row))

    async def next_job_due(self) -> datetime | None:
        # A turn whose conversation has one running is left out: it becomes claimable when
        # that one ends (which wakes the claimer), whatever its run_at says.
        row = await self._one(
            "SELECT MIN(q.run_at) FROM jobs q WHERE q.status = 'queued' "
            "AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.conversation_id = q.conversation_id "
            "                AND r.status = 'running')"
        )
        return from_iso(row[0]) if row and row[0] else None

    async def job_counts(self) -> dict[str, int]:
        rows = await self._all(
            "SELECT status, COUNT(*) FROM jobs WHERE status IN ('queued', 'running') "
            "GROUP BY status UNION ALL "
            "SELECT 'deliveries_pending', COUNT(*) FROM deliveries WHERE status = 'pending'"
        )
        counts = {"queued": 0, "running": 0, "deliveries_pending": 0}
        counts.update({str(name): int(count) for name, count in rows})
        return counts

    async def queue_position(self, conversation_id: int) -> tuple[str, int] | None:
        rows = await self._all(
            "SELECT id, status, priority FROM jobs WHERE conversation_id = ? "
            "AND status IN ('queued', 'running') ORDER BY id",
            (conversation_id,),
        )
        if not rows:
            return None
        if any(row[1] == "running" for row in rows):
            return ("running", 0)
        job_id, _, priority = rows[0]
        ahead = await self._one(
            "SELECT COUNT(*) FROM jobs WHERE status = 'queued' "
            "AND (priority < ? OR (priority = ? AND id < ?))",
            (priority, priority, job_id),
        )
        return ("queued", int(ahead[0]))

    async def _with_messages(self, job: JobRecord) -> JobRecord:
        rows = await self._all(
            "SELECT message_id, chat_jid FROM job_messages WHERE job_id = ? ORDER BY rowid",
            (job.id,),
        )
        return _replace_messages(job, [(row[0], row[1]) for row in rows])


def _replace_messages(job: JobRecord, refs: list[tuple[str, str]]) -> JobRecord:
    return replace(job, messages=tuple(refs))


def _opt_time(value: Any) -> datetime | None:
    return from_iso(value) if value else None


def job_from_row(row: Any) -> JobRecord:
    return JobRecord(
        id=row[0],
        conversation_id=row[1],
        folder=row[2],
        chat_jid=row[3],
        topic=row[4],
        kind=JobKind(row[5]),
        task_id=row[6],
        priority=row[7],
        status=JobStatus(row[8]),
        attempts=row[9],
        max_attempts=row[10],
        run_at=from_iso(row[11]),
        lease_until=_opt_time(row[12]),
        lease_owner=row[13],
        lease_token=row[14],
        last_error=row[15],
        answer_id=row[16],
        created_at=from_iso(row[17]),
        started_at=_opt_time(row[18]),
        finished_at=_opt_time(row[19]),
        depth=row[20],
    )
