"""Single-connection adapters on a shared database (PIPELINE §9): a Telegram bot polls, a
Discord bot holds its gateway, from one node at a time. Each such adapter runs under a lease row
its node renews every few seconds; every other node tries to take the row as it goes and starts
listening once it got it, so the adapter comes back within ``ttl_s + renew_s`` of its node dying.
A node that finds its lease taken (or cannot renew it before it runs out) stops listening; a
node shutting down releases what it holds, so another takes it at the next try.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from postroom.engine.clock import Clock
from postroom.store.protocol import Store

__all__ = ["LEASE_RENEW_S", "LEASE_TTL_S", "AdapterLeases", "Listener"]

log = structlog.get_logger(__name__)

#: How often a node renews what it holds and tries to take what nobody holds.
LEASE_RENEW_S = 5.0
#: How long a lease lasts unrenewed: three missed renewals, so a slow database is not a failover.
LEASE_TTL_S = 15.0


class Listener(Protocol):
    """The connection half of an adapter: started and stopped as its lease comes and goes."""

    @property
    def name(self) -> str: ...

    async def listen(self) -> None: ...

    async def unlisten(self) -> None: ...


@dataclass
class AdapterLeases:
    """The leases this node holds, and the loop that keeps them."""

    store: Store
    node_id: str
    listeners: Sequence[Listener]
    clock: Clock
    renew_s: float = LEASE_RENEW_S
    ttl_s: float = LEASE_TTL_S
    #: Each held adapter's lease end as last written (an unreachable database cannot be asked).
    _held: dict[str, datetime] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def held(self) -> list[str]:
        """The adapters this node runs now."""
        return sorted(self._held)

    async def start(self) -> None:
        """Take what can be taken now, then keep at it until :meth:`stop`."""
        self._stopping.clear()
        await self.renew()
        self._task = asyncio.create_task(self._loop(), name="adapter-leases")

    async def stop(self) -> None:
        """Stop listening and release every lease (another node takes it at its next try)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        for listener in self.listeners:
            if listener.name in self._held:
                await self._unlisten(listener)
                await self._release(listener.name)

    async def renew(self) -> None:
        """One round: renew or take each adapter's lease, and start or stop it to match."""
        for listener in self.listeners:
            now = self.clock()
            until = now + timedelta(seconds=self.ttl_s)
            try:
                async with self.store.write() as tx:
                    got = await tx.take_adapter_lease(
                        listener.name, self.node_id, now=now, until=until
                    )
            except Exception:
                log.exception("adapter_lease.renew_failed", adapter=listener.name)
                # Unsure whether it still holds: it stops once its last lease surely ran out.
                held_until = self._held.get(listener.name)
                if held_until is not None and held_until <= self.clock():
                    await self._unlisten(listener)
                continue
            if got:
                if listener.name not in self._held and not await self._listen(listener):
                    await self._release(listener.name)  # let a node that can connect try
                    continue
                self._held[listener.name] = until
            elif listener.name in self._held:
                log.warning("adapter_lease.lost", adapter=listener.name)
                await self._unlisten(listener)

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.renew_s):
                    await self._stopping.wait()
            if not self._stopping.is_set():
                await self.renew()

    async def _listen(self, listener: Listener) -> bool:
        if not await _attempt(listener.listen, "adapter_lease.listen_failed", listener.name):
            return False
        log.info("adapter_lease.taken", adapter=listener.name, node=self.node_id)
        return True

    async def _release(self, adapter: str) -> None:
        with contextlib.suppress(Exception):  # unreleased, it runs out by itself
            async with self.store.write() as tx:
                await tx.release_adapter_lease(adapter, self.node_id)

    async def _unlisten(self, listener: Listener) -> None:
        self._held.pop(listener.name, None)
        await _attempt(listener.unlisten, "adapter_lease.unlisten_failed", listener.name)
        log.info("adapter_lease.released", adapter=listener.name, node=self.node_id)


async def _attempt(call: Callable[[], Awaitable[None]], event: str, adapter: str) -> bool:
    try:
        await call()
    except Exception as exc:  # one adapter that cannot connect must not stop the others
        log.error(event, adapter=adapter, error=str(exc))
        return False
    return True
