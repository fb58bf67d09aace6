"""Statements on the nodes sharing a PostgreSQL database (PIPELINE §9)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from postroom.store.records import AdapterLease, NodeRecord
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["NodeStatements"]

_COLUMNS = "id, name, boot_id, host, port, pid, started_at, heartbeat_at"


class NodeStatements(Statements):
    async def register_node(self, node: NodeRecord) -> None:
        await self._run(
            f"INSERT INTO nodes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET name = excluded.name, boot_id = excluded.boot_id, "
            "host = excluded.host, port = excluded.port, pid = excluded.pid, "
            "started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at",
            (
                node.id,
                node.name,
                node.boot_id,
                node.host,
                node.port,
                node.pid,
                to_iso(node.started_at),
                to_iso(node.heartbeat_at),
            ),
        )

    async def heartbeat_node(self, node_id: str, *, at: datetime) -> None:
        await self._run("UPDATE nodes SET heartbeat_at = ? WHERE id = ?", (to_iso(at), node_id))

    async def remove_node(self, node_id: str) -> None:
        await self._run("DELETE FROM nodes WHERE id = ?", (node_id,))

    async def list_nodes(self) -> list[NodeRecord]:
        rows = await self._all(f"SELECT {_COLUMNS} FROM nodes ORDER BY name, id")
        return [_node(row) for row in rows]

    async def take_adapter_lease(
        self, adapter: str, node_id: str, *, now: datetime, until: datetime
    ) -> bool:
        # One statement decides: a node renews its own row, takes a missing or run-out one,
        # and leaves alone a row another node holds (the row lock orders racing takers).
        row = await self._one(
            "INSERT INTO adapter_leases (adapter, node_id, lease_until) VALUES (?, ?, ?) "
            "ON CONFLICT (adapter) DO UPDATE SET node_id = excluded.node_id, "
            "lease_until = excluded.lease_until "
            "WHERE adapter_leases.node_id = excluded.node_id OR adapter_leases.lease_until < ? "
            "RETURNING node_id",
            (adapter, node_id, to_iso(until), to_iso(now)),
        )
        return row is not None

    async def release_adapter_lease(self, adapter: str, node_id: str) -> None:
        await self._run(
            "DELETE FROM adapter_leases WHERE adapter = ? AND node_id = ?", (adapter, node_id)
        )

    async def list_adapter_leases(self) -> list[AdapterLease]:
        rows = await self._all(
            "SELECT adapter, node_id, lease_until FROM adapter_leases ORDER BY adapter"
        )
        return [AdapterLease(row[0], row[1], from_iso(row[2])) for row in rows]


def _node(row: Any) -> NodeRecord:
    return NodeRecord(
        id=row[0],
        name=row[1],
        boot_id=row[2],
        host=row[3],
        port=int(row[4]),
        pid=int(row[5]),
        started_at=from_iso(row[6]),
        heartbeat_at=from_iso(row[7]),
    )
