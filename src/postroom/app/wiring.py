"""The steps of ``postroom serve``'s composition root, one small function each.

:meth:`postroom.app.gateway.Gateway.build` calls them in order; each takes the configuration
and the collaborators built before it, so the whole graph is visible in one place and a test
that builds the gateway (with fakes in its keyword seams) exercises exactly this wiring.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from postroom.api.app import create_api
from postroom.api.routes import ApiContext
from postroom.api.uploads import Uploads, UrlFetcher
from postroom.app.channels import ChannelHost
from postroom.app.detect import ECHO_HINT
from postroom.app.metrics import PrometheusMetrics
from postroom.channels.http import EventStreamSink, WebhookSession, WebhookSink
from postroom.config import DATABASE_FILE, Config
from postroom.core.errors import PostroomError
from postroom.core.folders import FolderSettings
from postroom.dashboard import Dashboard, DashboardContext
from postroom.engine.answer import AnswerWriter
from postroom.engine.attachments import AttachmentLimits
from postroom.engine.clock import Clock
from postroom.engine.compaction import CompactionSettings, Compactor
from postroom.engine.context_builder import ContextBuilder, ContextSettings
from postroom.engine.delivery import DeliveryLoop, DeliverySettings, SinkRouter
from postroom.engine.enrich import Enricher, FetchAttachment, Transcribe
from postroom.engine.files import create_file
from postroom.engine.ingest import IngestLimits
from postroom.engine.memory import MemoryService
from postroom.engine.nodes import NodeService
from postroom.engine.runner import ProviderRunner
from postroom.engine.services import Services
from postroom.engine.sessions import SessionKeeper
from postroom.engine.signals import Signals
from postroom.engine.skills import SkillLimits
from postroom.engine.tools import ToolFactory
from postroom.engine.turns import QueueSettings
from postroom.engine.worker import WorkerPool
from postroom.llm.accounts import AccountPool
from postroom.llm.base import ModelRequest, ModelResponse, Provider
from postroom.llm.models import ModelInfo, ModelTable
from postroom.llm.tokenizer import TokenCounter
from postroom.store.database import open_database
from postroom.store.protocol import SharedStore, Store
from postroom.store.records import NodeRecord
from postroom.store.sqlite import SqliteStore
from postroom.web.chat import WebChat
from postroom.web.tui_socket import TuiSocket

if TYPE_CHECKING:
    from postroom.llm.transcriber import HttpTranscriber

__all__ = [
    "SECRET_FILE",
    "attachment_limits",
    "build_http",
    "build_services",
    "build_sinks",
    "build_workers",
    "delivery_loop",
    "model_table",
    "open_store",
    "owner_id",
    "provider_status",
    "queue_settings",
    "signing_secret",
    "this_node",
    "transcriber",
    "wake_for",
    "web_secret",
    "webhook_platforms",
]

SECRET_FILE = "web-secret"


async def open_store(data_dir: Path, database_url: str | None = None) -> Store:
    """The PostgreSQL database *database_url* names (PIPELINE §9), else the data directory's
    SQLite file; a directory ``postroom init`` never made is refused."""
    if database_url:
        return await open_database(database_url, data_dir / DATABASE_FILE)
    database = data_dir / DATABASE_FILE
    if not database.exists():
        raise PostroomError(
            f"No postroom data directory at {data_dir} (no {DATABASE_FILE}); run "
            "`postroom init` first, or pass --data DIR."
        )
    # Rows are bounded by their UTF-8 bytes as they are stored (PIPELINE §6): no tokenizer
    # loads until a conversation's bound passes its compaction threshold.
    return await SqliteStore.open(database)


def queue_settings(config: Config) -> QueueSettings:
    section = config.queue
    return QueueSettings(
        max_attempts=section.max_attempts,
        backoff_base_s=section.backoff_base_s,
        max_concurrent_turns=section.max_concurrent_turns,
        lease_s=section.lease_s,
        lease_renew_s=section.lease_renew_s,
        shutdown_grace_s=section.shutdown_grace_s,
    )


def build_services(
    store: Store,
    data_dir: Path,
    config: Config,
    *,
    clock: Clock,
    signals: Signals,
    metrics: PrometheusMetrics,
) -> Services:
    return Services.build(
        store,
        folders_dir=data_dir / "folders",
        trigger=config.trigger(),
        defaults=config.folder_defaults(),
        limits=IngestLimits(
            content_bytes=config.limits.content_bytes,
            attachments=attachment_limits(config),
            missing_notice_s=config.routing.missing_folder_notice_s,
            turns_per_minute=config.limits.turns_per_minute,
        ),
        clock=clock,
        queue=queue_settings(config),
        owners=frozenset(config.owners.senders),
        signals=signals,
        metrics=metrics,
        tick_s=config.scheduler.tick_s,
        api_token=config.api.token,
        providers=config.provider_names(),
        access=config.access.policy(),
        model_overrides=config.model_overrides(),
        skills=SkillLimits(
            max_per_run=config.skills.max_per_run, max_chars=config.skills.max_chars
        ),
    )


def transcriber(config: Config) -> HttpTranscriber | None:
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


def webhook_platforms(config: Config) -> list[str]:
    """The platforms whose chats an outbound webhook serves."""
    return [
        platform
        for platform, section in config.channels.get("http", {}).items()
        if isinstance(section, dict) and section.get("outbound_url")
    ]


def build_sinks(config: Config) -> tuple[SinkRouter, WebhookSession | None]:
    """Where deliveries go: the outbound webhooks of ``[channels.http.<platform>]`` (with the
    HTTP session they share, if any), else the event stream. Adapters register themselves."""
    sinks = SinkRouter(fallback=EventStreamSink())
    session: WebhookSession | None = None
    for platform, section in config.channels.get("http", {}).items():
        if not isinstance(section, dict) or not section.get("outbound_url"):
            continue
        session = session or WebhookSession()
        sinks.register(
            platform,
            WebhookSink(
                url=str(section["outbound_url"]),
                secret=str(section["secret"]) if section.get("secret") else None,
                client=session,
            ),
        )
    return sinks, session


def model_table(config: Config) -> ModelTable:
    """The model table with ``[models."<name>"]`` applied: the keys a section sets replace
    what postroom knows of that model, the others keep it."""
    known = ModelTable()
    overrides: dict[str, ModelInfo] = {}
    for name, section in config.models.items():
        base = known.info(name)
        changes = {
            key: getattr(section, key)
            for key in section.model_fields_set
            if getattr(section, key) is not None or key.endswith("_per_mtok")
        }
        overrides[name] = replace(base, **changes)
    return ModelTable(overrides)


def attachment_limits(config: Config) -> AttachmentLimits:
    return AttachmentLimits(
        image_bytes=config.limits.image_bytes, file_bytes=config.limits.file_bytes
    )


def this_node(data_dir: Path, now: datetime) -> NodeRecord:
    """This process as a node (PIPELINE §9); host and port are filled in when it listens."""
    return NodeRecord(
        id=owner_id(data_dir),
        name=f"{socket.gethostname()}:{data_dir.resolve().name}",
        boot_id=uuid.uuid4().hex,
        host="",
        port=0,
        pid=os.getpid(),
        started_at=now,
        heartbeat_at=now,
    )


def wake_for(signals: Signals, channel: str) -> None:
    """Wake the loop a PostgreSQL notification is for (another node committed its work)."""
    waker = {
        "postroom_turns": signals.turns,
        "postroom_deliveries": signals.deliveries,
        "postroom_messages": signals.stored,
    }.get(channel)
    if waker is not None:
        waker.wake()


def owner_id(data_dir: Path) -> str:
    """Stable per host and data directory: tells this server's turns from another's."""
    raw = f"{socket.gethostname()}:{data_dir.resolve()}".encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def build_workers(
    services: Services,
    data_dir: Path,
    config: Config,
    *,
    providers: Mapping[str, Provider],
    transcribe: Transcribe | None,
    metrics: PrometheusMetrics,
    fetch: FetchAttachment | None = None,
) -> WorkerPool:
    """The turn workers with everything a turn uses: the tool loop over the providers, the
    context (personas, memory, compaction, voice notes), the answer writer and the tools."""
    store, clock = services.store, services.clock
    models = model_table(config)
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
        clock=clock,
        settings=CompactionSettings(
            threshold=config.compaction.threshold, keep_last=config.compaction.keep_last
        ),
    )
    context = ContextBuilder(
        store=store,
        catalog=services.catalog,
        clock=clock,
        settings=ContextSettings(
            max_messages=config.context.max_messages,
            max_images=config.context.max_images,
            max_file_chars=config.context.max_file_chars,
            observe_window_messages=config.observe.window_messages,
            observe_window_chars=config.observe.window_chars,
        ),
        memory=memory,
        compactor=compactor,
        enricher=Enricher(
            store=store,
            transcribe=transcribe,
            fetch=fetch,
            limits=attachment_limits(config),
            clock=clock,
        ),
        models=models,
        skills=services.skills,
    )
    return WorkerPool(
        store=store,
        catalog=services.catalog,
        runner=runner,
        signals=services.signals,
        clock=clock,
        queue=services.queue,
        context=context,
        defaults=services.defaults,
        owner=owner_id(data_dir),
        boot_id=uuid.uuid4().hex,
        assistant_name=config.assistant.name,
        metrics=metrics,
        answers=AnswerWriter(
            clock=clock,
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
        folders=services.folders,
        run_timeout_s=config.llm.run_timeout_s,
        max_rest_s=config.llm.max_rest_s,
    )


def delivery_loop(
    services: Services, config: Config, *, sinks: SinkRouter, metrics: PrometheusMetrics
) -> DeliveryLoop:
    return DeliveryLoop(
        store=services.store,
        sinks=sinks,
        catalog=services.catalog,
        defaults=services.defaults,
        signals=services.signals,
        clock=services.clock,
        settings=DeliverySettings(
            backoff_base_s=config.delivery.backoff_base_s,
            ttl_s=config.delivery.ttl_s,
            concurrency=config.delivery.concurrency,
        ),
        metrics=metrics,
        health=services.health,
    )


def provider_status(providers: Mapping[str, Provider]) -> list[dict[str, Any]]:
    """Each provider and its accounts' rests, for ``GET /api/v1/providers`` (never a key)."""
    out: list[dict[str, Any]] = []
    for name, provider in sorted(providers.items()):
        pool = provider if isinstance(provider, AccountPool) else None
        out.append(
            {
                "name": name,
                "accounts": [
                    {
                        "label": s.label,
                        "limited_until": s.limited_until.isoformat() if s.limited_until else None,
                        "strikes": s.strikes,
                    }
                    for s in (pool.status() if pool else [])
                ],
            }
        )
    return out


async def signing_secret(store: Store, data_dir: Path, config: Config) -> bytes:
    """The key cookies and visitor sessions are signed with: in the database when nodes share
    one (PIPELINE §9: any node then accepts what another signed), else in the data directory."""
    if config.database.url:
        async with store.write() as tx:
            text = await tx.shared_secret("web", new=secrets.token_hex(32))
        return text.encode()
    return web_secret(data_dir)


def web_secret(data_dir: Path) -> bytes:
    """The key that signs visitor cookies: made once (0600 from the start), then kept."""
    path = data_dir / SECRET_FILE
    create_file(path, secrets.token_hex(32))
    return path.read_text("utf-8").strip().encode()


def build_http(
    services: Services,
    data_dir: Path,
    config: Config,
    *,
    providers: Mapping[str, Provider],
    channels: ChannelHost,
    metrics: PrometheusMetrics,
    secret: bytes,
    nodes: NodeService,
    fetcher: UrlFetcher | None = None,
    address: Mapping[str, Any] | None = None,
) -> FastAPI:
    """The HTTP side: the API, the web chat, the dashboard, the terminal UI's socket and the
    adapters' hooks. *fetcher*: how attachment URLs are downloaded; *address*: this server as
    the dashboard's nodes page shows it (filled in once it listens)."""
    address = address if address is not None else {}
    sessions = SessionKeeper(secret=secret, tokens=services.tokens, clock=services.clock)
    web = WebChat(
        services=services,
        sessions=sessions,
        secret=secret,
        assistant_name=config.assistant.name,
        setup_hint=ECHO_HINT if config.defaults.provider == "echo" else None,
        attachments=attachment_limits(config),
    )
    http = create_api(
        ApiContext(
            services=services,
            tasks=services.tasks,
            render_metrics=metrics.render,
            provider_status=lambda: provider_status(providers),
            channel_status=channels.status,
            node_status=nodes.list,
            uploads=Uploads(limits=attachment_limits(config), fetcher=fetcher or UrlFetcher()),
            visitor_chat=web.visitor_chat,
            operator_session=web.operator_of,
        ),
        # Attachments sent inline count towards the body; a larger file is sent by its URL.
        body_limit=config.limits.body_bytes,
    )
    http.router.routes.extend(web.routes())
    dashboard = Dashboard(
        context=DashboardContext(
            services=services,
            channel_status=channels.status,
            probe_channels=channels.probe,
            adapter_platforms={c.name: tuple(c.platforms) for c in channels.channels},
            webhook_platforms=tuple(sorted(webhook_platforms(config))),
            server=lambda: dict(address),
            nodes=nodes.list,
            node_id=nodes.me.id,
            node_rows=isinstance(services.store, SharedStore),
        ),
        sessions=sessions,
        assistant_name=config.assistant.name,
    )
    http.router.routes.extend(dashboard.routes())
    http.router.routes.append(
        TuiSocket(
            services=services, token=config.api.token, assistant_name=config.assistant.name
        ).route()
    )
    http.router.routes.extend(channels.routes())
    return http
