"""The PostgreSQL implementation of the store: many processes on one database."""

from postroom.store.postgres.migrate import apply_pg_migrations
from postroom.store.postgres.statements import PgTx
from postroom.store.postgres.store import PostgresStore, is_postgres_url

__all__ = ["PgTx", "PostgresStore", "apply_pg_migrations", "is_postgres_url"]
