"""The SQLite implementation of the store (the embedded default)."""

from postroom.store.sqlite.migrate import SchemaTooNew, apply_migrations
from postroom.store.sqlite.store import SqliteStore, SqliteTx

__all__ = ["SchemaTooNew", "SqliteStore", "SqliteTx", "apply_migrations"]
