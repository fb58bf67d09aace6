"""Statements on chats: sticky state, engagements, notices, conversations."""

from __future__ import annotations

from datetime import datetime

from postroom.core.decision import ChatState, Engagement
from postroom.store.records import ConversationRecord
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["ChatStatements"]


class ChatStatements(Statements):
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

    async def end_engagement(self, chat_jid: str, topic: str) -> int:
        return await self._run(
            "DELETE FROM engagements WHERE chat_jid = ? AND topic = ?", (chat_jid, topic)
        )

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

    async def current_conversation(
        self, folder: str, topic: str, chat_jid: str | None, *, now: datetime
    ) -> int:
        found = await self.find_conversation(folder, topic, chat_jid)
        if found is not None:
            return found
        return await self.new_conversation(folder, topic, chat_jid, now=now)

    async def find_conversation(self, folder: str, topic: str, chat_jid: str | None) -> int | None:
        row = await self._one(
            "SELECT id FROM conversations WHERE folder = ? AND topic = ? "
            "AND COALESCE(chat_jid, '') = COALESCE(?, '') ORDER BY generation DESC LIMIT 1",
            (folder, topic, chat_jid),
        )
        return None if row is None else int(row[0])

    async def get_conversation(self, conversation_id: int) -> ConversationRecord | None:
        row = await self._one(
            "SELECT id, folder, topic, chat_jid, generation, token_estimate FROM conversations "
            "WHERE id = ?",
            (conversation_id,),
        )
        if row is None:
            return None
        return ConversationRecord(row[0], row[1], row[2], row[3], row[4], row[5])
