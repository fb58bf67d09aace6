"""The engine: ingest, the router service, the route and folder tools.

State lookups and side effects around the pure domain of :mod:`postroom.core`, over a
:class:`postroom.store.Store`.
"""

from postroom.engine.bootstrap import BootstrapReport, bootstrap
from postroom.engine.catalog import Catalog, CatalogSnapshot
from postroom.engine.clock import Clock, system_clock
from postroom.engine.folders import FolderService, FolderSpec, folder_to_dict
from postroom.engine.ingest import IngestLimits, Ingestor, IngestResult
from postroom.engine.notices import host_message, post_notice, store_message_direct
from postroom.engine.router import Router
from postroom.engine.routes import RouteService, RouteView
from postroom.engine.services import Services

__all__ = [
    "BootstrapReport",
    "Catalog",
    "CatalogSnapshot",
    "Clock",
    "FolderService",
    "FolderSpec",
    "IngestLimits",
    "IngestResult",
    "Ingestor",
    "RouteService",
    "RouteView",
    "Router",
    "Services",
    "bootstrap",
    "folder_to_dict",
    "host_message",
    "post_notice",
    "store_message_direct",
    "system_clock",
]
