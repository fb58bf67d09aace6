"""The engine: ingest, the router service, the turn queue and workers, the outbox and delivery,
the scheduler, memory and compaction, the route and folder tools.

State lookups and side effects around the pure domain of :mod:`postroom.core`, over a
:class:`postroom.store.Store`.
"""

from postroom.engine.access import AccessService, Approval, pairing_to_dict, principal_to_dict
from postroom.engine.answer import AnswerWriter
from postroom.engine.bootstrap import BootstrapReport, bootstrap
from postroom.engine.budgets import BudgetService, BudgetStatus
from postroom.engine.catalog import Catalog, CatalogSnapshot
from postroom.engine.clock import Clock, system_clock
from postroom.engine.compaction import CompactionSettings, Compactor
from postroom.engine.context_builder import ContextBuilder, ContextSettings
from postroom.engine.delivery import DeliveryLoop, DeliverySettings, SinkRouter
from postroom.engine.engagement import Disengaged, disengage
from postroom.engine.feed import MessageFeed
from postroom.engine.folders import FolderService, FolderSpec, folder_to_dict
from postroom.engine.history import History
from postroom.engine.ingest import IngestLimits, Ingestor, IngestResult
from postroom.engine.memory import MemoryService
from postroom.engine.notices import host_message, post_notice, store_message_direct
from postroom.engine.preview import RoutePreview, preview_traffic
from postroom.engine.router import Router
from postroom.engine.routes import RouteService, RouteView
from postroom.engine.runner import AgentResult, AgentRunner, ProviderRunner
from postroom.engine.services import Services
from postroom.engine.signals import EventBus, Signals
from postroom.engine.tasks import Scheduler, TaskService
from postroom.engine.tokens import OWNER, NewToken, Principal, Scope, TokenService
from postroom.engine.tools import ToolFactory
from postroom.engine.turns import QueueSettings, TurnService
from postroom.engine.worker import WorkerPool

__all__ = [
    "OWNER",
    "AccessService",
    "AgentResult",
    "AgentRunner",
    "AnswerWriter",
    "Approval",
    "BootstrapReport",
    "BudgetService",
    "BudgetStatus",
    "Catalog",
    "CatalogSnapshot",
    "Clock",
    "CompactionSettings",
    "Compactor",
    "ContextBuilder",
    "ContextSettings",
    "DeliveryLoop",
    "DeliverySettings",
    "Disengaged",
    "EventBus",
    "FolderService",
    "FolderSpec",
    "History",
    "IngestLimits",
    "IngestResult",
    "Ingestor",
    "MemoryService",
    "MessageFeed",
    "NewToken",
    "Principal",
    "ProviderRunner",
    "QueueSettings",
    "RoutePreview",
    "RouteService",
    "RouteView",
    "Router",
    "Scheduler",
    "Scope",
    "Services",
    "Signals",
    "SinkRouter",
    "TaskService",
    "TokenService",
    "ToolFactory",
    "TurnService",
    "WorkerPool",
    "bootstrap",
    "disengage",
    "folder_to_dict",
    "host_message",
    "pairing_to_dict",
    "post_notice",
    "preview_traffic",
    "principal_to_dict",
    "store_message_direct",
    "system_clock",
]
