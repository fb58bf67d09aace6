"""The nodes of a deployment (PIPELINE §9): each ``postroom serve`` on a shared PostgreSQL
database keeps a row it heartbeats every few seconds, so an operator sees which processes
serve and which stopped answering. On SQLite the one server is the only node (it keeps no row).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog

from postroom.engine.clock import Clock
from postroom.store.protocol import Store
from postroom.store.records import AdapterLease, NodeRecord

__all__ = ["HEARTBEAT_S", "NodeService", "adapters_by_node", "node_to_dict"]

log = structlog.get_logger(__name__)

#: How often a node says it is alive; one silent for three beats is shown as not alive.
HEARTBEAT_S = 5.0
ALIVE_WITHIN_S = 3 * HEARTBEAT_S


@dataclass
class NodeService:
    """This process's node row and the listing of every node."""

    store: Store
    me: NodeRecord
    clock: Clock
    heartbeat_s: float = HEARTBEAT_S
    #: The single-connection adapters this process runs (shown for the one SQLite server).
    local_adapters: Callable[[], list[str]] = list

    def __post_init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self, *, host: str, port: int) -> None:
        """Register (or re-register after a restart) and heartbeat until :meth:`stop`."""
        now = self.clock()
        self.me = replace(self.me, host=host, port=port, started_at=now, heartbeat_at=now)
        async with self.store.write() as tx:
            await tx.register_node(self.me)
        self._stopping.clear()
        self._task = asyncio.create_task(self._beat(), name="node-heartbeat")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        with contextlib.suppress(Exception):  # a database already gone forgets the row anyway
            async with self.store.write() as tx:
                await tx.remove_node(self.me.id)

    async def _beat(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_s):
                    await self._stopping.wait()
            if self._stopping.is_set():
                return
            try:
                async with self.store.write() as tx:
                    await tx.heartbeat_node(self.me.id, at=self.clock())
            except Exception:  # the next beat tries again; other nodes see a late one
                log.exception("node.heartbeat_failed")

    async def list(self) -> list[dict[str, Any]]:
        """Every node, with whether it heartbeated lately (on SQLite: this server)."""
        async with self.store.read() as tx:
            nodes = await tx.list_nodes()
            leases = await tx.list_adapter_leases()
        now = self.clock()
        if not nodes:
            return [node_to_dict(self.me, now=now, me=self.me.id, adapters=self.local_adapters())]
        held = adapters_by_node(leases, now=now)
        return [
            node_to_dict(node, now=now, me=self.me.id, adapters=held.get(node.id, []))
            for node in nodes
        ]


def adapters_by_node(leases: Iterable[AdapterLease], *, now: datetime) -> dict[str, list[str]]:
    """The adapters each node holds an unexpired lease on."""
    held: dict[str, list[str]] = {}
    for lease in leases:
        if lease.lease_until > now:
            held.setdefault(lease.node_id, []).append(lease.adapter)
    return held


def node_to_dict(
    node: NodeRecord, *, now: datetime, me: str | None = None, adapters: Sequence[str] = ()
) -> dict[str, Any]:
    """The node object of INTERFACES §4."""
    alive = node.id == me or (now - node.heartbeat_at).total_seconds() <= ALIVE_WITHIN_S
    return {
        "id": node.id,
        "name": node.name,
        "host": node.host,
        "port": node.port,
        "pid": node.pid,
        "started_at": node.started_at.isoformat(),
        "heartbeat_at": node.heartbeat_at.isoformat(),
        "alive": alive,
        "adapters": sorted(adapters),
    }
