"""Numbered SQL migrations (``migrations/NNNN_name.sql``), applied in order, each in its own
transaction, under ``BEGIN IMMEDIATE`` so two processes starting at once cannot both apply one.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

from postroom.core.errors import PostroomError
from postroom.store.sqlite.base import Connection
from postroom.store.sqlite.codec import to_iso

__all__ = ["Migration", "SchemaTooNew", "apply_migrations", "available_migrations"]

_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


class SchemaTooNew(PostroomError):
    """The database was written by a newer postroom."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """Split the script into complete statements (triggers and strings kept whole)."""
        out: list[str] = []
        buffer = ""
        for line in self.sql.splitlines(keepends=True):
            buffer += line
            if sqlite3.complete_statement(buffer):
                statement = _strip_comments(buffer)
                if statement:
                    out.append(statement)
                buffer = ""
        if _strip_comments(buffer):
            raise ValueError(f"migration {self.version:04d} ends with an incomplete statement")
        return out


def _strip_comments(text: str) -> str:
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    return "\n".join(lines).strip()


def available_migrations() -> list[Migration]:
    folder = resources.files("postroom.store.sqlite") / "migrations"
    found: list[Migration] = []
    for entry in folder.iterdir():
        m = _NAME.fullmatch(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise ValueError(f"migration {expected:04d} is missing")
    return found


async def apply_migrations(conn: Connection) -> int:
    """Bring the schema up to date; return the resulting version."""
    migrations = available_migrations()
    latest = migrations[-1].version if migrations else 0
    await conn.run(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    current = await _current_version(conn)
    if current > latest:
        raise SchemaTooNew(
            f"The database is at schema version {current}, newer than this postroom knows "
            f"({latest}); upgrade postroom."
        )
    for migration in migrations:
        if migration.version <= current:
            continue
        await conn.run("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while we waited for the lock.
            if await _current_version(conn) >= migration.version:
                await conn.run("ROLLBACK")
                continue
            for statement in migration.statements():
                await conn.run(statement)
            await conn.run(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, to_iso(datetime.now(UTC))),
            )
            await conn.run("COMMIT")
        except BaseException:
            await conn.run("ROLLBACK")
            raise
    return await _current_version(conn)


async def _current_version(conn: Connection) -> int:
    rows = await conn.fetchall("SELECT MAX(version) FROM schema_migrations")
    value = rows[0][0] if rows else None
    return int(value) if value is not None else 0
