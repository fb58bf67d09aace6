"""Statements on messages and drops."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from postroom.core.decision import ReplyTarget
from postroom.core.messages import CONTEXT_TYPES, MessageType, StoredMessage
from postroom.store.protocol import PriorOutcome, TurnRow
from postroom.store.records import DropRecord, NewMessage
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import dump_json, from_iso, load_json, load_object, to_iso

__all__ = [
    "INSERT_MESSAGE",
    "MESSAGE_COLUMNS",
    "MessageStatements",
    "message_from_row",
    "message_values",
]

MESSAGE_COLUMNS = (
    "id, chat_jid, seq, sender, sender_name, content, timestamp, is_from_me, message_type, "
    "metadata, verb, topic, reply_to, platform_id, routed_to, observed, conversation_id, "
    "run_id, compacted"
)

#: The message columns qualified by the ``m`` alias, and how many there are.
_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in MESSAGE_COLUMNS.split(","))
_WIDTH = len(MESSAGE_COLUMNS.split(","))
#: Decoded context rows kept (about ten conversations' worth at ``context.max_messages`` 200):
#: bounded, so memory stays flat however many conversations go idle.
_DECODED_ROWS = 4096


#: A message row's columns, its seq last: the engine gives the seq's value (SQLite the next
#: number in a subquery, PostgreSQL one taken from its locked counter) and closes the list.
INSERT_MESSAGE = (
    "INSERT INTO messages (id, chat_jid, sender, sender_name, content, timestamp, "
    "is_from_me, message_type, metadata, verb, topic, reply_to, platform_id, routed_to, "
    "observed, conversation_id, run_id, decision, seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
)


def message_values(message: NewMessage) -> tuple[Any, ...]:
    """The values of :data:`INSERT_MESSAGE`'s columns but the seq, in order."""
    return (
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
    )


class MessageStatements(Statements):
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
        # By id, by platform id, or by the platform id of any chunk delivered for it in this
        # chat (a reply in a shared conversation, or to the second chunk of a long answer).
        row = await self._one(
            "SELECT message_type, is_from_me, routed_to, topic FROM messages "
            "WHERE chat_jid = ? AND id = ? "
            "UNION ALL "
            "SELECT message_type, is_from_me, routed_to, topic FROM messages "
            "WHERE chat_jid = ? AND platform_id = ? "
            "UNION ALL "
            "SELECT m.message_type, m.is_from_me, m.routed_to, m.topic FROM deliveries d "
            "JOIN messages m ON m.id = d.message_id AND m.chat_jid = d.message_chat_jid "
            "WHERE d.chat_jid = ? AND d.platform_message_id = ? "
            "LIMIT 1",
            (chat_jid, ref, chat_jid, ref, chat_jid, ref),
        )
        if row is None:
            return None
        return ReplyTarget(MessageType(row[0]), bool(row[1]), row[2], row[3] or "")

    async def insert_message(self, message: NewMessage) -> int:
        row = await self._one(
            INSERT_MESSAGE + "(SELECT COALESCE(MAX(seq), 0) + 1 FROM messages)) RETURNING seq",
            message_values(message),
        )
        await self._count_into_conversation(message)
        return int(row[0])

    async def _count_into_conversation(self, message: NewMessage) -> None:
        if message.conversation_id is not None:
            tokens = self._context_tokens(message.message_type, message.metadata, message.content)
            await self._add_tokens(message.conversation_id, tokens)

    def _context_tokens(
        self, message_type: MessageType, metadata: Mapping[str, Any], content: str
    ) -> int:
        """The estimate a row adds to its conversation: 0 unless it may enter a context."""
        if message_type not in CONTEXT_TYPES or metadata.get("command"):
            return 0
        return self._count_tokens(content)

    async def _add_tokens(self, conversation_id: int, tokens: int) -> None:
        # A negative estimate is unknown: it is counted in full when compaction next looks.
        if tokens:
            await self._run(
                "UPDATE conversations SET token_estimate = token_estimate + ? "
                "WHERE id = ? AND token_estimate >= 0",
                (tokens, conversation_id),
            )

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
            f"SELECT {MESSAGE_COLUMNS} FROM ("
            f"SELECT {MESSAGE_COLUMNS} FROM messages {clause} ORDER BY seq DESC LIMIT ?"
            ") AS newest ORDER BY seq",
            params,
        )
        return [message_from_row(row) for row in rows]

    async def get_messages_since(
        self, chat_jid: str | None, since_seq: int, *, limit: int = 500
    ) -> list[StoredMessage]:
        if chat_jid is None:
            rows = await self._all(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq > ? ORDER BY seq LIMIT ?",
                (since_seq, limit),
            )
        else:
            rows = await self._all(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_jid = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (chat_jid, since_seq, limit),
            )
        return [message_from_row(row) for row in rows]

    async def last_seq(self) -> int:
        row = await self._one("SELECT COALESCE(MAX(seq), 0) FROM messages")
        return int(row[0])

    async def several_senders(self, chat_jid: str, *, within: int) -> bool:
        # Bounded: a walk back along idx_messages_chat_seq, however long the chat is.
        row = await self._one(
            "SELECT COUNT(DISTINCT sender) > 1 FROM (SELECT sender FROM messages "
            "WHERE chat_jid = ? AND message_type = 'user' AND is_from_me = 0 "
            "ORDER BY seq DESC LIMIT ?) AS newest",
            (chat_jid, within),
        )
        return bool(row and row[0])

    async def conversation_messages(self, conversation_id: int, *, limit: int) -> list[TurnRow]:
        rows = await self._all(
            f"SELECT * FROM (SELECT {_M_COLUMNS}, jm.job_id, j.status FROM messages m "
            "LEFT JOIN job_messages jm ON jm.message_id = m.id AND jm.chat_jid = m.chat_jid "
            "LEFT JOIN jobs j ON j.id = jm.job_id "
            "WHERE m.conversation_id = ? "
            "AND m.message_type IN ('user', 'assistant', 'system', 'tool_result') "
            "AND m.compacted = 0 AND json_extract(m.metadata, '$.command') IS NULL "
            "ORDER BY m.seq DESC LIMIT ?) AS recent ORDER BY seq",
            (conversation_id, limit),
        )
        # Every turn reads the same rows again: each is decoded once while it stays unchanged.
        return [
            TurnRow(_decoded(tuple(row)[:_WIDTH]), row[_WIDTH], row[_WIDTH + 1]) for row in rows
        ]

    async def attach_observed(
        self,
        folder: str,
        chat_jid: str,
        conversation_id: int,
        *,
        max_messages: int,
        max_chars: int,
    ) -> int:
        rows = await self._all(
            "SELECT id, content, message_type, metadata FROM messages WHERE routed_to = ? "
            "AND chat_jid = ? AND observed = 1 AND conversation_id IS NULL AND skipped = 0 "
            "ORDER BY seq DESC",
            (folder, chat_jid),
        )
        if not rows:
            return 0
        taken: list[str] = []
        used = tokens = 0
        for message_id, content, message_type, metadata in rows:
            length = len(content or "")
            if len(taken) >= max_messages or used + length > max_chars:
                break
            taken.append(message_id)
            used += length
            tokens += self._context_tokens(
                MessageType(message_type), load_object(metadata), content or ""
            )
        left = [row[0] for row in rows[len(taken) :]]
        await self._many(
            "UPDATE messages SET conversation_id = ? WHERE id = ? AND chat_jid = ?",
            ((conversation_id, message_id, chat_jid) for message_id in taken),
        )
        await self._many(
            "UPDATE messages SET skipped = 1 WHERE id = ? AND chat_jid = ?",
            ((message_id, chat_jid) for message_id in left),
        )
        await self._add_tokens(conversation_id, tokens)
        return len(taken)

    async def get_message(self, message_id: str, chat_jid: str) -> StoredMessage | None:
        row = await self._one(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ? AND chat_jid = ?",
            (message_id, chat_jid),
        )
        return None if row is None else message_from_row(row)

    async def update_message(
        self, message_id: str, chat_jid: str, *, content: str, metadata: Mapping[str, Any]
    ) -> None:
        before = await self._one(
            "SELECT message_type, conversation_id, compacted FROM messages "
            "WHERE id = ? AND chat_jid = ?",
            (message_id, chat_jid),
        )
        if before is not None and before[1] is not None and not before[2]:
            # The new text's bound is added and the old one's not taken away: the total may
            # hold this row's exact count by now (the compactor corrects it), and taking its
            # bound away could leave the total under the count. The next count drops the excess.
            now = self._context_tokens(MessageType(before[0]), metadata, content)
            await self._add_tokens(before[1], now)
        await self._run(
            "UPDATE messages SET content = ?, metadata = ? WHERE id = ? AND chat_jid = ?",
            (content, dump_json(dict(metadata)), message_id, chat_jid),
        )

    async def set_platform_id(self, message_id: str, chat_jid: str, platform_id: str) -> None:
        await self._run(
            "UPDATE messages SET platform_id = ? WHERE id = ? AND chat_jid = ?",
            (platform_id, message_id, chat_jid),
        )

    async def insert_drop(self, drop: DropRecord) -> None:
        await self._run(
            "INSERT INTO drops (id, chat_jid, time, sender, verb, reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id, chat_jid) DO NOTHING",
            (drop.id, drop.chat_jid, to_iso(drop.time), drop.sender, drop.verb, drop.reason),
        )

    async def get_drop(self, message_id: str, chat_jid: str) -> DropRecord | None:
        r = await self._one(
            "SELECT id, chat_jid, time, sender, verb, reason FROM drops "
            "WHERE id = ? AND chat_jid = ?",
            (message_id, chat_jid),
        )
        return None if r is None else DropRecord(r[0], r[1], from_iso(r[2]), r[3], r[4], r[5])

    async def list_drops(self, *, limit: int) -> list[DropRecord]:
        rows = await self._all(
            "SELECT id, chat_jid, time, sender, verb, reason FROM ("
            "SELECT id, chat_jid, time, sender, verb, reason FROM drops "
            "ORDER BY time DESC LIMIT ?) AS newest ORDER BY time",
            (limit,),
        )
        return [DropRecord(r[0], r[1], from_iso(r[2]), r[3], r[4], r[5]) for r in rows]

    async def recent_inbound(self, *, limit: int) -> list[StoredMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_type = 'user' "
            "AND is_from_me = 0 ORDER BY seq DESC LIMIT ?",
            (limit,),
        )
        return [message_from_row(row) for row in rows]


def message_from_row(row: Any) -> StoredMessage:
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


@lru_cache(maxsize=_DECODED_ROWS)
def _decoded(columns: tuple[Any, ...]) -> StoredMessage:
    """A stored row as a message, remembered by all its columns: a row that changed in any
    column (an edit, compaction's mark) is a different key, so what comes back is always what
    decoding the row gives (a JSON decode and a timestamp parse saved per row and turn)."""
    return message_from_row(columns)
