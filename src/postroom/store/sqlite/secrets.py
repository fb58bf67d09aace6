"""Statements on what every server of a deployment shares: signing secrets, and (SQLite keeps
one server per file, PIPELINE §2) an empty list of nodes."""

from __future__ import annotations

from datetime import datetime

from postroom.store.records import AdapterLease, NodeRecord
from postroom.store.sqlite.base import Statements

__all__ = ["SingleServerStatements"]


class SingleServerStatements(Statements):
    async def shared_secret(self, name: str, *, new: str) -> str:
        await self._run(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
            (f"secret:{name}", new),
        )
        row = await self._one("SELECT value FROM meta WHERE key = ?", (f"secret:{name}",))
        return str(row[0])

    # One server per SQLite file: it is the only node, and it keeps no row; no other process
    # sends from its outbox, so a due row is this server's to send.
    async def claim_delivery(self, delivery_id: int, *, now: datetime) -> bool:
        return True

    async def register_node(self, node: NodeRecord) -> None:
        return None

    async def heartbeat_node(self, node_id: str, *, at: datetime) -> None:
        return None

    async def remove_node(self, node_id: str) -> None:
        return None

    async def list_nodes(self) -> list[NodeRecord]:
        return []

    # The one server runs every adapter itself: nothing to share, so every lease is its own.
    async def take_adapter_lease(
        self, adapter: str, node_id: str, *, now: datetime, until: datetime
    ) -> bool:
        return True

    async def release_adapter_lease(self, adapter: str, node_id: str) -> None:
        return None

    async def list_adapter_leases(self) -> list[AdapterLease]:
        return []
