"""Reading what is stored: the history, drops, route changes, runs (for the CLI, API, web)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from typing import Any

from postroom.core.attachments import Blob
from postroom.core.errors import Forbidden, NotFound
from postroom.core.folders import is_within
from postroom.core.messages import MessageType, StoredMessage
from postroom.store.protocol import Store
from postroom.store.records import (
    DeliveryRecord,
    DropRecord,
    RouteAuditRecord,
    RunRecord,
    RunSummary,
    UsageRow,
)

__all__ = ["History"]

_SHA256 = re.compile(r"[0-9a-f]{64}")


class History:
    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def messages(
        self,
        *,
        chat_jid: str | None = None,
        folder: str | None = None,
        after_seq: int | None = None,
        limit: int = 100,
        within: str | None = None,
    ) -> list[StoredMessage]:
        """The newest *limit* matching messages after *after_seq*, in ``seq`` order.

        *within* a folder's tree, a *folder* under it must be named: a chat's messages may
        belong to folders outside it.
        """
        if within is not None and (folder is None or not is_within(folder, within)):
            raise Forbidden(
                f"Only messages of {within} and the folders under it are readable here; name "
                "one of them as the folder."
            )
        async with self._store.read() as tx:
            return await tx.list_messages(
                chat_jid=chat_jid, folder=folder, after_seq=after_seq, limit=limit
            )

    async def since(
        self, chat_jid: str | None, since_seq: int, *, limit: int
    ) -> list[StoredMessage]:
        """Messages after *since_seq*, oldest first (for catching up a live view)."""
        async with self._store.read() as tx:
            return await tx.get_messages_since(chat_jid, since_seq, limit=limit)

    async def answers(self, job_id: int, *, chat_jid: str, after_seq: int) -> list[StoredMessage]:
        """What turn *job_id* wrote in *chat_jid* after *after_seq*, oldest first: its answer,
        and the host notices about it (a failure, a tag that was refused); no traces."""
        async with self._store.read() as tx:
            found = await tx.get_messages_since(chat_jid, after_seq, limit=1000)
        return [
            m
            for m in found
            if m.metadata.get("job_id") == job_id
            and m.message_type in (MessageType.ASSISTANT, MessageType.HOST)
        ]

    async def runs(self, *, folder: str | None = None, limit: int = 50) -> list[RunSummary]:
        """Run summaries, newest first."""
        async with self._store.read() as tx:
            return await tx.list_runs(folder=folder, limit=limit)

    async def run_ids(self, job_ids: list[int]) -> dict[int, list[int]]:
        """Each job's runs, oldest first."""
        async with self._store.read() as tx:
            return await tx.run_ids_for_jobs(job_ids)

    async def drops(self, *, limit: int = 100) -> list[DropRecord]:
        async with self._store.read() as tx:
            return await tx.list_drops(limit=limit)

    async def route_changes(
        self, *, limit: int = 20, within: str | None = None
    ) -> list[RouteAuditRecord]:
        """The newest *limit* writes of the route table, newest first; *within* a folder, only
        the rows of those writes that target its tree (and the writes that touched any)."""
        async with self._store.read() as tx:
            entries = await tx.list_route_audit(limit=limit)
        if within is None:
            return entries
        kept = (_confine_entry(entry, within) for entry in entries)
        return [entry for entry in kept if entry is not None]

    async def run(self, run_id: int, *, within: str | None = None) -> RunRecord:
        async with self._store.read() as tx:
            record = await tx.get_run(run_id)
        if record is None or (within is not None and not is_within(record.folder, within)):
            # A run outside the caller's tree is as good as missing: its id says nothing.
            raise NotFound(f"There is no run {run_id}.")
        return record

    async def blob(self, sha256: str, *, chat_jid: str | None = None) -> Blob:
        """An attachment's bytes; with *chat_jid* (a web visitor), only when a message of that
        chat carries it — elsewhere it is as absent as a hash nobody stored."""
        missing = NotFound(f"There is no attachment {sha256[:64]!r}.")
        if not _SHA256.fullmatch(sha256):
            raise missing
        async with self._store.read() as tx:
            if chat_jid is not None and not await tx.chat_holds_blob(chat_jid, sha256):
                raise missing
            found = (await tx.get_blobs([sha256])).get(sha256)
        if found is None:
            raise missing
        return found

    async def usage(self, *, since: datetime | None = None) -> list[UsageRow]:
        async with self._store.read() as tx:
            return await tx.usage_summary(since=since)

    async def deliveries(
        self, *, message_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[DeliveryRecord]:
        async with self._store.read() as tx:
            return await tx.list_deliveries(message_id=message_id, status=status, limit=limit)


def _row_within(row: Any, within: str) -> bool:
    target = row.get("target") if isinstance(row, dict) else None
    return isinstance(target, str) and is_within(target.partition("#")[0], within)


def _confine_entry(entry: RouteAuditRecord, within: str) -> RouteAuditRecord | None:
    def keep(side: Any) -> Any:
        if isinstance(side, list):
            return [row for row in side if _row_within(row, within)]
        return side if side is None or _row_within(side, within) else None

    before, after = keep(entry.before), keep(entry.after)
    if not before and not after:
        return None
    return replace(entry, before=before, after=after)
