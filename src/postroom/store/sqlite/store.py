"""The SQLite store: one file, WAL, ``synchronous=NORMAL``, foreign keys on.

Three connections (see ``base`` for why two of them run on the event loop's thread): one for
writes, serialized by an asyncio lock and opened with ``BEGIN IMMEDIATE`` (so a transaction
that will write takes the database lock up front instead of failing to upgrade later when
another process — the CLI — writes at the same time); one for reads, which in WAL mode never
wait for the writer; and one on a worker thread for migrations and WAL checkpoints (``wal``
keeps the log bounded). Statements are raw SQL, grouped by what they touch in the modules this
class combines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from postroom.store.protocol import StoreTx
from postroom.store.sqlite.access import AccessStatements
from postroom.store.sqlite.base import InlineConnection, ThreadedConnection, token_bound
from postroom.store.sqlite.blobs import BlobStatements
from postroom.store.sqlite.catalog import CatalogStatements
from postroom.store.sqlite.chats import ChatStatements
from postroom.store.sqlite.memory import MemoryStatements
from postroom.store.sqlite.messages import MessageStatements
from postroom.store.sqlite.migrate import apply_migrations
from postroom.store.sqlite.outbox import OutboxStatements
from postroom.store.sqlite.queue import QueueStatements
from postroom.store.sqlite.runs import RunStatements
from postroom.store.sqlite.secrets import SingleServerStatements
from postroom.store.sqlite.skills import SkillStatements
from postroom.store.sqlite.tokens import TokenStatements
from postroom.store.sqlite.wal import Checkpoint, WalKeeper, WalLimits

__all__ = ["SqliteStore", "SqliteTx"]

#: A read in WAL mode waits only while another connection recovers the log: rare and short.
READ_BUSY_TIMEOUT_MS = 1_000


class SqliteTx(
    CatalogStatements,
    ChatStatements,
    MessageStatements,
    QueueStatements,
    OutboxStatements,
    RunStatements,
    MemoryStatements,
    TokenStatements,
    SingleServerStatements,
    AccessStatements,
    SkillStatements,
    BlobStatements,
    StoreTx,
):
    """Every statement postroom runs, on the connection of one transaction."""


class SqliteStore:
    """A :class:`~postroom.store.protocol.Store` in one SQLite file."""

    def __init__(
        self,
        *,
        path: Path,
        writer: InlineConnection,
        reader: InlineConnection,
        maintenance: ThreadedConnection,
        wal: WalLimits | None = None,
        page_size: int = 4096,
        count_tokens: Callable[[str], int] = token_bound,
    ) -> None:
        self.path = path
        self._count_tokens = count_tokens
        self._writer = writer
        self._reader = reader
        self._maintenance = maintenance
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()
        self._closed = False
        self.wal = WalKeeper(
            path=path,
            maintenance=maintenance,
            pause_writes=self._writes_paused,
            page_size=page_size,
            limits=wal or WalLimits(),
        )
        #: The open group of write transactions awaiting their shared commit (see write()).
        self._group: list[asyncio.Future[None]] | None = None
        #: The task that will commit the open group (held so it cannot be collected).
        self._committer: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        trace: Callable[[str], None] | None = None,
        wal: WalLimits | None = None,
        count_tokens: Callable[[str], int] = token_bound,
    ) -> SqliteStore:
        """Open (creating if needed) the database at *path* and bring its schema up to date.

        *trace*, if given, receives every SQL statement the write connection runs (after
        migrations): a debugging aid, and how tests count transactions. *wal* sets when the
        write-ahead log is checkpointed and truncated (see ``wal``). *count_tokens* bounds
        the tokens of a row from above as it joins a conversation (the compaction decision's
        total); it must never be below the count the compactor makes.
        """
        path = Path(path)
        limits = wal or WalLimits()
        _create_private(path)
        # Migrations run on the maintenance connection's thread: waiting for another process's
        # lock there never stalls the event loop.
        maintenance = await ThreadedConnection.open(path)
        try:
            await apply_migrations(maintenance)
            await _unknown_token_estimates(maintenance)
            # From now on it only checkpoints: waiting long for readers would hold up writers.
            await maintenance.run(f"PRAGMA busy_timeout = {int(limits.busy_ms)}")
            ((page_size,),) = await maintenance.fetchall("PRAGMA page_size")
            writer = InlineConnection.open(path, journal_size_limit=limits.truncate_bytes)
            reader = InlineConnection.open(path, busy_timeout_ms=READ_BUSY_TIMEOUT_MS)
        except BaseException:
            await maintenance.close()
            raise
        if trace is not None:
            writer.set_trace_callback(trace)
        return cls(
            path=path,
            writer=writer,
            reader=reader,
            maintenance=maintenance,
            wal=limits,
            page_size=int(page_size),
            count_tokens=count_tokens,
        )

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.wal.close()
        async with self._write_lock, self._read_lock:
            await self._commit_locked()
            await self._maintenance.close()
            await self._reader.close()
            await self._writer.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SqliteTx]:
        """One write transaction, committed (durably, in WAL) before the block's exit returns.

        Group commit: the transactions that run in the same turn of the event loop share one
        SQLite transaction, each inside its own savepoint, and one ``COMMIT`` at the start of
        the next turn. A failing transaction rolls back to its savepoint and leaves the others
        alone; a failing ``COMMIT`` fails every transaction of the group. Under load a
        ``COMMIT`` (tens of microseconds of WAL writing each) is shared by several messages.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        async with self._write_lock:
            if self._group is None:
                await self._writer.begin()
                self._group = []
                self._committer = loop.create_task(self._commit_group())
            group = self._group
            # The group's first transaction needs no savepoint: nothing else is in the SQLite
            # transaction yet, so undoing it is rolling that back. Under light load most groups
            # hold one transaction, and this saves two statements on each.
            savepoint = bool(group)
            if savepoint:
                await self._writer.run("SAVEPOINT tx")
            try:
                yield SqliteTx(self._writer, self._count_tokens)
            except BaseException:
                self._undo(group, savepoint=savepoint)
                raise
            if savepoint:
                await self._writer.run("RELEASE tx")
            committed = loop.create_future()
            group.append(committed)
        await committed

    def _undo(self, group: list[asyncio.Future[None]], *, savepoint: bool) -> None:
        """Roll back the failed transaction: to its savepoint, or all of the SQLite transaction
        when it was the group's first. If SQLite already rolled back the whole group (it does
        on some errors: full disk, I/O), fail the group's others too."""
        conn = self._writer.connection
        if conn.in_transaction and savepoint:
            conn.execute("ROLLBACK TO tx")
            conn.execute("RELEASE tx")
            return
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        lost = RuntimeError("the write transaction was rolled back by SQLite")
        for member in group:
            if not member.done():
                member.set_exception(lost)
        group.clear()
        self._group = None

    async def _commit_group(self) -> None:
        # Queued behind every transaction already waiting for the lock: they join the group.
        async with self._write_lock:
            await self._commit_locked()

    async def _commit_locked(self) -> None:
        group, self._group = self._group, None
        if group is None:
            return  # already committed by close(), or abandoned in _undo
        try:
            await self._writer.run("COMMIT")
        except BaseException as exc:
            if self._writer.connection.in_transaction:
                self._writer.connection.execute("ROLLBACK")
            for member in group:
                if not member.done():
                    member.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for member in group:
            if not member.done():
                member.set_result(None)
        if not self._closed:
            self.wal.committed()

    @asynccontextmanager
    async def _writes_paused(self) -> AsyncIterator[None]:
        """No write transaction of this store open, and none begins, inside the block: the open
        group is committed first; writers wait (asynchronously) for the block to end."""
        async with self._write_lock:
            await self._commit_locked()
            yield

    async def checkpoint(self, *, truncate: bool = False) -> Checkpoint:
        """Checkpoint the write-ahead log now (``truncate``: and empty it, pausing writes for
        as long as that takes); see ``wal``."""
        self._check_open()
        return await self.wal.checkpoint(truncate=truncate)

    def claim(self) -> AbstractAsyncContextManager[SqliteTx]:
        # One server per file (PIPELINE §2): no other process sends from this outbox.
        return self.read()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SqliteTx]:
        self._check_open()
        async with self._read_lock:
            await self._reader.run("BEGIN")
            try:
                yield SqliteTx(self._reader, self._count_tokens)
            finally:
                await self._reader.run("ROLLBACK")


def _create_private(path: Path) -> None:
    """Create a missing database file as 0600 before SQLite opens it: SQLite gives the WAL and
    shared-memory files the database file's mode, so all three are their owner's alone
    (INTERFACES §1). An existing file is left as it is; ``:memory:`` and URIs are not files."""
    if str(path) == ":memory:" or str(path).startswith("file:"):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


async def _unknown_token_estimates(conn: ThreadedConnection) -> None:
    """Conversations from before running token estimates were kept say -1 (unknown), once, so
    compaction counts their rows the first time it looks instead of trusting a zero."""
    if await conn.fetchall("SELECT 1 FROM meta WHERE key = 'token_estimates'"):
        return  # the common case: no write lock taken
    await conn.run("BEGIN IMMEDIATE")
    try:
        if await conn.run(
            "INSERT INTO meta (key, value) VALUES ('token_estimates', '1') "
            "ON CONFLICT (key) DO NOTHING"
        ):
            await conn.run("UPDATE conversations SET token_estimate = -1")
    except BaseException:
        await conn.run("ROLLBACK")
        raise
    await conn.run("COMMIT")
