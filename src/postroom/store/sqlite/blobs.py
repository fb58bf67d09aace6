"""Statements on blobs: attachment bytes stored once by their SHA-256 (``0008_blobs.sql``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from postroom.core.attachments import Blob
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import to_iso

__all__ = ["BlobStatements"]

#: Hashes looked up in one statement (SQLite allows 32,766 parameters; stay well below).
_LOOKUP_BATCH = 500


class BlobStatements(Statements):
    async def insert_blobs(
        self,
        blobs: Iterable[Blob],
        *,
        chat_jid: str,
        message_id: str,
        now: datetime,
    ) -> None:
        """Store each blob unless it is already there, and record that the message holds it."""
        listed = list(blobs)
        if not listed:
            return
        await self._many(
            "INSERT INTO blobs (sha256, mime, size, data, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(b.sha256, b.mime, b.size, b.data, to_iso(now)) for b in listed],
        )
        await self._many(
            "INSERT INTO message_blobs (chat_jid, sha256, message_id) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [(chat_jid, b.sha256, message_id) for b in listed],
        )

    async def get_blobs(self, hashes: Iterable[str]) -> dict[str, Blob]:
        wanted = sorted(set(hashes))
        found: dict[str, Blob] = {}
        for start in range(0, len(wanted), _LOOKUP_BATCH):
            batch = wanted[start : start + _LOOKUP_BATCH]
            marks = ", ".join("?" * len(batch))
            rows = await self._all(
                f"SELECT sha256, mime, data FROM blobs WHERE sha256 IN ({marks})", batch
            )
            for sha, mime, data in rows:
                found[sha] = Blob(sha, mime, bytes(data))
        return found

    async def chat_holds_blob(self, chat_jid: str, sha256: str) -> bool:
        row = await self._one(
            "SELECT 1 FROM message_blobs WHERE chat_jid = ? AND sha256 = ? LIMIT 1",
            (chat_jid, sha256),
        )
        return row is not None
