"""Fixtures shared by every test directory.

The storage, queue, ingest, delivery, scheduler and worker suites run against both engines: a
module opts in with ``pytestmark = pytest.mark.usefixtures("db_engine")`` (every test then runs
once on SQLite and once on PostgreSQL) or takes the ``store`` fixture. PostgreSQL tests use a
database of their own, ``postroom_test_<random>``, made for the test run and dropped after it;
each test gets a fresh schema in it. Without a server they are skipped, saying why; with
``POSTROOM_TEST_PG_DSN`` set (CI sets it) a server that does not answer fails them instead.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import structlog
from hypothesis import HealthCheck, settings

from postroom.store import Store, open_database

from fakeclock import FakeClock

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Which database a test's store uses (read by the test helpers that open one).
ENGINE_URL_VARIABLE = "POSTROOM_TEST_DATABASE_URL"

# How fast inputs are generated depends on the machine's load, not on the code under test:
# a busy machine must not fail a property that holds.
settings.register_profile("postroom", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("postroom")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _with_database(dsn: str, database: str, **query: str) -> str:
    parts = urlsplit(dsn)
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", params, ""))


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The test run's own PostgreSQL database (its URL), dropped when the run ends."""
    required = bool(os.environ.get("POSTROOM_TEST_PG_DSN"))
    dsn = os.environ.get("POSTROOM_TEST_PG_DSN") or DEFAULT_PG_DSN
    name = f"postroom_test_{secrets.token_hex(6)}"
    try:
        asyncio.run(_admin(dsn, f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        reason = f"no PostgreSQL server answers at {dsn} ({exc})"
        if required:
            pytest.fail(f"POSTROOM_TEST_PG_DSN is set but {reason}")
        pytest.skip(reason)
    yield _with_database(dsn, name)
    asyncio.run(_admin(dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A URL of the run's database whose search path is a fresh schema of this test's own."""
    schema = f"t_{secrets.token_hex(6)}"
    asyncio.run(_admin(pg_database, f'CREATE SCHEMA "{schema}"'))
    parts = urlsplit(pg_database)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, f"search_path={schema}", ""))


@pytest.fixture(params=["sqlite", "postgres"])
def db_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The engine of this run of the test; the helpers that open a store read it from
    ``POSTROOM_TEST_DATABASE_URL`` (empty: SQLite in the data directory)."""
    if request.param == "postgres":
        monkeypatch.setenv(ENGINE_URL_VARIABLE, request.getfixturevalue("pg_url"))
    else:
        monkeypatch.delenv(ENGINE_URL_VARIABLE, raising=False)
    return str(request.param)


@pytest.fixture
async def store(db_engine: str, tmp_path: Path) -> AsyncIterator[Store]:
    """An open store of this run's engine."""
    opened = await open_database(os.environ.get(ENGINE_URL_VARIABLE), tmp_path / "postroom.db")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts from structlog's defaults: a level set by an earlier test's server
    (``configure_logging``) must not filter the events a later test captures."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
