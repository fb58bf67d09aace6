"""Statements on run records (their requests stored as shared parts) and scheduled tasks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from postroom.store.records import RunRecord, RunSummary, TaskRecord
from postroom.store.sqlite.base import Statements, sha256
from postroom.store.sqlite.codec import dump_json, from_iso, load_json, load_object, to_iso

__all__ = ["TASK_COLUMNS", "RunStatements", "task_from_row"]

_RUN_COLUMNS = (
    "id, job_id, folder, conversation_id, provider, model, account, parts, output_raw, output, "
    "usage, cost, duration_ms, outcome, error, started_at, finished_at, purpose, skills"
)
#: Rendered messages whose body and hash are remembered (bounded: flat in idle conversations).
_REMEMBERED_PARTS = 4096
#: Hashes looked up in one statement (SQLite allows 32,766 parameters; stay well below).
_LOOKUP_BATCH = 500
TASK_COLUMNS = (
    "id, folder, chat_jid, schedule, tz, prompt, enabled, next_run, last_run, last_status, "
    "created_at, created_by"
)
_TASK_CHANGES = {"enabled", "next_run", "last_run", "last_status"}


class RunStatements(Statements):
    async def insert_run(self, run: RunRecord) -> int:
        """Store a run; its system prompt, messages and tools as shared parts (see
        ``0004_run_parts.sql``), so a conversation's history is stored once, not at every turn."""
        bodies = [
            _addressed(run.system),
            *(_message_part(m) for m in run.messages),
            _addressed(dump_json(run.tools)),
        ]
        ids = await self._part_ids(bodies)
        parts = {"system": ids[0], "messages": ids[1:-1], "tools": ids[-1]}
        row = await self._one(
            "INSERT INTO runs (job_id, folder, conversation_id, provider, model, account, parts, "
            "output_raw, output, usage, cost, duration_ms, outcome, error, started_at, "
            "finished_at, purpose, skills) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                run.job_id,
                run.folder,
                run.conversation_id,
                run.provider,
                run.model,
                run.account,
                dump_json(parts),
                run.output_raw,
                run.output,
                None if run.usage is None else dump_json(run.usage),
                run.cost,
                run.duration_ms,
                run.outcome,
                run.error,
                to_iso(run.started_at),
                None if run.finished_at is None else to_iso(run.finished_at),
                run.purpose,
                dump_json(run.skills) if run.skills else None,
            ),
        )
        return int(row[0])

    async def get_run(self, run_id: int) -> RunRecord | None:
        row = await self._one(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        if row is None:
            return None
        parts = load_object(row[7])
        system_id, tools_id = int(parts.get("system", 0)), int(parts.get("tools", 0))
        message_ids = [int(i) for i in parts.get("messages", ())]
        bodies = await self._part_bodies([system_id, *message_ids, tools_id])
        system = bodies.get(system_id, "")
        tools = bodies.get(tools_id)
        return RunRecord(
            id=row[0],
            job_id=row[1],
            folder=row[2],
            conversation_id=row[3],
            provider=row[4],
            model=row[5],
            account=row[6],
            system=system,
            messages=[load_json(bodies[i]) for i in message_ids],
            tools=load_json(tools) or [],
            output_raw=row[8],
            output=row[9],
            usage=load_json(row[10]),
            cost=row[11],
            duration_ms=row[12],
            outcome=row[13],
            error=row[14],
            started_at=from_iso(row[15]),
            finished_at=from_iso(row[16]) if row[16] else None,
            purpose=row[17],
            skills=load_json(row[18]) or [],
        )

    async def list_runs(self, *, folder: str | None, limit: int) -> list[RunSummary]:
        where, params = ("WHERE folder = ? ", [folder]) if folder is not None else ("", [])
        rows = await self._all(
            "SELECT id, job_id, folder, provider, model, usage, cost, duration_ms, outcome, "
            f"error, started_at, purpose FROM runs {where}ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            RunSummary(
                id=row[0],
                job_id=row[1],
                folder=row[2],
                provider=row[3],
                model=row[4],
                usage=load_json(row[5]),
                cost=row[6],
                duration_ms=row[7],
                outcome=row[8],
                error=row[9],
                started_at=from_iso(row[10]),
                purpose=row[11],
            )
            for row in rows
        ]

    async def run_ids_for_jobs(self, job_ids: Iterable[int]) -> dict[int, list[int]]:
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        rows = await self._all(
            f"SELECT job_id, id FROM runs WHERE job_id IN ({marks}) ORDER BY id", ids
        )
        out: dict[int, list[int]] = {}
        for job_id, run_id in rows:
            out.setdefault(job_id, []).append(run_id)
        return out

    async def _part_ids(self, parts: list[tuple[str, bytes]]) -> list[int]:
        """The id of each body in ``run_parts`` (given with its hash), storing the ones not
        seen before."""
        known: dict[bytes, int] = {}
        distinct = list(dict.fromkeys(digest for _, digest in parts))
        for batch, marks in _batches(distinct):
            for part_id, digest in await self._all(
                f"SELECT id, sha256 FROM run_parts WHERE sha256 IN ({marks})", batch
            ):
                known[bytes(digest)] = int(part_id)
        ids: list[int] = []
        for body, digest in parts:
            if digest not in known:
                # ON CONFLICT: on a database shared by several processes another may store
                # the same part meanwhile; this waits for it and takes its row.
                row = await self._one(
                    "INSERT INTO run_parts (sha256, body) VALUES (?, ?) "
                    "ON CONFLICT (sha256) DO UPDATE SET body = excluded.body RETURNING id",
                    (digest, body),
                )
                known[digest] = int(row[0])
            ids.append(known[digest])
        return ids

    async def _part_bodies(self, ids: list[int]) -> dict[int, str]:
        bodies: dict[int, str] = {}
        for batch, marks in _batches(list(dict.fromkeys(ids))):
            for part_id, body in await self._all(
                f"SELECT id, body FROM run_parts WHERE id IN ({marks})", batch
            ):
                bodies[int(part_id)] = str(body)
        return bodies

    async def insert_task(self, task: TaskRecord) -> int:
        row = await self._one(
            "INSERT INTO tasks (folder, chat_jid, schedule, tz, prompt, enabled, next_run, "
            "last_run, last_status, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                task.folder,
                task.chat_jid,
                task.schedule,
                task.tz,
                task.prompt,
                int(task.enabled),
                _iso(task.next_run),
                _iso(task.last_run),
                task.last_status,
                to_iso(task.created_at),
                task.created_by,
            ),
        )
        return int(row[0])

    async def get_task(self, task_id: int) -> TaskRecord | None:
        row = await self._one(f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
        return None if row is None else task_from_row(row)

    async def list_tasks(self) -> list[TaskRecord]:
        return [
            task_from_row(r)
            for r in await self._all(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY id")
        ]

    async def update_task(self, task_id: int, **changes: Any) -> None:
        unknown = set(changes) - _TASK_CHANGES
        if unknown:
            raise ValueError(f"cannot change {sorted(unknown)} of a task")
        if not changes:
            return
        values = [
            int(v) if k == "enabled" else _iso(v) if isinstance(v, datetime) else v
            for k, v in changes.items()
        ]
        sets = ", ".join(f"{key} = ?" for key in changes)
        await self._run(f"UPDATE tasks SET {sets} WHERE id = ?", [*values, task_id])

    async def delete_task(self, task_id: int) -> bool:
        return await self._run("DELETE FROM tasks WHERE id = ?", (task_id,)) == 1

    async def due_tasks(self, *, now: datetime) -> list[TaskRecord]:
        rows = await self._all(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE enabled = 1 AND next_run IS NOT NULL "
            "AND next_run <= ? ORDER BY next_run, id",
            (to_iso(now),),
        )
        return [task_from_row(row) for row in rows]

    async def task_has_open_job(self, task_id: int) -> bool:
        row = await self._one(
            "SELECT 1 FROM jobs WHERE task_id = ? AND status IN ('queued', 'running') LIMIT 1",
            (task_id,),
        )
        return row is not None


def _addressed(body: str) -> tuple[str, bytes]:
    """*body* with the SHA-256 that addresses it in ``run_parts``."""
    digest = sha256(body)
    assert digest is not None
    return body, digest


def _message_part(message: Mapping[str, Any]) -> tuple[str, bytes]:
    """A rendered message's stored body and hash. A conversation's messages come back turn
    after turn unchanged, so a message of plain text fields (role, content, ...) is dumped and
    hashed once while it stays in memory; one with lists or numbers is dumped every time."""
    if all(type(value) is str for value in message.values()):
        return _text_part(tuple(message.items()))
    return _addressed(dump_json(message))


@lru_cache(maxsize=_REMEMBERED_PARTS)
def _text_part(fields: tuple[tuple[str, str], ...]) -> tuple[str, bytes]:
    return _addressed(dump_json(dict(fields)))


def _batches(values: Sequence[Any]) -> Iterator[tuple[Sequence[Any], str]]:
    """*values* in slices small enough for one ``IN (...)``, each with its placeholders."""
    for start in range(0, len(values), _LOOKUP_BATCH):
        batch = values[start : start + _LOOKUP_BATCH]
        yield batch, ", ".join("?" * len(batch))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else to_iso(value)


def task_from_row(row: Any) -> TaskRecord:
    return TaskRecord(
        id=row[0],
        folder=row[1],
        chat_jid=row[2],
        schedule=row[3],
        tz=row[4],
        prompt=row[5],
        enabled=bool(row[6]),
        next_run=from_iso(row[7]) if row[7] else None,
        last_run=from_iso(row[8]) if row[8] else None,
        last_status=row[9],
        created_at=from_iso(row[10]),
        created_by=row[11],
    )
