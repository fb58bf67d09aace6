"""A fake Telegram Bot API server for the adapter's tests, served by uvicorn on a free loopback
port inside the test's event loop.

It speaks the wire format python-telegram-bot uses: ``POST /bot<token>/<method>`` with a
urlencoded body whose values are JSON-encoded (strings sent as they are), answered with
``{"ok": true, "result": …}`` or ``{"ok": false, "error_code": …, "description": …}``; files
at ``GET /file/bot<token>/<path>``. ``getUpdates`` honours ``offset`` the way Telegram does
(updates below it are confirmed and forgotten) and, when nothing is pending, answers ``[]``
after a short wait — or at once when an update is pushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from postroom.channels.base import ChannelContext
from postroom.channels.telegram import TelegramChannel
from postroom.channels.telegram.config import parse_config
from postroom.core import InboundMessage, Trigger
from postroom.core.access import AccessPolicy, DmPolicy
from postroom.core.folders import FolderDefaults
from postroom.engine import FolderSpec, IngestLimits, Services
from postroom.engine.ingest import IngestResult
from postroom.store import SqliteStore

__all__ = [
    "BOT_ID",
    "BOT_USERNAME",
    "TOKEN",
    "Call",
    "FakeTelegram",
    "Inbox",
    "eventually",
    "group_message",
    "open_engine",
    "private_message",
    "running_channel",
    "serve_app",
    "serve_fake_telegram",
]

TOKEN = "123456:TEST-token_abc"
BOT_ID = 123456
BOT_USERNAME = "postroom_test_bot"
DATE = 1767614400  # 2026-01-05 12:00:00 UTC
#: How long an idle getUpdates is held open (the bot asks for more; tests want it short).
IDLE_WAIT_S = 0.2

_update_ids = itertools.count(1)


async def eventually(check: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
    """Poll *check* until it holds; fail after *timeout_s* (a deadline, never a fixed sleep)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if check():
                return
            await asyncio.sleep(0.02)


@dataclass(frozen=True, slots=True)
class Call:
    """One Bot API call as the fake received it (values JSON-decoded)."""

    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failure:
    status: int
    description: str
    parameters: dict[str, Any] | None = None
    #: Sent as the body instead of the Bot API's JSON error (a proxy's page, say).
    raw: bytes | None = None


@dataclass
class FakeTelegram:
    """The state behind the fake: pending updates, files, recorded calls, scripted failures."""

    token: str = TOKEN
    calls: list[Call] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    #: Scripted failures per method, used one per call, in order.
    failures: dict[str, list[Failure]] = field(default_factory=dict)
    #: Refuse every sendMessage with parse_mode HTML (a parse error), as Telegram does for
    #: markup it cannot read.
    reject_html: bool = False
    url: str = ""
    _pushed: asyncio.Event = field(default_factory=asyncio.Event)
    _message_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(9000))

    # -- what tests do -------------------------------------------------------------------------
    def push(self, message: dict[str, Any], *, kind: str = "message") -> int:
        """Queue an update carrying *message*; return its update_id."""
        update_id = next(_update_ids)
        self.updates.append({"update_id": update_id, kind: message})
        self._pushed.set()
        return update_id

    def fail(self, method: str, status: int, description: str, **parameters: Any) -> None:
        self.failures.setdefault(method, []).append(
            Failure(status, description, parameters or None)
        )

    def fail_raw(self, method: str, status: int, body: bytes) -> None:
        self.failures.setdefault(method, []).append(Failure(status, "", raw=body))

    def called(self, method: str) -> list[dict[str, Any]]:
        return [c.params for c in self.calls if c.method == method]

    def offsets(self) -> list[int | None]:
        return [c.params.get("offset") for c in self.calls if c.method == "getUpdates"]

    async def wait_for(self, method: str, count: int = 1) -> None:
        """Until *method* was called at least *count* times."""
        await eventually(lambda: len(self.called(method)) >= count)

    async def wait_confirmed(self, update_id: int) -> None:
        """Until the bot asked for updates past *update_id* (it acknowledged it)."""
        await eventually(lambda: any((o or 0) > update_id for o in self.offsets()))

    # -- the Bot API ---------------------------------------------------------------------------
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/bot{token}/{method}", self._method, methods=["POST", "GET"]),
                Route("/file/bot{token}/{path:path}", self._file, methods=["GET"]),
            ]
        )

    async def _method(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.path_params["method"]
        params = _decode(await request.body())
        self.calls.append(Call(method, params))
        scripted = self.failures.get(method)
        if scripted:
            failure = scripted.pop(0)
            if failure.raw is not None:
                return Response(failure.raw, status_code=failure.status)
            return _error(failure.status, failure.description, failure.parameters)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        result = handler(params)
        if asyncio.iscoroutine(result):
            result = await result
        if isinstance(result, Response):
            return result
        return JSONResponse({"ok": True, "result": result})

    async def _file(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return _error(401, "Unauthorized")
        data = self.files.get(request.path_params["path"])
        if data is None:
            return _error(404, "Not Found")
        return Response(data, media_type="application/octet-stream")

    def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Postroom",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        return True

    def _api_setWebhook(self, params: dict[str, Any]) -> bool:
        return True

    async def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = params.get("offset")
        if offset is not None:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), IDLE_WAIT_S)
        while not self.updates:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._pushed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pushed.wait(), remaining)
        limit = int(params.get("limit") or 100)
        return self.updates[:limit]

    def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any] | Response:
        if self.reject_html and params.get("parse_mode") == "HTML":
            return _error(
                400,
                'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0',
            )
        chat_id = int(params["chat_id"])
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": DATE,
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Postroom"},
            "text": params["text"],
        }
        if "message_thread_id" in params:
            message["message_thread_id"] = params["message_thread_id"]
        return message

    def _api_sendChatAction(self, params: dict[str, Any]) -> bool:
        return True

    def _api_getFile(self, params: dict[str, Any]) -> dict[str, Any] | Response:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": f"u-{file_id}",
            "file_size": len(self.files[file_id]),
            "file_path": file_id,
        }


#: Parameters python-telegram-bot sends as bare strings (every other value is JSON).
_STRING_PARAMS = frozenset(
    {"text", "parse_mode", "action", "file_id", "url", "secret_token", "caption"}
)


def _decode(body: bytes) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, raw in parse_qsl(body.decode("utf-8"), keep_blank_values=True):
        if key in _STRING_PARAMS:
            params[key] = raw
            continue
        try:
            params[key] = json.loads(raw)
        except ValueError:
            params[key] = raw
    return params


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, status_code=status)


# -- building updates -----------------------------------------------------------------------------

_message_ids = itertools.count(100)


def _user(user_id: int, first: str, last: str | None, username: str | None) -> dict[str, Any]:
    user: dict[str, Any] = {"id": user_id, "is_bot": user_id == BOT_ID, "first_name": first}
    if last:
        user["last_name"] = last
    if username:
        user["username"] = username
    return user


def private_message(
    text: str | None = "hello",
    *,
    user_id: int = 42,
    first: str = "Ada",
    last: str | None = "Lovelace",
    username: str | None = "ada",
    message_id: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A message in the private chat with *user_id* (``extra`` fields are added as they are)."""
    message: dict[str, Any] = {
        "message_id": message_id or next(_message_ids),
        "date": DATE,
        "chat": {"id": user_id, "type": "private", "first_name": first},
        "from": _user(user_id, first, last, username),
    }
    if text is not None:
        message["text"] = text
    message.update(extra)
    return message


def group_message(
    text: str | None = "hi all",
    *,
    chat_id: int = -1001234567890,
    chat_type: str = "supergroup",
    user_id: int = 7,
    first: str = "Grace",
    last: str | None = "Hopper",
    username: str | None = "grace",
    message_id: int | None = None,
    is_forum: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A message in a group (supergroup by default)."""
    chat: dict[str, Any] = {"id": chat_id, "type": chat_type, "title": "Engineering"}
    if is_forum:
        chat["is_forum"] = True
    message: dict[str, Any] = {
        "message_id": message_id or next(_message_ids),
        "date": DATE,
        "chat": chat,
        "from": _user(user_id, first, last, username),
    }
    if text is not None:
        message["text"] = text
    message.update(extra)
    return message


@contextlib.asynccontextmanager
async def serve_fake_telegram(fake: FakeTelegram | None = None) -> AsyncIterator[FakeTelegram]:
    """Serve a fake Bot API in this event loop; ``fake.url`` is its root (the adapter's
    ``base_url``)."""
    fake = fake or FakeTelegram()
    server = uvicorn.Server(
        uvicorn.Config(
            fake.app(),
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-telegram")
    try:
        async with asyncio.timeout(15):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the fake Bot API stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def serve_app(app: Starlette) -> AsyncIterator[str]:
    """Serve any Starlette app on a free loopback port in this loop; yield its root URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
        )
    )
    task = asyncio.create_task(server.serve(), name="test-server")
    try:
        async with asyncio.timeout(15):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the server stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


# -- the postroom side ----------------------------------------------------------------------------


class Inbox:
    """The channel's inbound sink: ingest for real, recording what went in and what came out.

    ``fail_next`` makes the next calls raise the way a locked database does, before anything
    is stored (the adapter must then not acknowledge the update).
    """

    def __init__(self, services: Services) -> None:
        self._services = services
        self.messages: list[InboundMessage] = []
        self.results: list[IngestResult] = []
        self.fail_next = 0

    async def __call__(self, message: InboundMessage) -> IngestResult:
        self.messages.append(message)
        if self.fail_next:
            self.fail_next -= 1
            raise sqlite3.OperationalError("database is locked")
        result = await self._services.ingest.ingest(message)
        self.results.append(result)
        return result

    async def wait(self, count: int) -> None:
        """Until *count* messages were ingested (committed)."""
        await eventually(lambda: len(self.results) >= count)


async def open_engine(directory: Path, clock: Callable[[], datetime]) -> Services:
    """postroom's engine over a real SQLite file, with the recommended group routes
    (ROUTING §5: a mention fires ``main``, the rest of a group is observed) and DMs to ``main``;
    ``main/drafts`` is a child folder for reply-chain tests."""
    store = await SqliteStore.open(directory / "postroom.db")
    services = Services.build(
        store,
        folders_dir=directory / "folders",
        trigger=Trigger(),
        defaults=FolderDefaults(),
        limits=IngestLimits(content_bytes=4096, missing_notice_s=3600),
        clock=clock,
        # Adapter tests: every DM is answered (admission has tests of its own).
        access=AccessPolicy(dm_policy=DmPolicy.OPEN),
    )
    await services.folders.add_folder("main", FolderSpec(), actor="test")
    await services.folders.add_folder("main/drafts", FolderSpec(), actor="test")
    for seq, match, target in (
        (10, "platform=telegram room=group/* verb=mention", "main"),
        (20, "platform=telegram room=group/*", "main#observe"),
        (30, "platform=telegram room=user/*", "main"),
    ):
        await services.routes.add_route(seq, match, target, actor="test")
    return services


@contextlib.asynccontextmanager
async def running_channel(
    fake: FakeTelegram,
    inbox: Inbox,
    clock: Callable[[], datetime],
    *,
    image_bytes: int = 1000,
    **section: Any,
) -> AsyncIterator[TelegramChannel]:
    """The adapter built from ``[channels.telegram]`` keys, pointed at *fake*, started."""
    config = parse_config({"token": fake.token, "base_url": fake.url, "poll_timeout": 1} | section)
    channel = TelegramChannel(config, retry_base_s=0.05, retry_max_s=0.2)
    await channel.start(ChannelContext(inbound=inbox, clock=clock, image_bytes=image_bytes))
    try:
        yield channel
    finally:
        await channel.stop()
