"""The PostgreSQL store: many postroom processes (nodes) on one database (PIPELINE §9).

A pool of asyncpg connections: each write transaction takes one for its length (READ
COMMITTED, so a statement sees what other nodes committed before it ran), each read a
read-only REPEATABLE READ snapshot. The channels a write touched are notified in the
transaction itself, right before it commits — PostgreSQL delivers a NOTIFY only on commit —
and one more connection listens for them on behalf of the whole process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from urllib.parse import urlsplit

import asyncpg
import structlog

from postroom.core.errors import PostroomError
from postroom.store.postgres.connection import PgConnection
from postroom.store.postgres.migrate import apply_pg_migrations
from postroom.store.postgres.statements import CHANNELS, PgTx
from postroom.store.sqlite.base import token_bound

__all__ = ["PostgresStore", "is_postgres_url"]

log = structlog.get_logger(__name__)

Listener = Callable[[str], None]


def _session_settings(url: str) -> dict[str, str]:
    """The durability of SQLite's default (WAL, ``synchronous=NORMAL``): a commit survives
    the process being killed, not the machine losing power — and it does not wait for the
    disk, so the seq lock (see ``statements``) is held for microseconds, not a flush. A URL
    that says otherwise (``?synchronous_commit=on``) wins."""
    if "synchronous_commit=" in urlsplit(url).query:
        return {}
    return {"synchronous_commit": "off"}


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


class PostgresStore:
    """A :class:`~postroom.store.protocol.Store` in a PostgreSQL database."""

    def __init__(
        self,
        *,
        url: str,
        pool: asyncpg.Pool,
        own_backends: set[int],
        count_tokens: Callable[[str], int] = token_bound,
    ) -> None:
        self.url = url
        self._count_tokens = count_tokens
        self._pool = pool
        #: The server processes of this store's own connections: what this process commits
        #: already woke its loops, so its own notifications are not passed on again.
        self._own_backends = own_backends
        self._listeners: list[Listener] = []
        self._listen_conn: asyncpg.Connection | None = None
        self._closed = False
        self._trace: Callable[[str], None] | None = None
        #: Which node this process is (set by the server that owns the store).
        self.node = ""

    def set_trace_callback(self, trace: Callable[[str], None] | None) -> None:
        """Have *trace* receive every statement the store runs (a debugging aid, and how tests
        watch the queue being looked at)."""
        self._trace = trace

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int = 2,
        max_size: int = 16,
        count_tokens: Callable[[str], int] = token_bound,
    ) -> PostgresStore:
        """Connect to the database at *url* and bring its schema up to date; *count_tokens*
        bounds a row's tokens from above as it joins a conversation."""
        try:
            first = await asyncpg.connect(url)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise PostroomError(f"Could not connect to the PostgreSQL database: {exc}.") from exc
        try:
            await apply_pg_migrations(first)
        finally:
            await first.close()
        own: set[int] = set()

        async def remember(conn: asyncpg.Connection) -> None:
            own.add(conn.get_server_pid())

        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=remember,
            server_settings=_session_settings(url),
        )
        return cls(url=url, pool=pool, own_backends=own, count_tokens=count_tokens)

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listen_conn is not None:
            await self._listen_conn.close()
            self._listen_conn = None
        await self._pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")

    @asynccontextmanager
    async def write(self) -> AsyncIterator[PgTx]:
        """One write transaction, committed before the block's exit returns; the channels it
        touched are notified once each, in the same commit."""
        self._check_open()
        async with self._pool.acquire() as conn, conn.transaction():
            tx = PgTx(PgConnection(conn, self._trace), self._count_tokens, node=self.node)
            yield tx
            for channel in sorted(tx.notify):
                await conn.execute("SELECT pg_notify($1, '')", channel)

    def claim(self) -> AbstractAsyncContextManager[PgTx]:
        # Taking a chat's oldest delivery writes who holds it (see PgTx.due_deliveries).
        return self.write()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[PgTx]:
        self._check_open()
        async with (
            self._pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield PgTx(PgConnection(conn, self._trace), self._count_tokens, node=self.node)

    async def listen(self, listener: Listener) -> None:
        """Call *listener* with the channel's name whenever another transaction (of any
        node) notifies one of :data:`CHANNELS`."""
        self._check_open()
        self._listeners.append(listener)
        if self._listen_conn is not None:
            return
        conn = await asyncpg.connect(self.url)
        for channel in CHANNELS:
            await conn.add_listener(channel, self._notified)
        self._listen_conn = conn

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        if pid in self._own_backends:
            return
        for listener in list(self._listeners):
            try:
                listener(channel)
            except Exception:  # a listener's bug must not stop the wake-ups of the others
                log.exception("postgres.listener_failed", channel=channel)
