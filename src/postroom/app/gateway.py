"""``postroom serve``: the one place every component is built and started.

Reads the configuration once, builds the store, the engine, the workers, the delivery loop, the
scheduler, the live feed, the HTTP API and the web chat with their dependencies, runs them, and
shuts them down in order on SIGINT/SIGTERM: stop accepting, let running turns finish for the
grace period, release what is left, flush what can be delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import os
import secrets
import signal
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn
from fastapi import FastAPI

from postroom.api.app import create_api
from postroom.api.routes import ApiContext
from postroom.app.channels import ChannelHost, build_channels
from postroom.app.detect import ECHO_HINT
from postroom.app.metrics import PrometheusMetrics
from postroom.app.providers import build_providers, close_providers
from postroom.channels.base import ChannelContext
from postroom.channels.http import EventStreamSink, WebhookSession, WebhookSink
from postroom.config import CONFIG_FILE, DATABASE_FILE, Config
from postroom.core.errors import ConfigError, PostroomError
from postroom.core.folders import FolderSettings
from postroom.engine.answer import AnswerWriter
from postroom.engine.compaction import CompactionSettings, Compactor
from postroom.engine.context_builder import ContextBuilder
from postroom.engine.delivery import DeliveryLoop, DeliverySettings, SinkRouter
from postroom.engine.enrich import Enricher
from postroom.engine.feed import MessageFeed
from postroom.engine.ingest import IngestLimits
from postroom.engine.memory import MemoryService
from postroom.engine.persona import PersonaSource
from postroom.engine.runner import ProviderRunner
from postroom.engine.services import Services
from postroom.engine.signals import Signals
from postroom.engine.tasks import Scheduler, TaskService
from postroom.engine.tools import ToolFactory
from postroom.engine.turns import QueueSettings
from postroom.engine.worker import ContextSettings, WorkerPool
from postroom.llm.accounts import AccountPool
from postroom.llm.base import ModelRequest, ModelResponse, Provider
from postroom.llm.models import ModelInfo, ModelTable
from postroom.llm.tokenizer import TokenCounter
from postroom.store.sqlite import SqliteStore
from postroom.web.chat import WebChat
from postroom.web.tui_socket import TuiSocket

__all__ = ["Gateway", "check_bind", "serve"]

if TYPE_CHECKING:
    from postroom.llm.transcriber import HttpTranscriber

log = structlog.get_logger(__name__)

SECRET_FILE = "web-secret"


def check_bind(host: str, token: str) -> None:
    """Refuse a non-loopback bind without an API token (INTERFACES §4)."""
    if token:
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


def _transcriber(config: Config) -> HttpTranscriber | None:
    """The voice-note transcriber, when one is configured; httpx is imported only then (it
    and its dependencies are a tenth of a second of start-up)."""
    section = config.transcriber
    if not section.base_url or not section.model:
        return None
    import httpx

    from postroom.llm.transcriber import HttpTranscriber

    return HttpTranscriber(
        base_url=section.base_url,
        model=section.model,
        api_key=section.api_key,
        client=httpx.AsyncClient(timeout=httpx.Timeout(10.0)),
    )


def _web_secret(data_dir: Path) -> bytes:
    path = data_dir / SECRET_FILE
    if not path.exists():
        path.write_text(secrets.token_hex(32), "utf-8")
        path.chmod(0o600)
    return path.read_text("utf-8").strip().encode()


def _owner_id(data_dir: Path) -> str:
    """Stable per host and data directory: tells this server's turns from another's."""
    raw = f"{socket.gethostname()}:{data_dir.resolve()}".encode()
    return hashlib.sha256(raw).hexdigest()[:16]


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

    @classmethod
    async def build(cls, data_dir: Path, config: Config) -> Gateway:
        database = data_dir / DATABASE_FILE
        if not database.exists():
            raise PostroomError(
                f"No postroom data directory at {data_dir} (no {DATABASE_FILE}); run "
                "`postroom init` first, or pass --data DIR."
            )
        store = await SqliteStore.open(database)
        queue = QueueSettings(
            max_attempts=config.queue.max_attempts,
            backoff_base_s=config.queue.backoff_base_s,
            max_concurrent_turns=config.queue.max_concurrent_turns,
            lease_s=config.queue.lease_s,
            lease_renew_s=config.queue.lease_renew_s,
            shutdown_grace_s=config.queue.shutdown_grace_s,
        )
        signals = Signals()
        metrics = PrometheusMetrics(store)
        services = Services.build(
            store,
            folders_dir=data_dir / "folders",
            trigger=config.trigger(),
            defaults=config.folder_defaults(),
            limits=IngestLimits(
                content_bytes=config.limits.content_bytes,
                missing_notice_s=config.routing.missing_folder_notice_s,
            ),
            queue=queue,
            owners=frozenset(config.owners.senders),
            signals=signals,
            metrics=metrics,
        )
        async with store.read() as tx:
            await services.catalog.reload(tx)
        transcriber = _transcriber(config)
        webhooks: WebhookSession | None = None
        sinks = SinkRouter(fallback=EventStreamSink())
        channels = ChannelHost(build_channels(config), signals=signals, sinks=sinks)
        for platform, section in config.channels.get("http", {}).items():
            if not isinstance(section, dict) or not section.get("outbound_url"):
                continue
            webhooks = webhooks or WebhookSession()
            sinks.register(
                platform,
                WebhookSink(
                    url=str(section["outbound_url"]),
                    secret=str(section["secret"]) if section.get("secret") else None,
                    client=webhooks,
                ),
            )
        tasks = services.tasks
        providers = build_providers(config, clock=services.clock)
        models = ModelTable(
            {
                name: ModelInfo(m.context_window, m.input_per_mtok, m.output_per_mtok)
                for name, m in config.models.items()
            }
        )
        runner = ProviderRunner(
            providers,
            max_model_calls=config.llm.max_model_calls,
            models=models,
            call_timeout_s=config.llm.call_timeout_s,
        )
        memory = MemoryService(store=store)

        async def complete(request: ModelRequest, settings: FolderSettings) -> ModelResponse:
            return await runner.complete(request, settings)

        compactor = Compactor(
            store=store,
            complete=complete,
            memory=memory,
            tokens=TokenCounter(),
            models=models,
            clock=services.clock,
            settings=CompactionSettings(
                threshold=config.compaction.threshold, keep_last=config.compaction.keep_last
            ),
        )
        workers = WorkerPool(
            store=store,
            catalog=services.catalog,
            runner=runner,
            signals=signals,
            clock=services.clock,
            queue=queue,
            context=ContextBuilder(
                store=store,
                catalog=services.catalog,
                clock=services.clock,
                settings=ContextSettings(
                    max_messages=config.context.max_messages,
                    observe_window_messages=config.observe.window_messages,
                    observe_window_chars=config.observe.window_chars,
                ),
                personas=PersonaSource(data_dir / "folders"),
                memory=memory,
                compactor=compactor,
                enricher=Enricher(store=store, transcribe=transcriber),
            ),
            defaults=services.defaults,
            owner=_owner_id(data_dir),
            boot_id=uuid.uuid4().hex,
            assistant_name=config.assistant.name,
            metrics=metrics,
            answers=AnswerWriter(
                clock=services.clock,
                memory=memory,
                folders=services.folders,
                tasks=services.tasks,
                assistant_name=config.assistant.name,
                max_depth=config.delegation.max_depth,
                max_attempts=config.queue.max_attempts,
            ),
            tools=ToolFactory(
                memory=memory,
                routes=services.routes,
                folders=services.folders,
                max_depth=config.delegation.max_depth,
            ),
            run_timeout_s=config.llm.run_timeout_s,
            max_rest_s=config.llm.max_rest_s,
        )
        delivery = DeliveryLoop(
            store=store,
            sinks=sinks,
            catalog=services.catalog,
            defaults=services.defaults,
            signals=signals,
            clock=services.clock,
            settings=DeliverySettings(
                backoff_base_s=config.delivery.backoff_base_s, ttl_s=config.delivery.ttl_s
            ),
            metrics=metrics,
        )
        scheduler = Scheduler(
            store=store,
            catalog=services.catalog,
            signals=signals,
            clock=services.clock,
            queue=queue,
            tick_s=config.scheduler.tick_s,
        )
        feed = MessageFeed(store=store, signals=signals)

        def provider_status() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for name, provider in sorted(providers.items()):
                pool = provider if isinstance(provider, AccountPool) else None
                out.append(
                    {
                        "name": name,
                        "accounts": [
                            {
                                "label": s.label,
                                "limited_until": s.limited_until.isoformat()
                                if s.limited_until
                                else None,
                                "strikes": s.strikes,
                            }
                            for s in (pool.status() if pool else [])
                        ],
                    }
                )
            return out

        http = create_api(
            ApiContext(
                services=services,
                tasks=tasks,
                render_metrics=metrics.render,
                provider_status=provider_status,
                channel_status=channels.status,
            ),
            token=config.api.token,
            body_limit=config.limits.body_bytes,
        )
        web = WebChat(
            services=services,
            token=config.api.token,
            secret=_web_secret(data_dir),
            assistant_name=config.assistant.name,
            setup_hint=ECHO_HINT if config.defaults.provider == "echo" else None,
        )
        http.router.routes.extend(web.routes())
        http.router.routes.append(
            TuiSocket(
                services=services, token=config.api.token, assistant_name=config.assistant.name
            ).route()
        )
        http.router.routes.extend(channels.routes())
        return cls(
            config=config,
            services=services,
            tasks=tasks,
            workers=workers,
            delivery=delivery,
            scheduler=scheduler,
            feed=feed,
            http=http,
            transcriber=transcriber,
            webhooks=webhooks,
            metrics=metrics,
            channels=channels,
            providers=providers,
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
            )
        )
        background: list[asyncio.Task[Any]] = [
            asyncio.create_task(self.delivery.run(), name="delivery"),
            asyncio.create_task(self.scheduler.run(), name="scheduler"),
            asyncio.create_task(self.feed.run(), name="feed"),
        ]
        serving = asyncio.create_task(server.serve(sockets=[listener]), name="http")
        listening = asyncio.create_task(server.listening.wait(), name="http-listening")
        await asyncio.wait({serving, listening}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            listening.cancel()
            await serving  # raises the bind error, if any
            raise PostroomError(f"The HTTP server on {host}:{port} stopped at start.")
        log.info("serve.ready", host=host, port=port, pid=os.getpid())
        if on_ready is not None:
            on_ready(host, port)
        if self.webhooks is not None:
            self.webhooks.preload()
        waiter = asyncio.create_task(stop.wait(), name="stop-signal")
        await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
        log.info("serve.stopping")
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
    gateway = await Gateway.build(data_dir, config)
    try:
        await gateway.run(host=host, port=port, on_ready=on_ready)
    except BaseException:
        await gateway.close()
        raise
