"""Run records grow with new content only (PIPELINE §2): each distinct system prompt, rendered
message and tool list is stored once, and every run still reads back as its exact request —
also runs written before parts existed, once migrated."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from postroom.store import SqliteStore
from postroom.store.records import RunRecord
from postroom.store.sqlite.migrate import available_migrations

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TOOLS = [{"name": "memory_save", "description": "Save a fact.", "parameters": {"type": "object"}}]


def conversation(turns: int) -> list[RunRecord]:
    """The runs of one conversation: each turn's request holds the whole history so far."""
    runs: list[RunRecord] = []
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": f"question {turn} " + "é" * 500})
        runs.append(
            RunRecord(
                job_id=turn + 1,
                folder="main",
                conversation_id=1,
                provider="echo",
                model="echo",
                system="You are a helpful assistant.\n\n# Memory\n- likes tea",
                messages=list(history),
                tools=TOOLS,
                output_raw=f"answer {turn}",
                output=f"answer {turn}",
                usage={"input_tokens": 10, "output_tokens": 2},
                outcome="ok",
                started_at=T + timedelta(minutes=turn),
                finished_at=T + timedelta(minutes=turn, seconds=1),
            )
        )
        history.append({"role": "assistant", "content": f"answer {turn}"})
    return runs


def stored_bytes(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute(f"SELECT COALESCE(SUM(length(body)), 0) FROM {table}").fetchone()[0])


async def test_each_part_is_stored_once_and_every_run_reads_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "postroom.db"
    runs = conversation(40)
    async with await SqliteStore.open(path) as store:
        ids = []
        for run in runs:
            async with store.write() as tx:
                ids.append(await tx.insert_run(run))
        async with store.read() as tx:
            for run_id, run in zip(ids, runs, strict=True):
                assert await tx.get_run(run_id) == replace(run, id=run_id)
    # One system prompt, one tool list, and each message once (40 questions, 39 answers).
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM run_parts").fetchone() == (2 + 40 + 39,)
    unique = sum(len(m["content"].encode()) for m in runs[-1].messages)
    assert stored_bytes(path, "run_parts") < 1.2 * unique + 2_000


async def test_a_run_of_a_request_seen_before_adds_no_part(tmp_path: Path) -> None:
    run = conversation(3)[-1]
    async with await SqliteStore.open(tmp_path / "postroom.db") as store:
        async with store.write() as tx:
            first = await tx.insert_run(run)
        async with store.write() as tx:
            again = await tx.insert_run(replace(run, outcome="error", error="retried"))
        async with store.read() as tx:
            assert (await tx.get_run(again)) == replace(
                run, id=again, outcome="error", error="retried"
            )
            assert (await tx.get_run(first)) == replace(run, id=first)
    with sqlite3.connect(tmp_path / "postroom.db") as db:
        assert db.execute("SELECT count(*) FROM run_parts").fetchone() == (2 + 5,)


def old_database(path: Path) -> None:
    """A database at the schema before run parts, as the previous release left it."""
    parts = next(m for m in available_migrations() if m.name == "run_parts")
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TEXT NOT NULL)"
        )
        for migration in available_migrations():
            if migration.version >= parts.version:
                break
            for statement in migration.statements():
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                (migration.version, migration.name, T.isoformat()),
            )


async def test_runs_written_before_parts_existed_are_migrated_exactly(tmp_path: Path) -> None:
    path = tmp_path / "postroom.db"
    old_database(path)
    runs = conversation(5)
    with sqlite3.connect(path) as db:
        for run in runs:
            db.execute(
                "INSERT INTO runs (job_id, folder, conversation_id, provider, model, system, "
                "messages, tools, output_raw, output, usage, outcome, started_at, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.job_id,
                    run.folder,
                    run.conversation_id,
                    run.provider,
                    run.model,
                    run.system,
                    json.dumps(run.messages, ensure_ascii=False, separators=(",", ":")),
                    json.dumps(run.tools, ensure_ascii=False, separators=(",", ":")),
                    run.output_raw,
                    run.output,
                    json.dumps(run.usage),
                    run.outcome,
                    run.started_at.isoformat(),
                    run.finished_at.isoformat() if run.finished_at else None,
                ),
            )
    async with await SqliteStore.open(path) as store:
        async with store.read() as tx:
            for run_id, run in enumerate(runs, start=1):
                assert await tx.get_run(run_id) == replace(run, id=run_id)
        # New runs share the migrated parts.
        async with store.write() as tx:
            later = await tx.insert_run(runs[-1])
        async with store.read() as tx:
            assert await tx.get_run(later) == replace(runs[-1], id=later)
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        assert not columns & {"system", "messages", "tools"}
        assert db.execute("SELECT count(*) FROM run_parts").fetchone() == (2 + 5 + 4,)
