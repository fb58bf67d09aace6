"""The SQLite store: one file, WAL, ``synchronous=NORMAL``, foreign keys on.

Two connections: one for writes, serialized by an asyncio lock and opened with ``BEGIN
IMMEDIATE`` (so a transaction that will write takes the database lock up front instead of
failing to upgrade later when another process — the CLI — writes at the same time), and one
for reads, which in WAL mode never wait for the writer. Statements are raw SQL, grouped by what
they touch in the modules this class combines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

from postroom.store.protocol import StoreTx
from postroom.store.sqlite.catalog import CatalogStatements
from postroom.store.sqlite.chats import ChatStatements
from postroom.store.sqlite.messages import MessageStatements
from postroom.store.sqlite.migrate import apply_migrations
from postroom.store.sqlite.outbox import OutboxStatements
from postroom.store.sqlite.queue import QueueStatements
from postroom.store.sqlite.runs import RunStatements

__all__ = ["SqliteStore", "SqliteTx"]

BUSY_TIMEOUT_MS = 10_000


async def _connect(path: Path) -> aiosqlite.Connection:
    # isolation_level=None: transactions are begun and ended explicitly, never implicitly.
    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute("PRAGMA foreign_keys = ON")
    return conn


class SqliteTx(
    CatalogStatements,
    ChatStatements,
    MessageStatements,
    QueueStatements,
    OutboxStatements,
    RunStatements,
    StoreTx,
):
    """Every statement postroom runs, on the connection of one transaction."""


class SqliteStore:
    """A :class:`~postroom.store.protocol.Store` in one SQLite file."""

    def __init__(
        self, *, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection
    ) -> None:
        self.path = path
        self._writer = writer
        self._reader = reader
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(
        cls, path: Path | str, *, trace: Callable[[str], None] | None = None
    ) -> SqliteStore:
        """Open (creating if needed) the database at *path* and bring its schema up to date.

        *trace*, if given, receives every SQL statement the write connection runs (after
        migrations): a debugging aid, and how tests count transactions.
        """
        path = Path(path)
        writer = await _connect(path)
        try:
            await apply_migrations(writer)
            if trace is not None:
                await writer.set_trace_callback(trace)
            reader = await _connect(path)
        except BaseException:
            await writer.close()
            raise
        return cls(path=path, writer=writer, reader=reader)

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        async with self._write_lock, self._read_lock:
            await self._reader.close()
            await self._writer.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SqliteTx]:
        self._check_open()
        async with self._write_lock:
            await self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTx(self._writer)
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
            await self._writer.execute("COMMIT")

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SqliteTx]:
        self._check_open()
        async with self._read_lock:
            await self._reader.execute("BEGIN")
            try:
                yield SqliteTx(self._reader)
            finally:
                await self._reader.execute("ROLLBACK")
