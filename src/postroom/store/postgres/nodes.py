"""Statements on the nodes sharing a PostgreSQL database (PIPELINE §9)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from postroom.store.records import NodeRecord
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
