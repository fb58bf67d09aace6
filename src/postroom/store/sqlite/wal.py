"""Keeping the write-ahead log bounded whatever the load.

Automatic checkpoints are off on the event loop's connections (see ``base``); the store
checkpoints on its maintenance thread instead. A ``PASSIVE`` checkpoint every
``checkpoint_every`` commits copies the log back into the database without stopping anyone,
but it never lets SQLite start the log over while writes go on: each one ends with frames
appended during it, so the log is never wholly copied and the file only grows (a gigabyte in
under two minutes at fifty turns a second). So when the log passes ``truncate_bytes`` — looked
at every ``check_every`` commits, and after each passive checkpoint — the keeper also runs a
``TRUNCATE`` checkpoint with the store's writes paused between two group commits: the passive
pass has already copied most frames, so writers wait only for the rest (milliseconds; they
wait asynchronously, the event loop runs on). That checkpoint waits at most ``busy_ms`` for
readers still on the log; if they stay, it gives up and the next look tries again, so a
long reader can delay the truncation but never stall a writer for longer than that.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from postroom.store.sqlite.base import ThreadedConnection

__all__ = ["Checkpoint", "WalKeeper", "WalLimits"]

log = structlog.get_logger(__name__)

#: Bytes a log frame takes beyond its page (its header).
FRAME_HEADER = 24


@dataclass(frozen=True, slots=True)
class WalLimits:
    #: Commits between two passive checkpoints (SQLite's own default is about every 1,000 pages).
    checkpoint_every: int = 500
    #: Commits between two looks at the log file's size (a ``stat``: about a microsecond).
    check_every: int = 64
    #: A log larger than this is truncated (and ``journal_size_limit`` keeps it below it).
    truncate_bytes: int = 16 * 1024 * 1024
    #: The longest a truncating checkpoint waits for readers still on the log.
    busy_ms: int = 100


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What one checkpoint did: ``busy`` when readers or a writer kept it from finishing;
    ``log_frames`` in the log when it ran, ``checkpointed_frames`` copied to the database."""

    mode: Literal["PASSIVE", "TRUNCATE"]
    busy: bool
    log_frames: int
    checkpointed_frames: int


class WalKeeper:
    """Decides when to checkpoint, runs checkpoints on the maintenance thread, one at a time.

    *pause_writes* is the store's "no write transaction open, none may begin" context: the
    truncating checkpoint runs inside it so the store's own writer never holds the log.
    """

    def __init__(
        self,
        *,
        path: Path,
        maintenance: ThreadedConnection,
        pause_writes: Callable[[], AbstractAsyncContextManager[None]],
        page_size: int,
        limits: WalLimits,
    ) -> None:
        self._wal = path.with_name(path.name + "-wal")
        self._maintenance = maintenance
        self._pause_writes = pause_writes
        self._frame_bytes = page_size + FRAME_HEADER
        self._limits = limits
        self._commits = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: The last checkpoint that ran (for the curious: tests, benchmarks, a status page).
        self.last: Checkpoint | None = None
        #: Checkpoints run so far.
        self.count = 0

    @property
    def limits(self) -> WalLimits:
        return self._limits

    def committed(self) -> None:
        """Called on the event loop after every commit: starts a checkpoint when one is due."""
        self._commits += 1
        if self._task is not None or self._closed:
            return
        due = self._commits >= self._limits.checkpoint_every
        if not due and self._commits % self._limits.check_every == 0:
            due = self.wal_bytes() > self._limits.truncate_bytes
        if due:
            self._commits = 0
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="sqlite-checkpoint"
            )

    def wal_bytes(self) -> int:
        """The log file's size now (0 when there is none)."""
        try:
            return os.stat(self._wal).st_size
        except FileNotFoundError:
            return 0

    async def wait(self) -> None:
        """Wait until the checkpoint running now (if any) has finished."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    async def checkpoint(self, *, truncate: bool) -> Checkpoint:
        """Run one checkpoint now (after the running one, if any) and return what it did."""
        await self.wait()
        if truncate:
            async with self._pause_writes():
                return await self._checkpoint("TRUNCATE")
        return await self._checkpoint("PASSIVE")

    async def close(self) -> None:
        self._closed = True
        await self.wait()

    async def _run(self) -> None:
        try:
            passive = await self._checkpoint("PASSIVE")
            if self._too_long(passive) and not self._closed:
                async with self._pause_writes():
                    result = await self._checkpoint("TRUNCATE")
                if result.busy:
                    log.info("sqlite.wal_busy", log_bytes=self.wal_bytes())
        except Exception:
            # A failed checkpoint loses nothing (the log still holds every commit); the next
            # one tries again.
            log.exception("sqlite.checkpoint_failed")
        finally:
            self._task = None

    def _too_long(self, passive: Checkpoint) -> bool:
        in_use = passive.log_frames * self._frame_bytes
        return max(in_use, self.wal_bytes()) > self._limits.truncate_bytes

    async def _checkpoint(self, mode: Literal["PASSIVE", "TRUNCATE"]) -> Checkpoint:
        ((busy, log_frames, copied),) = await self._maintenance.fetchall(
            f"PRAGMA wal_checkpoint({mode})"
        )
        result = Checkpoint(mode, bool(busy), int(log_frames), int(copied))
        self.last = result
        self.count += 1
        return result
