"""A real postroom gateway for channel tests: a data directory made by ``postroom init``, the
channel sections written into its ``postroom.toml``, and ``Gateway.build`` + ``run`` on a free
port in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import structlog
from typer.testing import CliRunner, Result

from postroom.app.gateway import Gateway
from postroom.cli.main import app
from postroom.config import CONFIG_FILE, DATABASE_FILE, load_config

from gateway_support import serving

VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")

runner = CliRunner()

#: Direct messages from anyone are answered: for tests of an adapter's path, not of admission
#: (by default a stranger's DM only gets a pairing code: tests/integration/test_access.py).
OPEN_DMS = '\n[access]\ndm_policy = "open"\n'


def clean_env() -> dict[str, str | None]:
    """Unset every configuration variable of the calling environment (CI may set some)."""
    return {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES
    }


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI points logging at the stream ``CliRunner`` lends it; put the previous set-up
    back so later tests never log into a closed file."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


def cli(data: Path, *args: str) -> Result:
    with logging_kept():
        return runner.invoke(app, ["--data", str(data), *args], env=clean_env())


def init_data_dir(directory: Path) -> Path:
    result = cli(directory, "init")
    assert result.exit_code == 0, result.output
    return directory


def configure(data: Path, sections: str, **defaults: str) -> None:
    """Add ``[defaults]`` keys and whole sections (TOML text) to the directory's config."""
    path = data / CONFIG_FILE
    text = path.read_text("utf-8")
    extra = "".join(f'{key} = "{value}"\n' for key, value in defaults.items())
    text = text.replace("[defaults]\n", "[defaults]\n" + extra, 1)
    path.write_text(text + "\n" + sections, "utf-8")


@contextlib.asynccontextmanager
async def running_gateway(data: Path, *, port: int = 0) -> AsyncIterator[tuple[Gateway, str]]:
    """``postroom serve`` in this event loop: yields the gateway and its base URL (on a free
    port unless *port* is given)."""
    gateway = await Gateway.build(data, load_config(data, {}))
    async with serving(gateway, port=port) as url:
        yield gateway, url


# The name stays ``timeout`` for the tests that pass it; the deadline is checked by hand.
async def eventually(what: Callable[[], Any], timeout: float = 15.0) -> Any:  # noqa: ASYNC109
    """Poll *what* until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def stored_rows(data: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read the gateway's database directly (WAL: safe while it runs)."""
    with contextlib.closing(sqlite3.connect(data / DATABASE_FILE)) as db:
        return db.execute(sql, params).fetchall()
