"""What every CLI command shares: the data directory, opening the engine, printing, errors.

User mistakes end as one sentence on stderr and exit status 1 — never a traceback.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

from postroom.config import CONFIG_FILE, DATABASE_FILE, Config, load_config
from postroom.core.errors import PostroomError
from postroom.engine.attachments import AttachmentLimits
from postroom.engine.ingest import IngestLimits
from postroom.engine.services import Services
from postroom.engine.turns import QueueSettings

__all__ = [
    "CliContext",
    "actor",
    "fail",
    "print_json",
    "run",
    "services_for",
    "shorten",
    "stdout",
    "table",
]

T = TypeVar("T")

#: The width of output that is not a terminal: wide enough that no table is ever cut.
UNLIMITED_WIDTH = 1_000_000


class _Console(Console):
    """A console as wide as the terminal, and unlimited when the output is piped or redirected:
    a table then prints in full, one row per line, for ``grep`` and friends (Rich would
    otherwise fold it to 80 columns, or to the width of a terminal on another stream)."""

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, highlight=False, soft_wrap=True)
        # Rich reads COLUMNS and LINES once, here; these consoles live as long as the process,
        # so the size is read each time it is needed instead.
        self._width = self._height = None

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(UNLIMITED_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


stdout = _Console()
stderr = _Console(stderr=True)


def table(*headers: str, keep: tuple[str, ...] = ()) -> Table:
    """A table that fits the terminal, and prints in full when piped: a long value wraps
    between words (a word longer than its column is folded onto the next line, never cut).
    Columns named in *keep* (ids, numbers, times) stay on one line; the others give way,
    the widest first."""
    out = Table()
    for header in headers:
        if header in keep:
            out.add_column(header, no_wrap=True, overflow="ignore", min_width=len(header))
        else:
            out.add_column(header, overflow="fold")
    return out


def shorten(text: str, limit: int) -> str:
    """*text* on one line, cut at a word boundary with ``…`` when longer than *limit*."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,.;:") + "…"


@dataclass(frozen=True, slots=True)
class CliContext:
    """Options of the root command, handed to every subcommand through ``ctx.obj``."""

    data_dir: Path

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE_FILE

    @property
    def folders_dir(self) -> Path:
        return self.data_dir / "folders"

    def config(self) -> Config:
        return load_config(self.data_dir, os.environ)

    def config_with(self, overrides: dict[str, Any]) -> Config:
        """The configuration with command-line flags on top (flag > environment > file)."""
        return load_config(self.data_dir, os.environ, overrides)

    def require_initialized(self) -> None:
        if self.config().database.url:
            return  # PIPELINE §9: the database is PostgreSQL's; the directory holds the file
        if not self.database.exists():
            raise PostroomError(
                f"No postroom data directory at {self.data_dir} (no {DATABASE_FILE}); run "
                "`postroom init` first, or pass --data DIR."
            )


def context(ctx: typer.Context) -> CliContext:
    obj = ctx.find_root().obj
    if not isinstance(obj, CliContext):  # pragma: no cover - the root callback always sets it
        raise RuntimeError("CLI context missing")
    return obj


@asynccontextmanager
async def services_for(cli: CliContext, *, require: bool = True) -> AsyncIterator[Services]:
    """Open the engine over the data directory's database for one command."""
    if require:
        cli.require_initialized()
    config = cli.config()
    services = await Services.open_database(
        cli.database,
        database_url=config.database.url,
        folders_dir=cli.folders_dir,
        trigger=config.trigger(),
        defaults=config.folder_defaults(),
        limits=IngestLimits(
            content_bytes=config.limits.content_bytes,
            attachments=AttachmentLimits(
                image_bytes=config.limits.image_bytes, file_bytes=config.limits.file_bytes
            ),
            missing_notice_s=config.routing.missing_folder_notice_s,
            turns_per_minute=config.limits.turns_per_minute,
        ),
        queue=QueueSettings(max_attempts=config.queue.max_attempts),
        owners=frozenset(config.owners.senders),
        tick_s=config.scheduler.tick_s,
        providers=config.provider_names(),
        access=config.access.policy(),
        model_overrides=config.model_overrides(),
    )
    try:
        yield services
    finally:
        await services.close()


def actor() -> str:
    """Who is writing, for the audit log."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def fail(message: str, code: int = 1) -> NoReturn:
    # The message is data, never markup: "[api] token" must print as written.
    stderr.print(Text("error: ", style="bold red") + Text(message), highlight=False)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except PostroomError as exc:
        fail(str(exc))


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run one async command body, turning postroom errors into a sentence and exit 1."""
    with user_errors():
        try:
            return asyncio.run(_await(factory))
        except KeyboardInterrupt:
            fail("interrupted", 130)


async def _await(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


def print_json(value: Any) -> None:
    """JSON on stdout, unstyled, so scripts can parse it."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def config_path(cli: CliContext) -> Path:
    return cli.data_dir / CONFIG_FILE
