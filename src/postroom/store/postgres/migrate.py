"""Numbered PostgreSQL migrations (``migrations/NNNN_name.sql``), applied in order, each in its
own transaction, under an advisory lock so nodes starting at once apply each exactly once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING

from postroom.store.sqlite.codec import to_iso
from postroom.store.sqlite.migrate import SchemaTooNew

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PgMigration", "apply_pg_migrations", "available_pg_migrations"]

_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
#: The advisory lock key migrations run under (any constant no other code uses).
MIGRATION_LOCK = 0x706F7374726F6F6D  # "postroom"


@dataclass(frozen=True, slots=True)
class PgMigration:
    version: int
    name: str
    sql: str


def available_pg_migrations() -> list[PgMigration]:
    folder = resources.files("postroom.store.postgres") / "migrations"
    found = [
        PgMigration(int(m.group(1)), m.group(2), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if (m := _NAME.fullmatch(entry.name))
    ]
    found.sort(key=lambda mig: mig.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise ValueError(f"PostgreSQL migration {expected:04d} is missing")
    return found


async def apply_pg_migrations(conn: asyncpg.Connection) -> int:
    """Bring the schema up to date; return the resulting version."""
    migrations = available_pg_migrations()
    latest = migrations[-1].version if migrations else 0
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute(
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
            async with conn.transaction():
                # A script of several statements runs as one simple query.
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    to_iso(datetime.now(UTC)),
                )
        return await _current_version(conn)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)


async def _current_version(conn: asyncpg.Connection) -> int:
    value = await conn.fetchval("SELECT MAX(version) FROM schema_migrations")
    return int(value) if value is not None else 0
