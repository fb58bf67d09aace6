"""The statement helpers every group of SQLite statements builds on."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import aiosqlite

__all__ = ["Statements"]


class Statements:
    """Raw SQL on one connection, inside the transaction the store opened."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        return list(await self._conn.execute_fetchall(sql, tuple(params)))

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _run(self, sql: str, params: Iterable[Any] = ()) -> int:
        cursor = await self._conn.execute(sql, tuple(params))
        try:
            return cursor.rowcount
        finally:
            await cursor.close()

    async def _many(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        await self._conn.executemany(sql, [tuple(r) for r in rows])
