"""The SQLite store: one file, WAL, ``synchronous=NORMAL``, foreign keys on.

Two connections: one for writes, serialized by an asyncio lock and opened with ``BEGIN
IMMEDIATE`` (so a transaction that will write takes the database lock up front instead of
failing to upgrade later when another process — the CLI — writes at the same time), and one
for reads, which in WAL mode never wait for the writer. Statements are raw SQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import aiosqlite

from postroom.core.decision import ChatState, Engagement, ReplyTarget
from postroom.core.folders import BusyPolicy, Folder, Role, Session
from postroom.core.messages import MessageType, StoredMessage
from postroom.store.protocol import PriorOutcome, StoreTx
from postroom.store.records import (
    DropRecord,
    NewMessage,
    RouteAuditRecord,
    RouteRecord,
    RouteSpec,
)
from postroom.store.sqlite.codec import dump_json, from_iso, load_json, load_object, to_iso
from postroom.store.sqlite.migrate import apply_migrations

__all__ = ["SqliteStore", "SqliteTx"]

BUSY_TIMEOUT_MS = 10_000

_MESSAGE_COLUMNS = (
    "id, chat_jid, seq, sender, sender_name, content, timestamp, is_from_me, message_type, "
    "metadata, verb, topic, reply_to, platform_id, routed_to, observed, conversation_id, "
    "run_id, compacted"
)
_FOLDER_COLUMNS = (
    "path, persona, provider, model, engagement_ttl_s, busy_policy, session, role, tools, "
    "mirror, inherits, created_at, created_by"
)


async def _connect(path: Path) -> aiosqlite.Connection:
    # isolation_level=None: transactions are begun and ended explicitly, never implicitly.
    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute("PRAGMA foreign_keys = ON")
    return conn


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


class SqliteTx(StoreTx):
    """Statements of one transaction on one connection."""

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

    # -- catalog ------------------------------------------------------------------------------
    async def catalog_version(self) -> int:
        row = await self._one("SELECT value FROM meta WHERE key = 'catalog_version'")
        return int(row[0]) if row else 0

    async def bump_catalog_version(self) -> int:
        row = await self._one(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
            "WHERE key = 'catalog_version' RETURNING value"
        )
        return int(row[0])

    async def list_routes(self) -> list[RouteRecord]:
        rows = await self._all(
            "SELECT id, seq, match, target, created_at, created_by FROM routes ORDER BY seq, id"
        )
        return [_route(row) for row in rows]

    async def get_route(self, route_id: int) -> RouteRecord | None:
        row = await self._one(
            "SELECT id, seq, match, target, created_at, created_by FROM routes WHERE id = ?",
            (route_id,),
        )
        return _route(row) if row else None

    async def insert_route(self, spec: RouteSpec, *, created_at: datetime, created_by: str) -> int:
        row = await self._one(
            "INSERT INTO routes (seq, match, target, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (spec.seq, spec.match, spec.target, to_iso(created_at), created_by),
        )
        return int(row[0])

    async def delete_routes(self, route_ids: Iterable[int]) -> None:
        await self._conn.executemany(
            "DELETE FROM routes WHERE id = ?", [(rid,) for rid in route_ids]
        )

    async def add_route_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        route_id: int | None,
        before: Any,
        after: Any,
    ) -> None:
        await self._run(
            "INSERT INTO route_audit (at, actor, action, route_id, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                to_iso(at),
                actor,
                action,
                route_id,
                None if before is None else dump_json(before),
                None if after is None else dump_json(after),
            ),
        )

    async def list_route_audit(self, *, limit: int) -> list[RouteAuditRecord]:
        rows = await self._all(
            "SELECT id, at, actor, action, route_id, before, after FROM route_audit "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [
            RouteAuditRecord(
                id=row[0],
                at=from_iso(row[1]),
                actor=row[2],
                action=row[3],
                route_id=row[4],
                before=load_json(row[5]),
                after=load_json(row[6]),
            )
            for row in rows
        ]

    async def list_folders(self) -> list[Folder]:
        rows = await self._all(f"SELECT {_FOLDER_COLUMNS} FROM folders ORDER BY path")
        return [_folder(row) for row in rows]

    async def get_folder(self, path: str) -> Folder | None:
        row = await self._one(f"SELECT {_FOLDER_COLUMNS} FROM folders WHERE path = ?", (path,))
        return _folder(row) if row else None

    async def insert_folder(self, folder: Folder) -> None:
        await self._run(
            "INSERT INTO folders (path, parent, persona, provider, model, engagement_ttl_s, "
            "busy_policy, session, role, tools, mirror, inherits, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                folder.path,
                folder.parent,
                folder.persona,
                folder.provider,
                folder.model,
                folder.engagement_ttl_s,
                _enum(folder.busy_policy),
                _enum(folder.session),
                _enum(folder.role),
                None if folder.tools is None else dump_json(list(folder.tools)),
                None if folder.mirror is None else dump_json(list(folder.mirror)),
                int(folder.inherits),
                to_iso(folder.created_at) if folder.created_at else to_iso(_now()),
                folder.created_by,
            ),
        )

    async def delete_folder(self, path: str) -> None:
        await self._run("DELETE FROM folders WHERE path = ?", (path,))

    # -- chats --------------------------------------------------------------------------------
    async def chat_state(self, chat_jid: str) -> ChatState:
        # One round trip: the chat row and its engagements (a chat has very few).
        rows = await self._all(
            "SELECT 'c', sticky_group, sticky_topic, NULL FROM chats WHERE chat_jid = ? "
            "UNION ALL "
            "SELECT 'e', topic, folder, until FROM engagements WHERE chat_jid = ?",
            (chat_jid, chat_jid),
        )
        sticky_group: str | None = None
        sticky_topic: str | None = None
        engagements: dict[str, Engagement] = {}
        for kind, a, b, c in rows:
            if kind == "c":
                sticky_group, sticky_topic = a, b
            else:
                engagements[a] = Engagement(b, from_iso(c))
        if sticky_group is None and sticky_topic is None and not engagements:
            return ChatState()
        return ChatState(sticky_group, sticky_topic, engagements)

    async def set_sticky_group(self, chat_jid: str, folder: str | None, *, now: datetime) -> None:
        await self._run(
            "INSERT INTO chats (chat_jid, sticky_group, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (chat_jid) DO UPDATE SET sticky_group = excluded.sticky_group, "
            "updated_at = excluded.updated_at",
            (chat_jid, folder, to_iso(now)),
        )

    async def set_sticky_topic(self, chat_jid: str, topic: str | None, *, now: datetime) -> None:
        await self._run(
            "INSERT INTO chats (chat_jid, sticky_topic, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (chat_jid) DO UPDATE SET sticky_topic = excluded.sticky_topic, "
            "updated_at = excluded.updated_at",
            (chat_jid, topic, to_iso(now)),
        )

    async def engage(self, chat_jid: str, topic: str, folder: str, until: datetime) -> None:
        await self._run(
            "INSERT INTO engagements (chat_jid, topic, folder, until) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (chat_jid, topic) DO UPDATE SET folder = excluded.folder, "
            "until = excluded.until",
            (chat_jid, topic, folder, to_iso(until)),
        )

    async def end_engagements(self, chat_jid: str) -> int:
        return await self._run("DELETE FROM engagements WHERE chat_jid = ?", (chat_jid,))

    async def claim_missing_notice(
        self, chat_jid: str, *, now: datetime, interval_s: float
    ) -> bool:
        row = await self._one("SELECT missing_notice_at FROM chats WHERE chat_jid = ?", (chat_jid,))
        if row and row[0] is not None:
            elapsed = (now - from_iso(row[0])).total_seconds()
            if elapsed < interval_s:
                return False
        await self._run(
            "INSERT INTO chats (chat_jid, missing_notice_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (chat_jid) DO UPDATE SET missing_notice_at = excluded.missing_notice_at",
            (chat_jid, to_iso(now), to_iso(now)),
        )
        return True

    async def new_conversation(
        self, folder: str, topic: str, chat_jid: str | None, *, now: datetime
    ) -> int:
        row = await self._one(
            "INSERT INTO conversations (folder, topic, chat_jid, generation, created_at) "
            "SELECT ?, ?, ?, COALESCE(MAX(generation), 0) + 1, ? FROM conversations "
            "WHERE folder = ? AND topic = ? AND COALESCE(chat_jid, '') = COALESCE(?, '') "
            "RETURNING id",
            (folder, topic, chat_jid, to_iso(now), folder, topic, chat_jid),
        )
        return int(row[0])

    # -- messages and drops ---------------------------------------------------------------------
    async def prior_outcome(self, message_id: str, chat_jid: str) -> PriorOutcome | None:
        row = await self._one(
            "SELECT seq, decision, NULL FROM messages WHERE id = ? AND chat_jid = ? "
            "UNION ALL SELECT NULL, NULL, reason FROM drops WHERE id = ? AND chat_jid = ? "
            "LIMIT 1",
            (message_id, chat_jid, message_id, chat_jid),
        )
        if row is None:
            return None
        decision = load_json(row[1])
        return PriorOutcome(row[0], decision if isinstance(decision, dict) else None, row[2])

    async def find_reply_target(self, chat_jid: str, ref: str) -> ReplyTarget | None:
        row = await self._one(
            "SELECT message_type, is_from_me, routed_to, topic FROM messages "
            "WHERE chat_jid = ? AND id = ? "
            "UNION ALL "
            "SELECT message_type, is_from_me, routed_to, topic FROM messages "
            "WHERE chat_jid = ? AND platform_id = ? "
            "LIMIT 1",
            (chat_jid, ref, chat_jid, ref),
        )
        if row is None:
            return None
        return ReplyTarget(MessageType(row[0]), bool(row[1]), row[2], row[3] or "")

    async def insert_message(self, message: NewMessage) -> int:
        row = await self._one(
            "INSERT INTO messages (id, chat_jid, sender, sender_name, content, timestamp, "
            "is_from_me, message_type, metadata, seq, verb, topic, reply_to, platform_id, "
            "routed_to, observed, conversation_id, run_id, decision) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "(SELECT COALESCE(MAX(seq), 0) + 1 FROM messages), ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "RETURNING seq",
            (
                message.id,
                message.chat_jid,
                message.sender,
                message.sender_name,
                message.content,
                to_iso(message.timestamp),
                int(message.is_from_me),
                message.message_type.value,
                dump_json(dict(message.metadata)),
                message.verb,
                message.topic,
                message.reply_to,
                message.platform_id,
                message.routed_to,
                int(message.observed),
                message.conversation_id,
                message.run_id,
                None if message.decision is None else dump_json(dict(message.decision)),
            ),
        )
        return int(row[0])

    async def list_messages(
        self,
        *,
        chat_jid: str | None = None,
        folder: str | None = None,
        after_seq: int | None = None,
        limit: int = 100,
    ) -> list[StoredMessage]:
        where: list[str] = []
        params: list[Any] = []
        if chat_jid is not None:
            where.append("chat_jid = ?")
            params.append(chat_jid)
        if folder is not None:
            where.append("routed_to = ?")
            params.append(folder)
        if after_seq is not None:
            where.append("seq > ?")
            params.append(after_seq)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        params.append(limit)
        rows = await self._all(
            f"SELECT {_MESSAGE_COLUMNS} FROM ("
            f"SELECT {_MESSAGE_COLUMNS} FROM messages {clause} ORDER BY seq DESC LIMIT ?"
            ") ORDER BY seq",
            params,
        )
        return [_message(row) for row in rows]

    async def insert_drop(self, drop: DropRecord) -> None:
        await self._run(
            "INSERT INTO drops (id, chat_jid, time, sender, verb, reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id, chat_jid) DO NOTHING",
            (drop.id, drop.chat_jid, to_iso(drop.time), drop.sender, drop.verb, drop.reason),
        )

    async def list_drops(self, *, limit: int) -> list[DropRecord]:
        rows = await self._all(
            "SELECT id, chat_jid, time, sender, verb, reason FROM ("
            "SELECT id, chat_jid, time, sender, verb, reason FROM drops "
            "ORDER BY time DESC LIMIT ?) ORDER BY time",
            (limit,),
        )
        return [DropRecord(r[0], r[1], from_iso(r[2]), r[3], r[4], r[5]) for r in rows]


def _now() -> datetime:
    return datetime.now().astimezone()


def _enum(value: Enum | None) -> Any:
    return None if value is None else value.value


def _route(row: Any) -> RouteRecord:
    return RouteRecord(row[0], row[1], row[2], row[3], from_iso(row[4]), row[5])


def _tuple_or_none(text: str | None) -> tuple[str, ...] | None:
    value = load_json(text)
    if value is None:
        return None
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _folder(row: Any) -> Folder:
    return Folder(
        path=row[0],
        persona=row[1],
        provider=row[2],
        model=row[3],
        engagement_ttl_s=row[4],
        busy_policy=BusyPolicy(row[5]) if row[5] else None,
        session=Session(row[6]) if row[6] else None,
        role=Role(row[7]) if row[7] else None,
        tools=_tuple_or_none(row[8]),
        mirror=_tuple_or_none(row[9]),
        inherits=bool(row[10]),
        created_at=from_iso(row[11]),
        created_by=row[12],
    )


def _message(row: Mapping[int, Any] | Any) -> StoredMessage:
    return StoredMessage(
        id=row[0],
        chat_jid=row[1],
        seq=row[2],
        sender=row[3] or "",
        sender_name=row[4] or "",
        content=row[5] or "",
        timestamp=from_iso(row[6]),
        is_from_me=bool(row[7]),
        message_type=MessageType(row[8]),
        metadata=load_object(row[9]),
        verb=row[10],
        topic=row[11],
        reply_to=row[12],
        platform_id=row[13],
        routed_to=row[14],
        observed=bool(row[15]),
        conversation_id=row[16],
        run_id=row[17],
        compacted=bool(row[18]),
    )
