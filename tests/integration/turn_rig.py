"""The queue and the workers as ``postroom serve`` builds them (``Gateway.build``), with a gated
provider in the ``providers`` seam and a fake clock in the ``clock`` seam, over one data
directory holding ROUTING §7's folders and routes. A test starts, stops and restarts servers
on that directory as a deployment would; nothing is wired by hand."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.core import Action, MessageType, StoredMessage
from postroom.engine import Services
from postroom.llm import Provider
from postroom.store import Store
from postroom.store.records import JobRecord, JobStatus

from fakeclock import FakeClock
from gateway_support import new_data_dir
from support import engine_section, eventually, inbound, seed_spec_table

#: The configuration every server of the rig starts from; a test overrides whole keys.
BASE_CONFIG: Mapping[str, Mapping[str, Any]] = {
    "queue": {
        "max_attempts": 3,
        "backoff_base": "60s",
        "max_concurrent_turns": 2,
        "lease": "30s",
        "lease_renew": "10s",
        "shutdown_grace": "200ms",
    },
}


class Rig:
    """Servers over one data directory (ROUTING §7's table), all stopped at teardown."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.clock = clock
        self.data_dir = tmp_path / "data"
        self._open: list[Gateway] = []
        self._seeded: set[Path] = set()

    async def build(
        self,
        provider: Provider,
        *,
        store: Store | None = None,
        **sections: Mapping[str, Any],
    ) -> Gateway:
        """A server that is built but not yet working: *sections* replace keys of the
        configuration's sections (``queue={"lease": "300ms"}``); *store*, an open store over the
        rig's data directory to use instead of the one the gateway would open."""
        seed = self.data_dir not in self._seeded
        if seed:
            await new_data_dir(self.data_dir)
            self._seeded.add(self.data_dir)
        merged = {name: dict(keys) for name, keys in {**BASE_CONFIG, **engine_section()}.items()}
        for name, keys in sections.items():
            merged[name] = {**merged.get(name, {}), **keys}
        gateway = await Gateway.build(
            self.data_dir,
            Config.model_validate(merged),
            clock=self.clock,
            providers={"echo": provider},
            store=store,
        )
        self._open.append(gateway)
        if seed:
            await seed_spec_table(gateway.services)
        return gateway

    async def start(
        self, provider: Provider, *, store: Store | None = None, **sections: Mapping[str, Any]
    ) -> Gateway:
        """A server whose workers are claiming turns."""
        gateway = await self.build(provider, store=store, **sections)
        await gateway.workers.start()
        return gateway

    async def stop(self, gateway: Gateway) -> None:
        """Shut a server down as ``postroom serve`` does on SIGINT (workers, then the store)."""
        await gateway.workers.stop()
        await gateway.close()
        self._open.remove(gateway)

    async def close(self) -> None:
        for gateway in reversed(list(self._open)):
            await self.stop(gateway)


# -- reading the queue and the chats ---------------------------------------------------------------
async def job_when(
    services: Services, job_id: int, check: Callable[[JobRecord], bool], what: str
) -> JobRecord:
    async def holds() -> bool:
        return check(await services.turns.get_job(job_id))

    await eventually(holds, f"job {job_id}: {what}")
    return await services.turns.get_job(job_id)


async def settled(services: Services, job_id: int, status: JobStatus = JobStatus.DONE) -> JobRecord:
    return await job_when(services, job_id, lambda job: job.status is status, status.value)


async def fire(
    services: Services, chat: str, text: str, *, sender: str = "telegram:user/42"
) -> int:
    result = await services.ingest.ingest(inbound(chat, text, sender=sender))
    assert result.decision.action is Action.FIRE, result.decision
    assert result.decision.job_id is not None
    return result.decision.job_id


async def rows(services: Services, chat: str) -> list[StoredMessage]:
    async with services.store.read() as tx:
        return await tx.list_messages(chat_jid=chat, limit=10_000)


async def answers(services: Services, chat: str) -> list[StoredMessage]:
    return [m for m in await rows(services, chat) if m.message_type is MessageType.ASSISTANT]


async def all_jobs(services: Services) -> list[JobRecord]:
    return sorted(await services.turns.list_jobs(limit=10_000), key=lambda job: job.id)


def turn_task_alive(job_id: int) -> bool:
    return any(t.get_name() == f"turn-{job_id}" and not t.done() for t in asyncio.all_tasks())


#: Parts of the statements of the dispatcher's claim and of the lease sweeper.
CLAIM = "UPDATE jobs SET status = 'running'"
SWEEP = "WHERE status = 'running' AND lease_until < "


@contextlib.contextmanager
def statements(services: Services, part: str) -> Iterator[list[float]]:
    """The monotonic time of every statement containing *part* that the store's write
    connection runs while the block is open: how a test sees the dispatcher look at the queue
    (:data:`CLAIM`) or the sweeper look for expired leases (:data:`SWEEP`)."""
    seen: list[float] = []

    def trace(sql: str) -> None:
        if part in sql:
            seen.append(time.monotonic())

    # SQLite traces its write connection; PostgreSQL every statement of the store.
    writer = getattr(services.store, "_writer", services.store)
    writer.set_trace_callback(trace)
    try:
        yield seen
    finally:
        writer.set_trace_callback(None)
