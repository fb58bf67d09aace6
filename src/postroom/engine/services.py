"""The engine's components built together over one store, for the CLI and the server.

This is wiring, not a facade: callers use the components directly (``services.routes``,
``services.ingest``...). Each still receives its collaborators in its constructor, so tests
can build any of them alone.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from postroom.core.access import AccessPolicy
from postroom.core.folder_settings import BUILTIN_PROVIDERS
from postroom.core.folders import FolderDefaults
from postroom.core.trigger import Trigger
from postroom.engine.access import AccessService
from postroom.engine.budgets import BudgetService, ModelOverrides
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock, system_clock
from postroom.engine.deliveries import DeliveryService
from postroom.engine.folders import FolderService
from postroom.engine.health import DeliveryHealth
from postroom.engine.history import History
from postroom.engine.ingest import IngestLimits, Ingestor
from postroom.engine.journey import JourneyService
from postroom.engine.metrics import Metrics
from postroom.engine.router import Router
from postroom.engine.routes import RouteService
from postroom.engine.signals import Signals
from postroom.engine.skills import SkillLimits, SkillService
from postroom.engine.tasks import DEFAULT_TICK_S, TaskService
from postroom.engine.tokens import TokenService
from postroom.engine.turn_limit import TurnLimiter
from postroom.engine.turns import QueueSettings, TurnService
from postroom.store.database import open_database
from postroom.store.protocol import Store

__all__ = ["Services"]


@dataclass(slots=True)
class Services:
    store: Store
    catalog: Catalog
    router: Router
    routes: RouteService
    folders: FolderService
    ingest: Ingestor
    turns: TurnService
    tasks: TaskService
    history: History
    tokens: TokenService
    access: AccessService
    budgets: BudgetService
    skills: SkillService
    signals: Signals
    defaults: FolderDefaults
    queue: QueueSettings
    clock: Clock
    deliveries: DeliveryService
    journeys: JourneyService
    #: Sends per platform, recorded by the delivery loop, for the dashboard's health.
    health: DeliveryHealth

    @classmethod
    def build(
        cls,
        store: Store,
        *,
        folders_dir: Path,
        trigger: Trigger,
        defaults: FolderDefaults,
        limits: IngestLimits,
        clock: Clock = system_clock,
        queue: QueueSettings | None = None,
        owners: frozenset[str] = frozenset(),
        signals: Signals | None = None,
        metrics: Metrics | None = None,
        tick_s: float = DEFAULT_TICK_S,
        api_token: str = "",
        providers: Collection[str] = BUILTIN_PROVIDERS,
        access: AccessPolicy | None = None,
        model_overrides: ModelOverrides | None = None,
        skills: SkillLimits | None = None,
    ) -> Services:
        """*providers*: the names a folder's ``provider`` may take (built-in and configured);
        *skills*: how many skills a run takes, within how many characters; *access*: the
        admission policies (ROUTING §8), and *owners* are owner principals too."""
        catalog = Catalog(owners=owners)
        signals = signals or Signals()
        queue = queue or QueueSettings()
        access = access or AccessPolicy()
        router = Router(
            store=store,
            catalog=catalog,
            trigger=trigger,
            clock=clock,
            access=access,
            limiter=TurnLimiter(turns_per_minute=limits.turns_per_minute, owners=owners),
        )
        folders = FolderService(
            store=store,
            catalog=catalog,
            clock=clock,
            folders_dir=folders_dir,
            providers=providers,
        )
        return cls(
            store=store,
            catalog=catalog,
            router=router,
            routes=RouteService(store=store, catalog=catalog, clock=clock, trigger=trigger),
            folders=folders,
            ingest=Ingestor(
                store=store,
                router=router,
                catalog=catalog,
                folders=folders,
                clock=clock,
                limits=limits,
                signals=signals,
                queue=queue,
                defaults=defaults,
                owners=owners,
                metrics=metrics,
            ),
            turns=TurnService(store=store, signals=signals, clock=clock),
            tasks=TaskService(
                store=store, catalog=catalog, signals=signals, clock=clock, tick_s=tick_s
            ),
            history=History(store=store),
            tokens=TokenService(store=store, clock=clock, owner_secret=api_token),
            access=AccessService(
                store=store, catalog=catalog, clock=clock, policy=access, signals=signals
            ),
            budgets=BudgetService(store=store, defaults=defaults, model_overrides=model_overrides),
            skills=SkillService(store=store, clock=clock, folders_dir=folders_dir, limits=skills),
            signals=signals,
            defaults=defaults,
            queue=queue,
            clock=clock,
            deliveries=DeliveryService(store=store, signals=signals, clock=clock),
            journeys=JourneyService(store=store),
            health=DeliveryHealth(clock=clock),
        )

    @classmethod
    async def open_database(
        cls,
        database: Path,
        *,
        database_url: str | None = None,
        folders_dir: Path,
        trigger: Trigger,
        defaults: FolderDefaults,
        limits: IngestLimits,
        clock: Clock = system_clock,
        queue: QueueSettings | None = None,
        owners: frozenset[str] = frozenset(),
        signals: Signals | None = None,
        tick_s: float = DEFAULT_TICK_S,
        api_token: str = "",
        providers: Collection[str] = BUILTIN_PROVIDERS,
        access: AccessPolicy | None = None,
        model_overrides: ModelOverrides | None = None,
    ) -> Services:
        store = await open_database(database_url, database)
        return cls.build(
            store,
            folders_dir=folders_dir,
            trigger=trigger,
            defaults=defaults,
            limits=limits,
            clock=clock,
            queue=queue,
            owners=owners,
            signals=signals,
            tick_s=tick_s,
            api_token=api_token,
            providers=providers,
            access=access,
            model_overrides=model_overrides,
        )

    async def close(self) -> None:
        await self.store.close()
