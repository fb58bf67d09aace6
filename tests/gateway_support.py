"""The real composition root in a test's event loop: a data directory, ``Gateway.build`` with
fakes in its keyword seams, ``Gateway.run`` on a free loopback port (what ``postroom serve``
runs), and a channel that records what the delivery loop sends it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import postroom
from postroom.app.gateway import Gateway
from postroom.channels.base import BaseChannel
from postroom.config import DATABASE_FILE
from postroom.engine.delivery import OutgoingChunk, SendResult
from postroom.store.sqlite import SqliteStore

__all__ = ["RecordingChannel", "new_data_dir", "serving"]

#: Where postroom's own code lives (tasks running it must not outlive the gateway).
PACKAGE = Path(postroom.__file__).parent
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 30.0


async def new_data_dir(directory: Path) -> Path:
    """A data directory with a migrated, empty database (no folders, no routes)."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    store = await SqliteStore.open(directory / DATABASE_FILE)
    await store.close()
    return directory


@contextlib.asynccontextmanager
async def serving(gateway: Gateway, *, port: int = 0) -> AsyncIterator[str]:
    """Run *gateway* as ``postroom serve`` does, on 127.0.0.1 and a free port (unless *port* is
    given); yield its base
    URL; stop it gracefully (and so close it) on the way out, and check that no task it started
    outlives it."""
    baseline = asyncio.all_tasks()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_ready(_host: str, bound: int) -> None:
        if not ready.done():
            ready.set_result(bound)

    task = asyncio.create_task(
        gateway.run(host="127.0.0.1", port=port, on_ready=on_ready), name="test-gateway"
    )
    done, _ = await asyncio.wait(
        {ready, task}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        task.result()  # the start-up error, if any
        raise AssertionError("the gateway stopped before it was ready")
    if ready not in done:
        task.cancel()
        raise AssertionError("the gateway did not start")
    try:
        yield f"http://127.0.0.1:{ready.result()}"
    finally:
        gateway.request_stop()
        await asyncio.wait_for(task, STOP_TIMEOUT_S)
    # Every task postroom started was awaited or cancelled as it stopped (the fakes' own
    # tasks, such as a long poll the adapter walked away from, are theirs to end).
    left = [t for t in asyncio.all_tasks() - baseline if not t.done() and _ours(t)]
    assert not left, sorted(f"{t.get_name()}: {t.get_coro()}" for t in left)


def _ours(task: asyncio.Task[object]) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and Path(code.co_filename).is_relative_to(PACKAGE)


class RecordingChannel(BaseChannel):
    """A platform for the chats of ``telegram:``: records each chunk the delivery loop sends
    and each typing signal the gateway relays."""

    name: ClassVar[str] = "recording"
    platforms: ClassVar[tuple[str, ...]] = ("telegram",)

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[OutgoingChunk] = []
        self.typing_events: list[tuple[str, bool]] = []

    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        self.sent.append(chunk)
        return SendResult(f"p{len(self.sent)}")

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        self.typing_events.append((chat_jid, active))

    def to(self, chat_jid: str) -> list[tuple[str, str]]:
        return [(c.message_type, c.content) for c in self.sent if c.chat_jid == chat_jid]
