"""Reading what is stored: the history, drops, route changes, runs (for the CLI, API, web)."""

from __future__ import annotations

from datetime import datetime

from postroom.core.errors import NotFound
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
    ) -> list[StoredMessage]:
        """The newest *limit* matching messages after *after_seq*, in ``seq`` order."""
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

    async def route_changes(self, *, limit: int = 20) -> list[RouteAuditRecord]:
        async with self._store.read() as tx:
            return await tx.list_route_audit(limit=limit)

    async def run(self, run_id: int) -> RunRecord:
        async with self._store.read() as tx:
            record = await tx.get_run(run_id)
        if record is None:
            raise NotFound(f"There is no run {run_id}.")
        return record

    async def usage(self, *, since: datetime | None = None) -> list[UsageRow]:
        async with self._store.read() as tx:
            return await tx.usage_summary(since=since)

    async def deliveries(
        self, *, message_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[DeliveryRecord]:
        async with self._store.read() as tx:
            return await tx.list_deliveries(message_id=message_id, status=status, limit=limit)
