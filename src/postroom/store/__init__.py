"""Storage: the :class:`Store` protocol and its implementations.

Hot paths are raw SQL through the driver; schema changes are numbered migrations.
"""

from postroom.store.database import open_database
from postroom.store.protocol import PriorOutcome, SharedStore, Store, StoreTx, TurnRow
from postroom.store.records import (
    DropRecord,
    NewMessage,
    RouteAuditRecord,
    RouteRecord,
    RouteSpec,
)
from postroom.store.sqlite import SchemaTooNew, SqliteStore

__all__ = [
    "DropRecord",
    "NewMessage",
    "PriorOutcome",
    "RouteAuditRecord",
    "RouteRecord",
    "RouteSpec",
    "SchemaTooNew",
    "SharedStore",
    "SqliteStore",
    "Store",
    "StoreTx",
    "TurnRow",
    "open_database",
]
