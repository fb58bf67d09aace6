"""What the Slack and WhatsApp adapter tests share: a uvicorn server in the test's event loop,
a real engine over SQLite (ingest and the delivery loop, no workers). A whole gateway is
``channel_gateway``'s.

The adapters' ``receive`` hands messages to the engine's real ingest; the harness records each
:class:`IngestResult` so a test can read the routing decision (verb, layer) ingest returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from postroom.channels.base import BaseChannel, ChannelContext
from postroom.channels.http import EventStreamSink
from postroom.config import DATABASE_FILE
from postroom.core import InboundMessage, MessageType, Trigger
from postroom.core.access import AccessPolicy, DmPolicy
from postroom.core.folders import FolderDefaults
from postroom.engine import IngestLimits, Services
from postroom.engine.bootstrap import bootstrap
from postroom.engine.delivery import DeliveryLoop, DeliverySettings, SinkRouter
from postroom.engine.ingest import IngestResult
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.store.records import DeliveryRecord, NewMessage

from fakeclock import FakeClock


@contextlib.asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve *app* on a free 127.0.0.1 port in this event loop; yield its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-platform-server")
    async with asyncio.timeout(10):
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def eventually(
    check: Callable[[], Awaitable[bool] | bool], *, timeout_s: float = 10.0
) -> None:
    """Poll *check* until it holds, or fail after *timeout_s*."""
    async with asyncio.timeout(timeout_s):
        while True:
            outcome = check()
            if isinstance(outcome, Awaitable):
                outcome = await outcome
            if outcome:
                return
            await asyncio.sleep(0.02)


@dataclass
class Engine:
    """A real engine over SQLite: ingest for the adapter, a delivery loop driven by hand."""

    services: Services
    clock: FakeClock
    results: list[IngestResult] = field(default_factory=list)
    sinks: SinkRouter = field(default_factory=lambda: SinkRouter(fallback=EventStreamSink()))

    async def inbound(self, message: InboundMessage) -> IngestResult:
        result = await self.services.ingest.ingest(message)
        self.results.append(result)
        return result

    def context(self, **extra: Any) -> ChannelContext:
        return ChannelContext(inbound=self.inbound, clock=self.clock, **extra)

    def delivery(self) -> DeliveryLoop:
        return DeliveryLoop(
            store=self.services.store,
            sinks=self.sinks,
            catalog=self.services.catalog,
            defaults=self.services.defaults,
            signals=self.services.signals,
            clock=self.clock,
            settings=DeliverySettings(backoff_base_s=2.0),
        )

    def attach(self, channel: BaseChannel) -> None:
        for platform in channel.platforms:
            self.sinks.register(platform, channel)

    def result_for(self, message_id: str) -> IngestResult:
        matching = [r for r in self.results if r.id == message_id]
        assert matching, f"{message_id} was never ingested; got {[r.id for r in self.results]}"
        return matching[-1]

    async def stored(self, chat_jid: str) -> list[Any]:
        return await self.services.history.messages(chat_jid=chat_jid, limit=1000)

    async def user_messages(self, chat_jid: str) -> list[Any]:
        return [m for m in await self.stored(chat_jid) if m.message_type is MessageType.USER]

    async def mention_routes(self, platform: str) -> None:
        """ROUTING §5's pair for groups: mentions fire, everything else is observed."""
        routes = self.services.routes
        await routes.add_route(10, f"platform={platform} verb=mention", "main", actor="test")
        await routes.add_route(20, f"platform={platform}", "main#observe", actor="test")

    async def put_answer(
        self,
        chat_jid: str,
        content: str,
        *,
        reply_to: str | None = None,
        topic: str = "",
        message_type: MessageType = MessageType.ASSISTANT,
    ) -> str:
        """Store an answer in *chat_jid* and its outbox rows (as a turn does); return its id."""
        message_id = uuid.uuid4().hex
        async with self.services.store.write() as tx:
            await tx.insert_message(
                NewMessage(
                    id=message_id,
                    chat_jid=chat_jid,
                    sender="bot",
                    sender_name="Postroom",
                    content=content,
                    timestamp=self.clock(),
                    message_type=message_type,
                    is_from_me=True,
                    topic=topic,
                    reply_to=reply_to,
                    routed_to="main",
                )
            )
            outbound = OutboundMessage(
                message_id=message_id,
                message_chat_jid=chat_jid,
                message_type=message_type.value,
                content=content,
                folder="main",
                topic=topic,
                reply_to=reply_to,
            )
            await write_outbox(
                tx, plan_deliveries(outbound, [chat_jid], kind=DeliveryKind.REPLY, now=self.clock())
            )
        return message_id

    async def deliveries(self, message_id: str) -> list[DeliveryRecord]:
        return await self.services.history.deliveries(message_id=message_id, limit=1000)


@contextlib.asynccontextmanager
async def open_engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    services = await Services.open_database(
        tmp_path / DATABASE_FILE,
        folders_dir=tmp_path / "folders",
        trigger=Trigger(),
        defaults=FolderDefaults(),
        limits=IngestLimits(),
        clock=clock,
        # Adapter tests: every DM is answered (admission has tests of its own).
        access=AccessPolicy(dm_policy=DmPolicy.OPEN),
    )
    try:
        await bootstrap(services, actor="test")
        yield Engine(services, clock)
    finally:
        await services.close()


def texts(calls: Sequence[dict[str, Any]], key: str = "text") -> list[str]:
    return [str(call.get(key)) for call in calls]
