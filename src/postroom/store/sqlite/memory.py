"""Statements on memory facts (with FTS5 search), folder state, compactions and usage."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from postroom.core.messages import StoredMessage
from postroom.store.records import CompactionRecord, MemoryFact, UsageRow
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso
from postroom.store.sqlite.messages import MESSAGE_COLUMNS, message_from_row

__all__ = ["MemoryStatements", "fact_from_row", "fts_query", "fts_words", "usage_row"]

_WORD = re.compile(r"\w+", re.UNICODE)


def fts_words(text: str, *, max_terms: int = 24) -> list[str]:
    """The distinct words of *text* worth searching for (longer than two characters)."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) > 2 and word not in words:
            words.append(word)
        if len(words) >= max_terms:
            break
    return words


def fts_query(text: str, *, max_terms: int = 24) -> str:
    """An FTS5 query matching any of the words of *text* (each quoted: no syntax injection)."""
    return " OR ".join(f'"{word}"' for word in fts_words(text, max_terms=max_terms))


class MemoryStatements(Statements):
    async def insert_fact(
        self,
        folder: str,
        category: str,
        fact: str,
        *,
        normalized: str,
        now: datetime,
        run_id: int | None = None,
    ) -> int:
        row = await self._one(
            "INSERT INTO memory_facts (folder, category, fact, normalized, created_at, run_id) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (folder, category, fact, normalized, to_iso(now), run_id),
        )
        return int(row[0])

    async def normalized_facts(self, folder: str) -> list[str]:
        rows = await self._all("SELECT normalized FROM memory_facts WHERE folder = ?", (folder,))
        return [str(row[0]) for row in rows]

    async def list_facts(
        self, folder: str, *, category: str | None = None, limit: int = 100
    ) -> list[MemoryFact]:
        if category is None:
            rows = await self._all(
                "SELECT id, folder, category, fact, created_at FROM memory_facts "
                "WHERE folder = ? ORDER BY id DESC LIMIT ?",
                (folder, limit),
            )
        else:
            rows = await self._all(
                "SELECT id, folder, category, fact, created_at FROM memory_facts "
                "WHERE folder = ? AND category = ? ORDER BY id DESC LIMIT ?",
                (folder, category, limit),
            )
        return [fact_from_row(row) for row in rows]

    async def search_facts(self, folder: str, query: str, *, limit: int) -> list[MemoryFact]:
        match = fts_query(query)
        if not match:
            return []
        # Opening the full-text index reads several of its pages; a folder with no facts (the
        # common case for a turn) is answered from the facts index alone.
        known = await self._one("SELECT 1 FROM memory_facts WHERE folder = ? LIMIT 1", (folder,))
        if known is None:
            return []
        rows = await self._all(
            "SELECT f.id, f.folder, f.category, f.fact, f.created_at FROM memory_fts "
            "JOIN memory_facts f ON f.id = memory_fts.rowid "
            "WHERE memory_fts MATCH ? AND f.folder = ? ORDER BY bm25(memory_fts) LIMIT ?",
            (match, folder, limit),
        )
        return [fact_from_row(row) for row in rows]

    async def set_state(self, folder: str, key: str, value: str, *, now: datetime) -> None:
        if value == "":
            await self._run("DELETE FROM memory_state WHERE folder = ? AND key = ?", (folder, key))
            return
        await self._run(
            "INSERT INTO memory_state (folder, key, value, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (folder, key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (folder, key, value, to_iso(now)),
        )

    async def get_state(self, folder: str) -> dict[str, str]:
        rows = await self._all(
            "SELECT key, value FROM memory_state WHERE folder = ? ORDER BY key", (folder,)
        )
        return {str(key): str(value) for key, value in rows}

    async def uncompacted_messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? "
            "AND message_type IN ('user', 'assistant', 'system', 'tool_result') "
            "AND compacted = 0 AND json_extract(metadata, '$.command') IS NULL ORDER BY seq",
            (conversation_id,),
        )
        return [message_from_row(row) for row in rows]

    async def insert_compaction(
        self,
        conversation_id: int,
        *,
        summary: str,
        up_to_seq: int,
        messages_before: int,
        messages_after: int,
        tokens_saved: int,
        now: datetime,
        tokens_compacted: int = 0,
    ) -> int:
        row = await self._one(
            "INSERT INTO compactions (conversation_id, summary, up_to_seq, messages_before, "
            "messages_after, tokens_saved, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                conversation_id,
                summary,
                up_to_seq,
                messages_before,
                messages_after,
                tokens_saved,
                to_iso(now),
            ),
        )
        await self._run(
            "UPDATE messages SET compacted = 1 WHERE conversation_id = ? AND seq <= ? "
            "AND compacted = 0",
            (conversation_id, up_to_seq),
        )
        await self._run(
            "UPDATE conversations SET token_estimate = MAX(token_estimate - ?, 0) "
            "WHERE id = ? AND token_estimate >= 0",
            (tokens_compacted, conversation_id),
        )
        return int(row[0])

    async def correct_token_estimate(self, conversation_id: int, *, seen: int, actual: int) -> None:
        await self._run(
            "UPDATE conversations SET token_estimate = CASE WHEN token_estimate < 0 THEN ? "
            "ELSE MAX(token_estimate + ?, 0) END WHERE id = ?",
            (actual, 0 if seen < 0 else actual - seen, conversation_id),
        )

    async def latest_compaction(self, conversation_id: int) -> CompactionRecord | None:
        row = await self._one(
            "SELECT id, conversation_id, summary, up_to_seq, messages_before, messages_after, "
            "tokens_saved, created_at FROM compactions WHERE conversation_id = ? "
            "ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        )
        if row is None:
            return None
        return CompactionRecord(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], from_iso(row[7])
        )

    async def usage_summary(self, *, since: datetime | None = None) -> list[UsageRow]:
        # A run that used tokens but has no cost was of a model without a price: the group's
        # cost is then unknown (NULL), never a made-up zero.
        rows = await self._all(
            "SELECT substr(started_at, 1, 10) AS day, folder, provider, model, COUNT(*), "
            "COALESCE(SUM(json_extract(usage, '$.input_tokens')), 0), "
            "COALESCE(SUM(json_extract(usage, '$.output_tokens')), 0), "
            "CASE WHEN SUM(cost IS NULL AND (COALESCE(json_extract(usage, '$.input_tokens'), 0) "
            "+ COALESCE(json_extract(usage, '$.output_tokens'), 0)) > 0) > 0 THEN NULL "
            "ELSE COALESCE(SUM(cost), 0) END "
            "FROM runs WHERE started_at >= ? GROUP BY day, folder, provider, model "
            "ORDER BY day, folder, provider, model",
            (to_iso(since) if since else "",),
        )
        return [usage_row(r) for r in rows]


def usage_row(r: Any) -> UsageRow:
    """A row of the usage query: day, folder, provider, model, runs, tokens in and out, cost
    (``NULL`` when a run used tokens that have no price)."""
    cost = None if r[7] is None else float(r[7])
    return UsageRow(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), int(r[6]), cost)


def fact_from_row(row: Any) -> MemoryFact:
    return MemoryFact(row[0], row[1], row[2], row[3], from_iso(row[4]))
