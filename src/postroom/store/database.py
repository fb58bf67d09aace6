"""Which store a deployment uses: SQLite in the data directory, or the PostgreSQL database
``[database] url`` names (PIPELINE §9)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from postroom.core.errors import PostroomError
from postroom.store.protocol import Store
from postroom.store.sqlite import SqliteStore
from postroom.store.sqlite.base import token_bound

__all__ = ["open_database"]


async def open_database(
    url: str | None, sqlite_path: Path, *, count_tokens: Callable[[str], int] = token_bound
) -> Store:
    """The PostgreSQL store at *url* when one is given, else the SQLite file *sqlite_path*;
    *count_tokens* bounds a row's tokens from above as it joins a conversation."""
    if not url:
        return await SqliteStore.open(sqlite_path, count_tokens=count_tokens)
    if not url.startswith(("postgresql://", "postgres://")):
        raise PostroomError(
            f"[database] url must start with postgresql:// (got {url.split(':', 1)[0]}:…)."
        )
    # asyncpg is imported only by deployments that use it: a tenth of a second of every
    # start-up (and of every CLI command) on SQLite otherwise.
    from postroom.store.postgres import PostgresStore

    return await PostgresStore.open(url, count_tokens=count_tokens)
