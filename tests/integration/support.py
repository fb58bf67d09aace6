"""Builders for integration tests: an engine over a real SQLite file, inbound messages, and
the folders and route table of ROUTING §7."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import structlog

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.core import InboundMessage, Trigger, Verb
from postroom.core.folders import FolderDefaults
from postroom.engine import FolderSpec, IngestLimits, Services
from postroom.store import SqliteStore, Store, open_database
from postroom.store.records import RunRecord

from gateway_support import new_data_dir

if TYPE_CHECKING:
    from postroom.app.gateway import Gateway

#: Variables that would make ``init`` detect a provider or point a command elsewhere.
VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")

_ids = itertools.count(1)

SPEC_FOLDERS = (
    "atlas",
    "atlas/content",
    "atlas/social",
    "atlas/legal",
    "atlas/dm",
    "atlas/posts",
    "main",
    "acme",
    "acme/eng",
    "other",
)
SPEC_ROWS = (
    (-10, "chat_jid=telegram:user/12345", "atlas/legal"),
    (0, "platform=telegram", "atlas"),
    (0, "platform=discord room=dm/*", "atlas/dm"),
    (0, "platform=reddit verb=post", "atlas/posts"),
    (10, "platform=discord room=guild/sloth", "main"),
    (20, "platform=discord room=guild/* verb=mention", "main"),
    (30, "platform=discord room=guild/*", "main#observe"),
    (40, "chat_jid=hook:acme/eng/github", "acme/eng#deploy"),
    (9999, "", "atlas"),
)


def inbound(
    chat_jid: str,
    text: str,
    *,
    sender: str = "telegram:user/42",
    id: str | None = None,
    verb: Verb = Verb.MESSAGE,
    reply_to: str | None = None,
    topic: str = "",
    is_from_me: bool = False,
    mentioned: bool = False,
) -> InboundMessage:
    return InboundMessage(
        id=id or f"m{next(_ids)}",
        chat_jid=chat_jid,
        sender=sender,
        content=text,
        timestamp=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        sender_name=sender.rpartition("/")[2],
        reply_to=reply_to,
        topic=topic,
        verb=verb,
        is_from_me=is_from_me,
        mentioned=mentioned,
    )


async def open_services(
    tmp_path: Path,
    clock: Callable[[], datetime],
    *,
    trace: Callable[[str], None] | None = None,
    name: str = "postroom.db",
) -> Services:
    url = os.environ.get("POSTROOM_TEST_DATABASE_URL")
    # As postroom serve opens it: rows bounded by their bytes, counted only near compaction.
    store: Store = (
        await open_database(url, tmp_path / name)
        if url and trace is None
        else await SqliteStore.open(tmp_path / name, trace=trace)
    )
    return Services.build(
        store,
        folders_dir=tmp_path / "folders",
        trigger=Trigger(),
        defaults=FolderDefaults(),
        limits=IngestLimits(content_bytes=4096, missing_notice_s=3600),
        clock=clock,
    )


async def open_gateway(tmp_path: Path, clock: Callable[[], datetime]) -> Gateway:
    """``postroom serve``'s components (``Gateway.build``) over a fresh data directory in
    *tmp_path*, with the same limits as :func:`open_services`; nothing is started."""
    config = Config.model_validate(
        {
            "limits": {"content_bytes": 4096},
            "routing": {"missing_folder_notice": "1h"},
            **engine_section(),
        }
    )
    return await Gateway.build(await new_data_dir(tmp_path), config, clock=clock)


#: For a test of SQLite's own locking: it runs on SQLite only (not skipped on PostgreSQL).
SQLITE_ONLY = pytest.mark.parametrize("db_engine", ["sqlite"], indirect=True)


async def another_process_store(data_dir: Path) -> Store:
    """The data directory's database opened a second time, as another process would."""
    return await open_database(
        os.environ.get("POSTROOM_TEST_DATABASE_URL"), data_dir / "postroom.db"
    )


def engine_section() -> dict[str, dict[str, str]]:
    """The ``[database]`` section of the engine the test runs on (see the ``db_engine``
    fixture): none for SQLite."""
    url = os.environ.get("POSTROOM_TEST_DATABASE_URL")
    return {"database": {"url": url}} if url else {}


async def seed_spec_table(services: Services) -> None:
    """ROUTING §7: the folders, and rows 1-9 with exactly the spec's ids."""
    for path in SPEC_FOLDERS:
        if path not in {f.path for f in await services.folders.list_folders()}:
            await services.folders.add_folder(path, FolderSpec(), actor="test")
    for seq, match, target in SPEC_ROWS:
        await services.routes.add_route(seq, match, target, actor="test")


async def eventually(check: Callable[[], Any], what: str, *, timeout_s: float = 20.0) -> Any:
    """Wait (polling briefly) until *check* holds, and return what it gave; fail with *what*
    after a generous timeout."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                result = check()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return result
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def queue_idle(services: Services, *, outbox: bool = True) -> bool:
    """No turn queued or running (and, with *outbox*, no delivery pending): everything written
    so far has been worked off. The positive signal to wait for before asserting that nothing
    more happened — never a sleep."""
    async with services.store.read() as tx:
        counts = await tx.job_counts()
    if outbox and counts["deliveries_pending"]:
        return False
    return counts["queued"] == 0 and counts["running"] == 0


async def runs(services: Services) -> list[RunRecord]:
    """Every run record, in id order."""
    found: list[RunRecord] = []
    async with services.store.read() as tx:
        for run_id in itertools.count(1):
            run = await tx.get_run(run_id)
            if run is None:
                return found
            found.append(run)
    raise AssertionError("unreachable")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """For ``CliRunner.invoke``: every configuration variable of the calling environment unset
    (CI may set some), and the terminal's width too, plus *extra*."""
    env: dict[str, str | None] = {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_")
        or name in VENDOR_VARIABLES
        or name in ("COLUMNS", "TTY_COMPATIBLE")
    }
    env.update(extra or {})
    return env


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI points logging at the stream ``CliRunner`` lends it, closed once the command
    ends; restore the previous set-up after."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


def api_client(gateway: Gateway, data_dir: Path) -> httpx.AsyncClient:
    """A client of the gateway's real ASGI app with the data directory's API token."""
    token = tomllib.loads((data_dir / "postroom.toml").read_text("utf-8"))["api"]["token"]
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway.http),
        base_url="http://test",
        headers={"Authorization": f"Bearer {token}"},
    )
