"""A fake Discord speaking the wire format discord.py 2.7 uses: the REST API under ``/api/v10``
(``Authorization: Bot <token>``; JSON in and out; errors as ``{"message", "code"}``; 429s with
``retry_after`` in the body and ``Retry-After`` in the headers) and the gateway WebSocket
(op 10 HELLO → op 2 IDENTIFY → op 0 READY, then GUILD_CREATE and whatever the test dispatches;
op 1 heartbeats answered with op 11).

discord.py has no endpoint option: the adapter points ``discord.http.Route.BASE`` and
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` at :attr:`FakeDiscord.api_url` and
:attr:`FakeDiscord.gateway_url` from its ``base_url``/``gateway_url`` keys (and puts them back).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.fake.discord-bot-token"
DISCORD_EPOCH_MS = 1420070400000
#: Ids are real snowflakes of early 2026, so the times discord.py derives from them are sane.
_BASE_MS = int(datetime(2026, 1, 5, 11, 0, tzinfo=UTC).timestamp() * 1000) - DISCORD_EPOCH_MS


def snowflake(n: int) -> str:
    """A snowflake *n* milliseconds after the base time (unique per *n*)."""
    return str((_BASE_MS + n) << 22)


def snowflake_at(when: datetime, n: int = 0) -> str:
    ms = int(when.timestamp() * 1000) - DISCORD_EPOCH_MS
    return str((ms << 22) + n)


BOT_ID = snowflake(1)
APP_ID = BOT_ID
GUILD_ID = snowflake(2)
CHANNEL_ID = snowflake(3)
THREAD_ID = snowflake(4)
DM_CHANNEL_ID = snowflake(5)
ALICE_ID = snowflake(6)
BOB_ID = snowflake(7)
OTHER_BOT_ID = snowflake(8)
BOT_ROLE_ID = snowflake(9)
#: A thread the cache never heard of (no GUILD_CREATE / THREAD_CREATE): found by GET /channels.
LATE_THREAD_ID = snowflake(10)
OWNER_ID = snowflake(11)

BOT_USER: dict[str, Any] = {
    "id": BOT_ID,
    "username": "postroom",
    "discriminator": "0",
    "global_name": "Postroom",
    "avatar": None,
    "bot": True,
}
ALICE: dict[str, Any] = {
    "id": ALICE_ID,
    "username": "alice",
    "discriminator": "0",
    "global_name": "Alice",
    "avatar": None,
}
BOB: dict[str, Any] = {
    "id": BOB_ID,
    "username": "bob",
    "discriminator": "0",
    "global_name": "Bob",
    "avatar": None,
}
OTHER_BOT: dict[str, Any] = {
    "id": OTHER_BOT_ID,
    "username": "ci-bot",
    "discriminator": "0",
    "global_name": None,
    "avatar": None,
    "bot": True,
}


def guild_payload() -> dict[str, Any]:
    """The GUILD_CREATE of the test guild: one text channel, one thread in it, the bot's role."""
    return {
        "id": GUILD_ID,
        "name": "Acme",
        "icon": None,
        "owner_id": OWNER_ID,
        "unavailable": False,
        "member_count": 3,
        "large": False,
        "features": [],
        "emojis": [],
        "stickers": [],
        "roles": [
            {
                "id": GUILD_ID,
                "name": "@everyone",
                "permissions": "0",
                "position": 0,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
            },
            {
                "id": BOT_ROLE_ID,
                "name": "Postroom",
                "permissions": "0",
                "position": 1,
                "color": 0,
                "hoist": False,
                "managed": True,
                "mentionable": True,
                "tags": {"bot_id": BOT_ID},
            },
        ],
        "members": [],
        "voice_states": [],
        "presences": [],
        "channels": [
            {
                "id": CHANNEL_ID,
                "type": 0,
                "guild_id": GUILD_ID,
                "name": "general",
                "position": 0,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
            },
        ],
        "threads": [
            {
                "id": THREAD_ID,
                "type": 11,
                "guild_id": GUILD_ID,
                "parent_id": CHANNEL_ID,
                "name": "planning",
                "owner_id": ALICE_ID,
                "message_count": 1,
                "member_count": 2,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": "2026-01-05T10:00:00+00:00",
                    "locked": False,
                },
            },
        ],
    }


def message_payload(
    message_id: str,
    content: str,
    *,
    channel_id: str = CHANNEL_ID,
    guild_id: str | None = GUILD_ID,
    author: dict[str, Any] | None = None,
    mentions: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A MESSAGE_CREATE payload (and the body POST /channels/{id}/messages answers with)."""
    author = author or ALICE
    data: dict[str, Any] = {
        "id": message_id,
        "channel_id": channel_id,
        "author": author,
        "content": content,
        "timestamp": "2026-01-05T11:00:00+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }
    if guild_id is not None:
        data["guild_id"] = guild_id
        data["member"] = {
            "roles": [],
            "joined_at": "2025-01-01T00:00:00+00:00",
            "deaf": False,
            "mute": False,
            "nick": None,
        }
    data.update(extra)
    return data


def reply_payload(
    message_id: str, content: str, *, to: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """A reply (type 19) to the message *to*, as Discord sends it: the reference and the
    referenced message itself."""
    reference = {"message_id": to["id"], "channel_id": to["channel_id"], "type": 0}
    if "guild_id" in to:
        reference["guild_id"] = to["guild_id"]
    return message_payload(
        message_id,
        content,
        type=19,
        message_reference=reference,
        referenced_message=to,
        **extra,
    )


class FakeDiscord:
    def __init__(self) -> None:
        self.base_url = ""
        #: Every REST request: method, path (below /api/v10), JSON body or None.
        self.requests: list[tuple[str, str, Any]] = []
        self.posted: list[dict[str, Any]] = []
        self.typing: list[str] = []
        #: When each typing request came (``time.monotonic()``), to see refreshes.
        self.typing_at: list[float] = []
        #: Seconds POST /channels/{id}/messages takes before answering.
        self.post_delay_s = 0.0
        #: Headers for the next successful POST /channels/{id}/messages (rate-limit buckets).
        self.post_headers: list[dict[str, str]] = []
        #: Canned answers for the next POST /channels/{id}/messages: (status, body, headers).
        self.post_failures: list[tuple[int, Any, dict[str, str]]] = []
        #: Refuse the message content while it contains this text (an "Invalid Form Body").
        self.reject_content: str | None = None
        #: GET /channels/{id} answers (threads the cache does not know).
        self.channels: dict[str, dict[str, Any]] = {}
        #: Files under /attachments/{name}: bytes and mime.
        self.files: dict[str, tuple[bytes, str]] = {}
        self.token = TOKEN
        self.guilds: list[dict[str, Any]] = [guild_payload()]
        self._ids = itertools.count(1)
        # gateway
        self.identifies: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.connections = 0
        #: Close the gateway with this code instead of READY (e.g. 4014, intents refused).
        self.refuse_identify: int | None = None
        self.ready = asyncio.Event()
        self._events: asyncio.Queue[tuple[str, dict[str, Any]] | int] = asyncio.Queue()
        self._seq = itertools.count(1)

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/gateway"

    def section(self, **extra: Any) -> dict[str, Any]:
        """A ``[channels.discord]`` section pointing at this fake."""
        return {
            "token": self.token,
            "base_url": self.api_url,
            "gateway_url": self.gateway_url,
            **extra,
        }

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/v10/users/@me", self._me, methods=["GET"]),
                Route("/api/v10/oauth2/applications/@me", self._application, methods=["GET"]),
                Route("/api/v10/gateway", self._gateway, methods=["GET"]),
                Route("/api/v10/gateway/bot", self._gateway, methods=["GET"]),
                Route("/api/v10/channels/{channel}", self._channel, methods=["GET"]),
                Route("/api/v10/channels/{channel}/messages", self._post, methods=["POST"]),
                Route("/api/v10/channels/{channel}/typing", self._typing, methods=["POST"]),
                Route("/attachments/{name}", self._file, methods=["GET"]),
                WebSocketRoute("/gateway", self._socket),
            ]
        )

    def requests_to(self, method: str, path: str) -> list[Any]:
        return [body for m, p, body in self.requests if (m, p) == (method, path)]

    def file_url(self, name: str) -> str:
        return f"{self.base_url}/attachments/{name}"

    # -- REST ----------------------------------------------------------------------------------
    async def _record(self, request: Request) -> Response | None:
        """Log the request; a 401 answer when the token is not the bot's."""
        body = await request.body()
        path = request.url.path.removeprefix("/api/v10")
        self.requests.append((request.method, path, json.loads(body) if body else None))
        if request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
        return None

    async def _me(self, request: Request) -> Response:
        return await self._record(request) or JSONResponse(BOT_USER)

    async def _application(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        return JSONResponse(
            {
                "id": APP_ID,
                "name": "Postroom",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": {**ALICE, "id": OWNER_ID},
                "verify_key": "00" * 32,
                "flags": 0,
                "summary": "",
                "team": None,
                "bot": BOT_USER,
            }
        )

    async def _gateway(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        return JSONResponse(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _channel(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        found = self.channels.get(request.path_params["channel"])
        if found is None:
            return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
        return JSONResponse(found)

    async def _post(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        channel = request.path_params["channel"]
        body = dict(self.requests[-1][2] or {})
        body["_channel"] = channel
        self.posted.append(body)
        if self.post_delay_s:
            await asyncio.sleep(self.post_delay_s)
        if self.post_failures:
            status, answer, headers = self.post_failures.pop(0)
            if isinstance(answer, str):
                return Response(answer, status_code=status, headers=headers)
            return JSONResponse(answer, status_code=status, headers=headers)
        content = str(body.get("content") or "")
        if self.reject_content is not None and self.reject_content in content:
            return JSONResponse(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [
                                {
                                    "code": "BASE_TYPE_BAD_LENGTH",
                                    "message": "Must be 2000 or fewer.",
                                }
                            ]
                        }
                    },
                },
                status_code=400,
            )
        if len(content) > 2000:
            return JSONResponse({"message": "Invalid Form Body", "code": 50035}, status_code=400)
        sent_at = datetime(2026, 1, 5, 12, tzinfo=UTC) + timedelta(milliseconds=next(self._ids))
        answer = message_payload(
            snowflake_at(sent_at), content, channel_id=channel, guild_id=None, author=BOT_USER
        )
        if body.get("message_reference"):
            answer["type"] = 19
            answer["message_reference"] = body["message_reference"]
        return JSONResponse(answer, headers=self.post_headers.pop(0) if self.post_headers else None)

    async def _typing(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        self.typing.append(request.path_params["channel"])
        self.typing_at.append(time.monotonic())
        return Response(status_code=204)

    async def _file(self, request: Request) -> Response:
        found = self.files.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404)
        data, mime = found
        return Response(data, media_type=mime)

    # -- gateway -------------------------------------------------------------------------------
    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a DISPATCH (op 0) event on the open gateway connection."""
        self._events.put_nowait((event, data))

    def close_gateway(self, code: int = 4000) -> None:
        """Close the current gateway connection with *code* (the client reconnects)."""
        self._events.put_nowait(code)

    async def _socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        self.connections += 1
        await websocket.send_text(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        send_lock = asyncio.Lock()

        async def send(payload: dict[str, Any]) -> None:
            async with send_lock:
                await websocket.send_text(json.dumps(payload))

        async def dispatch(event: str, data: dict[str, Any]) -> None:
            await send({"op": 0, "t": event, "s": next(self._seq), "d": data})

        closed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def read() -> None:
            while True:
                frame = json.loads(await websocket.receive_text())
                op = frame.get("op")
                if op == 1:
                    self.heartbeats += 1
                    await send({"op": 11})
                elif op == 2:
                    self.identifies.append(frame["d"])
                    if self.refuse_identify is not None:
                        closed.set_result(self.refuse_identify)
                        return
                    await dispatch(
                        "READY",
                        {
                            "v": 10,
                            "user": BOT_USER,
                            "guilds": [{"id": g["id"], "unavailable": True} for g in self.guilds],
                            "session_id": "fake-session",
                            "resume_gateway_url": self.gateway_url,
                            "application": {"id": APP_ID, "flags": 0},
                            "private_channels": [],
                        },
                    )
                    for guild in self.guilds:
                        await dispatch("GUILD_CREATE", guild)
                    self.ready.set()
                elif op == 6:
                    await dispatch("RESUMED", {})
                    self.ready.set()

        async def write() -> None:
            await self.ready.wait()
            while True:
                item = await self._events.get()
                if isinstance(item, int):
                    closed.set_result(item)
                    return
                await dispatch(*item)

        tasks = [
            asyncio.create_task(read(), name="fake-discord-read"),
            asyncio.create_task(write(), name="fake-discord-write"),
        ]
        try:
            await asyncio.wait([*tasks, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await task
            self.ready.clear()
            if closed.done():
                with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                    await websocket.close(code=closed.result())
