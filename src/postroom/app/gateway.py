"""``postroom serve``: the one place every component is built and started.

Reads the configuration once, builds the store, the engine, the workers, the delivery loop, the
scheduler, the live feed, the HTTP API and the web chat with their dependencies, runs them, and
shuts them down in order on SIGINT/SIGTERM: stop accepting, let running turns finish for the
grace period, release what is left, flush what can be delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn
from fastapi import FastAPI

from postroom.api.uploads import UrlFetcher
from postroom.app.channels import ChannelHost, build_channels
from postroom.app.metrics import PrometheusMetrics, TrafficSummary
from postroom.app.providers import build_providers, close_providers
from postroom.app.serve_lock import ServeLock
from postroom.app.server_client import remove_serve_file, write_serve_file
from postroom.app.wiring import (
    build_http,
    build_services,
    build_sinks,
    build_workers,
    delivery_loop,
    open_store,
    signing_secret,
    this_node,
    transcriber,
    wake_for,
)
from postroom.channels.base import BaseChannel, ChannelContext
from postroom.channels.http import WebhookSession
from postroom.config import CONFIG_FILE, Config
from postroom.core.errors import ConfigError, PostroomError
from postroom.engine.adapter_leases import AdapterLeases
from postroom.engine.clock import Clock, system_clock
from postroom.engine.delivery import DeliveryLoop
from postroom.engine.feed import MessageFeed
from postroom.engine.nodes import NodeService
from postroom.engine.services import Services
from postroom.engine.signals import Signals
from postroom.engine.tasks import Scheduler, TaskService
from postroom.engine.worker import WorkerPool
from postroom.llm.base import Provider
from postroom.mcp import McpEndpoint, allowed_hosts
from postroom.store.protocol import SharedStore, Store

__all__ = ["Gateway", "check_bind", "serve"]

if TYPE_CHECKING:
    from postroom.llm.transcriber import HttpTranscriber

log = structlog.get_logger(__name__)


#: INTERFACES §1: the shortest API token ``serve`` accepts.
MIN_TOKEN_LENGTH = 16


def check_bind(host: str, token: str) -> None:
    """Refuse a weak API token, and a non-loopback bind without one (INTERFACES §1, §4).

    An empty token is allowed on loopback only (the API is then open to local processes);
    any other token must pass the token rule, so a whitespace-only or short one cannot stand
    between the network and the operator's view.
    """
    if token:
        if len(token) < MIN_TOKEN_LENGTH or any(ch.isspace() for ch in token):
            raise ConfigError(
                f"Refusing to start: [api] token in {CONFIG_FILE} must have at least "
                f"{MIN_TOKEN_LENGTH} characters and no whitespace."
            )
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ConfigError(
            f"Refusing to listen on {host} without an API token: set [api] token in "
            f"{CONFIG_FILE} (postroom init writes one) or bind to 127.0.0.1."
        )


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (postroom drains turns before the HTTP side
    goes), and with an event for "listening"."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()


@dataclass
class Gateway:
    """Everything ``postroom serve`` runs, built from one configuration."""

    config: Config
    services: Services
    tasks: TaskService
    workers: WorkerPool
    delivery: DeliveryLoop
    scheduler: Scheduler
    feed: MessageFeed
    http: FastAPI
    transcriber: HttpTranscriber | None
    #: The HTTP session of the outbound webhooks; None when no platform has one.
    webhooks: WebhookSession | None
    metrics: PrometheusMetrics
    channels: ChannelHost
    providers: Mapping[str, Provider] = field(default_factory=dict)
    #: ``/mcp``, unless ``[mcp] enabled = false``.
    mcp: McpEndpoint | None = None
    #: Where ``serve.json`` is written while :meth:`run` listens.
    data_dir: Path | None = None
    #: This process's row among the nodes sharing the database (PIPELINE §9).
    nodes: NodeService | None = None
    #: The single-connection adapters' leases, on a database nodes share (PIPELINE §9).
    leases: AdapterLeases | None = None
    #: Where this server listens and since when (the dashboard's nodes page).
    address: dict[str, Any] = field(default_factory=dict)

    @classmethod
    async def build(
        cls,
        data_dir: Path,
        config: Config,
        *,
        clock: Clock = system_clock,
        providers: Mapping[str, Provider] | None = None,
        channels: Sequence[BaseChannel] | None = None,
        store: Store | None = None,
        fetcher: UrlFetcher | None = None,
    ) -> Gateway:
        """Build every component of ``postroom serve`` over *data_dir* from *config*.

        The keyword arguments are the seams tests fill with fakes: *clock* for "now"
        everywhere; *providers* (by name) instead of those ``[providers]`` configures;
        *channels* instead of the adapters ``[channels]`` enables; *store* instead of the
        directory's database (an open store, closed with the gateway); *fetcher* for the
        attachment URLs the API is sent.
        """
        store = store if store is not None else await open_store(data_dir, config.database.url)
        try:
            return await cls._assemble(
                store,
                data_dir,
                config,
                clock=clock,
                providers=providers,
                channels=channels,
                fetcher=fetcher,
            )
        except BaseException:
            await store.close()
            raise

    @classmethod
    async def _assemble(
        cls,
        store: Store,
        data_dir: Path,
        config: Config,
        *,
        clock: Clock,
        providers: Mapping[str, Provider] | None,
        channels: Sequence[BaseChannel] | None,
        fetcher: UrlFetcher | None = None,
    ) -> Gateway:
        # What may refuse the configuration comes first, before anything holds a connection.
        adapters = list(channels) if channels is not None else build_channels(config)
        signals = Signals()
        metrics = PrometheusMetrics(store)
        services = build_services(
            store, data_dir, config, clock=clock, signals=signals, metrics=metrics
        )
        # AGENT.md files edited while no server ran (and, once, every file an older postroom
        # wrote) are imported now; from here on each folder's file is checked before its turns.
        await services.folders.import_edits()
        await services.skills.import_edits()
        if providers is not None:
            models = dict(providers)
        else:
            folders = services.catalog.snapshot.folders.values()
            used = {f.provider for f in folders if f.provider}
            models = build_providers(config, clock=clock, used=used, data_dir=data_dir)
        sinks, webhooks = build_sinks(config)
        host = ChannelHost(adapters, signals=signals, sinks=sinks, clock=clock)
        voice = transcriber(config)
        nodes = NodeService(
            store=store, me=this_node(data_dir, clock()), clock=clock, local_adapters=host.listening
        )
        leases: AdapterLeases | None = None
        if isinstance(store, SharedStore):
            leases = AdapterLeases(store=store, node_id=nodes.me.id, listeners=[], clock=clock)
            store.node = nodes.me.id
            # Work another node commits wakes this one's loops at once (the polls are the
            # backstop).
            await store.listen(lambda channel: wake_for(signals, channel))
        address: dict[str, Any] = {"name": socket.gethostname(), "pid": os.getpid()}
        http = build_http(
            services,
            data_dir,
            config,
            providers=models,
            channels=host,
            metrics=metrics,
            secret=await signing_secret(store, data_dir, config),
            nodes=nodes,
            fetcher=fetcher,
            address=address,
        )
        mcp = _mcp_endpoint(services, config)
        if mcp is not None:
            http.router.routes.append(mcp.route())
        return cls(
            config=config,
            services=services,
            tasks=services.tasks,
            workers=build_workers(
                services,
                data_dir,
                config,
                providers=models,
                transcribe=voice,
                metrics=metrics,
                fetch=host.fetch_attachment,
            ),
            delivery=delivery_loop(services, config, sinks=sinks, metrics=metrics),
            scheduler=Scheduler(
                store=store,
                catalog=services.catalog,
                signals=signals,
                clock=clock,
                queue=services.queue,
                tick_s=config.scheduler.tick_s,
            ),
            feed=MessageFeed(store=store, signals=signals),
            http=http,
            transcriber=voice,
            webhooks=webhooks,
            metrics=metrics,
            channels=host,
            providers=models,
            mcp=mcp,
            data_dir=data_dir,
            nodes=nodes,
            leases=leases,
            address=address,
        )

    _stop: asyncio.Event | None = None

    def request_stop(self) -> None:
        """Ask a running :meth:`run` to shut down gracefully (as SIGINT does)."""
        if self._stop is not None:
            self._stop.set()

    async def run(
        self,
        *,
        host: str,
        port: int,
        on_ready: Callable[[str, int], None] | None = None,
    ) -> None:
        """Serve until SIGINT/SIGTERM (or cancellation), then shut down gracefully.

        *on_ready* is called with the address once the server accepts connections (the port
        is the real one when 0 was asked for).
        """
        check_bind(host, self.config.api.token)
        listener = _listen(host, port)
        port = listener.getsockname()[1]
        server = _Server(
            uvicorn.Config(
                self.http,
                host=host,
                port=port,
                log_config=None,
                access_log=False,
                ws="websockets-sansio",
                timeout_graceful_shutdown=5,
                lifespan="off",
            )
        )
        stop = self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await self.feed.start_at_end()
        await self.workers.start()
        await self.channels.start(
            ChannelContext(
                inbound=self.services.ingest.ingest,
                clock=self.services.clock,
                assistant_name=self.config.assistant.name,
                image_bytes=self.config.limits.image_bytes,
                file_bytes=self.config.limits.file_bytes,
            ),
            listen=self.leases is None,
        )
        summary = TrafficSummary(self.metrics.tally)
        background: list[asyncio.Task[Any]] = [
            asyncio.create_task(self.delivery.run(), name="delivery"),
            asyncio.create_task(summary.run(), name="traffic-summary"),
            asyncio.create_task(self.scheduler.run(), name="scheduler"),
            asyncio.create_task(self.feed.run(), name="feed"),
        ]
        serving = asyncio.create_task(_serve_http(server, listener, self.mcp), name="http")
        listening = asyncio.create_task(server.listening.wait(), name="http-listening")
        await asyncio.wait({serving, listening}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            listening.cancel()
            await serving  # raises the bind error, if any
            raise PostroomError(f"The HTTP server on {host}:{port} stopped at start.")
        log.info("serve.ready", host=host, port=port, pid=os.getpid())
        if self.nodes is not None:
            await self.nodes.start(host=host, port=port)
        if self.leases is not None:
            self.leases.listeners = self.channels.leased
            await self.leases.start()
        self.address.update(host=host, port=port, started_at=self.services.clock().isoformat())
        if self.data_dir is not None:
            # INTERFACES §1: the CLI finds this server (and its real port) here.
            write_serve_file(self.data_dir, host, port)
        try:
            if on_ready is not None:
                on_ready(host, port)
            if self.webhooks is not None:
                self.webhooks.preload()
            waiter = asyncio.create_task(stop.wait(), name="stop-signal")
            await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self.data_dir is not None:
                remove_serve_file(self.data_dir)
        log.info("serve.stopping")
        if self.leases is not None:
            await self.leases.stop()
        if self.nodes is not None:
            await self.nodes.stop()
        server.should_exit = True
        await self.channels.stop()
        await self.workers.stop()
        self.scheduler.stop()
        self.feed.stop()
        # One last round so answers stored during the grace period go out.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.delivery.deliver_due()
        self.delivery.stop()
        summary.stop()
        await asyncio.gather(*background, return_exceptions=True)
        with contextlib.suppress(Exception):
            await serving
        waiter.cancel()
        await self.close()
        log.info("serve.stopped")

    async def close(self) -> None:
        """Release what :meth:`build` opened: HTTP clients, provider clients, the store."""
        if self.transcriber is not None:
            await self.transcriber.aclose()
        if self.webhooks is not None:
            await self.webhooks.close()
        await close_providers(self.providers)
        await self.services.close()


async def _serve_http(server: _Server, listener: socket.socket, mcp: McpEndpoint | None) -> None:
    """Serve HTTP; ``/mcp``'s session manager runs exactly as long (it answers only there)."""
    async with mcp.running() if mcp is not None else contextlib.nullcontext():
        await server.serve(sockets=[listener])


def _mcp_endpoint(services: Services, config: Config) -> McpEndpoint | None:
    if not config.mcp.enabled:
        return None
    return McpEndpoint(services, hosts=allowed_hosts(config.server.host, config.mcp.allowed_hosts))


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PostroomError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(
    data_dir: Path,
    config: Config,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str, int], None] | None = None,
) -> None:
    """``postroom serve``: check, lock the data directory, build, run until stopped."""
    check_bind(host, config.api.token)
    # One server per SQLite file (PIPELINE §2), locked before the database is even opened; a
    # store shared by many nodes would skip this.
    with ServeLock.acquire(data_dir):
        gateway = await Gateway.build(data_dir, config)
        try:
            await gateway.run(host=host, port=port, on_ready=on_ready)
        except BaseException:
            await gateway.close()
            raise
