"""Single-connection adapters under lease rows on one PostgreSQL database (PIPELINE §9): one node
listens at a time, another takes over once the holder's lease ran out or it released it, and a
node whose lease was taken stops listening."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from postroom.engine.adapter_leases import AdapterLeases
from postroom.engine.nodes import NodeService
from postroom.store.postgres import PostgresStore
from postroom.store.records import NodeRecord

from fakeclock import FakeClock

TTL_S = 15.0


class Recorder:
    """A listener that notes when it listens; ``broken`` makes :meth:`listen` fail."""

    def __init__(self, name: str = "telegram", *, broken: bool = False) -> None:
        self.name = name
        self.broken = broken
        self.on = False
        self.starts = 0

    async def listen(self) -> None:
        if self.broken:
            raise ConnectionError("the platform refused the connection")
        self.on = True
        self.starts += 1

    async def unlisten(self) -> None:
        self.on = False


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    first = await PostgresStore.open(pg_url)
    second = await PostgresStore.open(pg_url)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


def node(store: PostgresStore, name: str, listener: Recorder, clock: FakeClock) -> AdapterLeases:
    return AdapterLeases(store=store, node_id=name, listeners=[listener], clock=clock, ttl_s=TTL_S)


async def holders(store: PostgresStore, clock: FakeClock) -> list[str]:
    async with store.read() as tx:
        leases = await tx.list_adapter_leases()
    return [lease.node_id for lease in leases if lease.lease_until > clock()]


async def test_one_node_listens_and_another_takes_over_once_the_lease_ran_out(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    a_listener, b_listener = Recorder(), Recorder()
    a = node(stores[0], "node-a", a_listener, clock)
    b = node(stores[1], "node-b", b_listener, clock)

    await a.renew()
    await b.renew()
    assert (a_listener.on, b_listener.on) == (True, False)
    # Renewals keep it where it is, however often both try.
    for _ in range(3):
        clock.advance(seconds=5)
        await a.renew()
        await b.renew()
    assert (a.held, b.held) == (["telegram"], [])
    assert await holders(stores[0], clock) == ["node-a"]

    # node-a stops renewing (it died): node-b waits out the lease, then takes it.
    clock.advance(seconds=TTL_S - 1)
    await b.renew()
    assert not b_listener.on
    clock.advance(seconds=2)
    await b.renew()
    assert b_listener.on and b.held == ["telegram"]
    assert await holders(stores[1], clock) == ["node-b"]

    # node-a comes back to life: its renewal fails, so it stops listening.
    await a.renew()
    assert not a_listener.on and a.held == []
    assert await holders(stores[0], clock) == ["node-b"]


async def test_a_node_shutting_down_releases_its_lease_at_once(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    a_listener, b_listener = Recorder(), Recorder()
    a = node(stores[0], "node-a", a_listener, clock)
    b = node(stores[1], "node-b", b_listener, clock)
    await a.renew()
    await a.stop()
    assert not a_listener.on
    assert await holders(stores[0], clock) == []
    await b.renew()  # no waiting for the lease to run out
    assert b_listener.on


async def test_nodes_racing_for_a_free_adapter_give_it_to_exactly_one(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    listeners = [Recorder() for _ in range(6)]
    racers = [
        node(stores[i % 2], f"node-{i}", listener, clock) for i, listener in enumerate(listeners)
    ]
    await asyncio.gather(*(racer.renew() for racer in racers))
    assert sum(listener.on for listener in listeners) == 1
    assert len(await holders(stores[0], clock)) == 1


async def test_a_node_that_cannot_connect_lets_another_take_the_adapter(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    broken, healthy = Recorder(broken=True), Recorder()
    a = node(stores[0], "node-a", broken, clock)
    b = node(stores[1], "node-b", healthy, clock)
    await a.renew()
    assert a.held == [] and await holders(stores[0], clock) == []
    await b.renew()
    assert healthy.on


async def test_each_adapter_has_its_own_lease(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    telegram, discord = Recorder("telegram"), Recorder("discord")
    a = AdapterLeases(store=stores[0], node_id="node-a", listeners=[telegram], clock=clock)
    b = AdapterLeases(store=stores[1], node_id="node-b", listeners=[discord], clock=clock)
    await a.renew()
    await b.renew()
    assert telegram.on and discord.on
    async with stores[0].read() as tx:
        leases = await tx.list_adapter_leases()
    assert {(lease.adapter, lease.node_id) for lease in leases} == {
        ("discord", "node-b"),
        ("telegram", "node-a"),
    }


async def test_the_nodes_listing_shows_the_adapters_each_node_holds(
    stores: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    services = [
        NodeService(store=store, me=_record(name, clock), clock=clock)
        for store, name in zip(stores, ("node-a", "node-b"), strict=True)
    ]
    for service in services:
        await service.start(host="127.0.0.1", port=8080)
    try:
        a = node(stores[0], "node-a", Recorder(), clock)
        await a.renew()
        await node(stores[1], "node-b", Recorder(), clock).renew()
        listed = {row["name"]: row["adapters"] for row in await services[1].list()}
        assert listed == {"node-a": ["telegram"], "node-b": []}
        clock.advance(seconds=TTL_S + 1)  # a lease run out is nobody's
        listed = {row["name"]: row["adapters"] for row in await services[1].list()}
        assert listed == {"node-a": [], "node-b": []}
    finally:
        for service in services:
            await service.stop()


def _record(name: str, clock: FakeClock) -> NodeRecord:
    now = clock()
    return NodeRecord(
        id=name, name=name, boot_id=name, host="", port=0, pid=1, started_at=now, heartbeat_at=now
    )
