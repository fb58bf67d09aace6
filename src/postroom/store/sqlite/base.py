"""The statement helpers every group of SQLite statements builds on, and the two kinds of
connection they run on.

Statements run on the event loop's own thread (:class:`InlineConnection`): in WAL mode with
``synchronous=NORMAL`` an indexed statement takes microseconds, less than the hop to a worker
thread and back, and a transaction that never waits for another thread holds its lock for the
least possible time — the difference between a few hundred and a few thousand messages per
second under concurrent load. What may take milliseconds — migrations that wait for another
process's lock, WAL checkpoints that sync the file — runs on a worker thread
(:class:`ThreadedConnection`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import aiosqlite

from postroom.core.errors import InvalidInput

__all__ = [
    "Connection",
    "InlineConnection",
    "Statements",
    "ThreadedConnection",
    "base64_bytes",
    "sha256",
    "sha256_hex",
    "token_bound",
]

BUSY_TIMEOUT_MS = 10_000


class Connection(Protocol):
    """What statements need from a connection."""

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]: ...

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> int: ...

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...

    async def close(self) -> None: ...


def _pragmas(busy_timeout_ms: int) -> tuple[str, ...]:
    return (
        f"PRAGMA busy_timeout = {busy_timeout_ms}",
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = NORMAL",
        "PRAGMA foreign_keys = ON",
        # Statement journals (what undoes one savepoint of a group commit) and temporary
        # b-trees stay in memory: on disk each group's journal opened, wrote and deleted a
        # temporary file, which tripled the cost of a message insert.
        "PRAGMA temp_store = MEMORY",
    )


def sha256(text: str | None) -> bytes | None:
    """The SHA-256 of *text*'s UTF-8 bytes: how stored parts are addressed by their content."""
    return None if text is None else hashlib.sha256(text.encode("utf-8")).digest()


def sha256_hex(data: bytes | None) -> str | None:
    """The hex SHA-256 of *data*: how a blob (an attachment's bytes) is addressed."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def base64_bytes(text: str | None) -> bytes | None:
    """*text* decoded from base64, or ``None`` when it is empty or not base64 (a migration
    moving inline attachment data out of metadata keeps such an entry without its bytes)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return base64.b64decode(text, validate=True) or None
    except (binascii.Error, ValueError):
        return None


class ThreadedConnection:
    """An aiosqlite connection: every statement on its worker thread."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, path: Path) -> ThreadedConnection:
        # isolation_level=None: transactions are begun and ended explicitly, never implicitly.
        conn = await aiosqlite.connect(path, isolation_level=None)
        for pragma in _pragmas(BUSY_TIMEOUT_MS):
            await conn.execute(pragma)
        # Migrations that content-address stored text call it (SQLite has no hash function).
        await conn.create_function("sha256", 1, sha256, deterministic=True)
        await conn.create_function("sha256_hex", 1, sha256_hex, deterministic=True)
        await conn.create_function("base64_bytes", 1, base64_bytes, deterministic=True)
        return cls(conn)

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return list(await self._conn.execute_fetchall(sql, params))

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        cursor = await self._conn.execute(sql, params)
        try:
            return cursor.rowcount
        finally:
            await cursor.close()

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await self._conn.executemany(sql, rows)

    async def close(self) -> None:
        await self._conn.close()


class InlineConnection:
    """A plain sqlite3 connection used on the event loop's thread.

    It never waits on SQLite's busy handler (that would stall the loop while another process
    — the CLI — holds the write lock): :meth:`begin` retries ``BEGIN IMMEDIATE`` with
    asynchronous sleeps instead, for up to ``BUSY_TIMEOUT_MS``.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(
        cls, path: Path, *, busy_timeout_ms: int = 0, journal_size_limit: int = -1
    ) -> InlineConnection:
        conn = sqlite3.connect(path, isolation_level=None)
        for pragma in _pragmas(busy_timeout_ms):
            conn.execute(pragma)
        # Checkpoints copy the WAL into the database file and sync it: milliseconds that must
        # not be spent on the event loop. The store runs them on its maintenance thread.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        # When this connection starts the log over, it cuts a longer file down to this size.
        conn.execute(f"PRAGMA journal_size_limit = {int(journal_size_limit)}")
        return cls(conn)

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def set_trace_callback(self, trace: Callable[[str], None] | None) -> None:
        self._conn.set_trace_callback(trace)

    async def begin(self) -> None:
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.001
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self._conn.executemany(sql, rows)

    async def close(self) -> None:
        self._conn.close()


def token_bound(text: str) -> int:
    """At least as many tokens as any byte-level tokenizer finds in *text*: its UTF-8 bytes
    (a token is one byte or more). The compactor's own count — tiktoken's, or four characters a
    token without it — never exceeds it, so a total of these bounds at or under the threshold
    proves the exact count is too, without loading a tokenizer (PIPELINE §6)."""
    return len(text.encode("utf-8", "surrogatepass"))


class Statements:
    """Raw SQL on one connection, inside the transaction the store opened."""

    def __init__(self, conn: Connection, count_tokens: Callable[[str], int] = token_bound) -> None:
        self._conn = conn
        #: Bounds a row's tokens from above when it joins a conversation (once per row).
        self._count_tokens = count_tokens

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        try:
            return await self._conn.fetchall(sql, tuple(params))
        except (UnicodeEncodeError, OverflowError) as exc:
            raise _unstorable(exc) from exc

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _run(self, sql: str, params: Iterable[Any] = ()) -> int:
        try:
            return await self._conn.run(sql, tuple(params))
        except (UnicodeEncodeError, OverflowError) as exc:
            raise _unstorable(exc) from exc

    async def _many(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        try:
            await self._conn.run_many(sql, [tuple(r) for r in rows])
        except (UnicodeEncodeError, OverflowError) as exc:
            raise _unstorable(exc) from exc


def _unstorable(exc: UnicodeEncodeError | OverflowError) -> InvalidInput:
    """A parameter SQLite cannot hold — text with a lone surrogate (a JSON ``\\ud800`` escape
    or a command-line argument that is not UTF-8), an integer beyond 64 bits — is the client's
    input, refused before the statement runs (and the write transaction rolls back), not a
    server fault."""
    if isinstance(exc, UnicodeEncodeError):
        return InvalidInput("A text value is not valid Unicode (it holds a lone surrogate).")
    return InvalidInput("A number is out of range; integers must fit in 64 bits.")
