"""A small Matrix homeserver speaking the client-server API's wire format, for matrix-nio.

It runs in the test's event loop (uvicorn on a free 127.0.0.1 port) and keeps one event log:
``/sync?since=s<n>`` answers every event from position *n* on (so a client that keeps an old
token gets the batch again), long-polls briefly when there is nothing new, and the initial
sync (no ``since``) answers the whole history. What the client sent — messages, typing
notices, joins, logins, sync tokens — is recorded for the tests to assert on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SERVER = "fake.test"
BOT = f"@bot:{SERVER}"
PASSWORD = "correct horse"
TOKEN = "syt-bot-token"


@dataclass
class Room:
    room_id: str
    #: mxid → display name.
    members: dict[str, str] = field(default_factory=dict)
    joined: bool = True


@dataclass
class Sent:
    room_id: str
    txn: str
    content: dict[str, Any]
    event_id: str


@dataclass
class Entry:
    kind: str  # "event" or "invite"
    room_id: str
    event: dict[str, Any]


class FakeHomeserver:
    def __init__(self, *, display_name: str = "Postbot", idle_wait_s: float = 0.2) -> None:
        self.display_name = display_name
        self.idle_wait_s = idle_wait_s
        self.rooms: dict[str, Room] = {}
        self.log: list[Entry] = []
        self.sent: list[Sent] = []
        self.typing: list[tuple[str, str, dict[str, Any]]] = []
        self.joins: list[str] = []
        self.logins: list[dict[str, Any]] = []
        self.logouts = 0
        self.sync_sinces: list[str | None] = []
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_requests: list[str] = []
        self.event_requests: list[tuple[str, str]] = []
        #: Set to make the next sends fail: M_LIMIT_EXCEEDED with this retry_after_ms, each.
        self.rate_limits: list[int] = []
        #: Refuse any message that has a formatted_body (a server that rejects the markup).
        self.reject_formatted = False
        #: Rooms where sending, typing and joining are refused with M_FORBIDDEN.
        self.forbidden_rooms: set[str] = set()
        #: Set to make the next sends fail with a 500 M_UNKNOWN, one each.
        self.server_errors = 0
        #: Cleared to revoke the access token (as a server admin would); a login restores it.
        self.token_valid = True
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        self.url = ""

    # -- what tests do -------------------------------------------------------------------------
    def add_room(self, room_id: str, members: dict[str, str], *, joined: bool = True) -> Room:
        room = Room(room_id, {BOT: self.display_name, **members}, joined=joined)
        self.rooms[room_id] = room
        return room

    def new_event_id(self) -> str:
        # Mixed case and a "$": what a topic normalization must not lose on the way back.
        return f"$Ev{next(self._ids)}_XyZ"

    def post(
        self,
        room_id: str,
        sender: str,
        content: dict[str, Any],
        *,
        event_id: str | None = None,
        event_type: str = "m.room.message",
    ) -> str:
        """An event arrives in a room; return its id."""
        event_id = event_id or self.new_event_id()
        event = {
            "type": event_type,
            "event_id": event_id,
            "sender": sender,
            "origin_server_ts": int(time.time() * 1000),
            "content": content,
        }
        self._append(Entry("event", room_id, event))
        return event_id

    def text(
        self, room_id: str, sender: str, body: str, *, event_id: str | None = None, **extra: Any
    ) -> str:
        """An ``m.text`` message; *extra* goes into its content (``m.relates_to``, …)."""
        return self.post(
            room_id, sender, {"msgtype": "m.text", "body": body, **extra}, event_id=event_id
        )

    def invite(self, room_id: str, inviter: str, members: dict[str, str] | None = None) -> None:
        self.add_room(
            room_id, {inviter: inviter[1:].split(":")[0], **(members or {})}, joined=False
        )
        event = {
            "type": "m.room.member",
            "state_key": BOT,
            "sender": inviter,
            "content": {"membership": "invite"},
        }
        self._append(Entry("invite", room_id, event))

    def _append(self, entry: Entry) -> None:
        self.log.append(entry)
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, what: Any, timeout_s: float = 10.0) -> None:
        """Poll *what* (a callable) until it is true, or fail after *timeout_s* seconds."""
        deadline = time.monotonic() + timeout_s
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)

    # -- the API -------------------------------------------------------------------------------
    def app(self) -> Starlette:
        base = "/_matrix/client/v3"
        return Starlette(
            routes=[
                Route(f"{base}/login", self._login, methods=["POST"]),
                Route(f"{base}/logout", self._logout, methods=["POST"]),
                Route(f"{base}/account/whoami", self._whoami, methods=["GET"]),
                Route(f"{base}/profile/{{user}}/displayname", self._displayname, methods=["GET"]),
                Route(f"{base}/sync", self._sync, methods=["GET"]),
                Route(f"{base}/join/{{room}}", self._join, methods=["POST"]),
                Route(f"{base}/rooms/{{room}}/send/{{etype}}/{{txn}}", self._send, methods=["PUT"]),
                Route(f"{base}/rooms/{{room}}/typing/{{user}}", self._typing, methods=["PUT"]),
                Route(f"{base}/rooms/{{room}}/event/{{event_id}}", self._event, methods=["GET"]),
                Route(
                    "/_matrix/client/v1/media/download/{server}/{media_id}",
                    self._download,
                    methods=["GET"],
                ),
            ]
        )

    @staticmethod
    def _error(status: int, errcode: str, message: str, **extra: Any) -> JSONResponse:
        return JSONResponse({"errcode": errcode, "error": message, **extra}, status_code=status)

    def _authorized(self, request: Request) -> bool:
        return self.token_valid and request.headers.get("authorization") == f"Bearer {TOKEN}"

    async def _login(self, request: Request) -> Response:
        body = await request.json()
        self.logins.append(body)
        user = body.get("identifier", {}).get("user") or body.get("user")
        if body.get("password") != PASSWORD or user not in (BOT, "bot"):
            return self._error(403, "M_FORBIDDEN", "Invalid username or password")
        self.token_valid = True
        return JSONResponse(
            {"user_id": BOT, "access_token": TOKEN, "device_id": body.get("device_id") or "DEV1"}
        )

    async def _logout(self, request: Request) -> Response:
        self.logouts += 1
        return JSONResponse({})

    async def _whoami(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "M_UNKNOWN_TOKEN", "Unknown access token")
        return JSONResponse({"user_id": BOT, "device_id": "DEV1"})

    async def _displayname(self, request: Request) -> Response:
        return JSONResponse({"displayname": self.display_name})

    def _room_state(self, room: Room) -> list[dict[str, Any]]:
        return [
            {
                "type": "m.room.member",
                "event_id": f"$member-{mxid}",
                "sender": mxid,
                "state_key": mxid,
                "origin_server_ts": 1,
                "content": {"membership": "join", "displayname": name},
            }
            for mxid, name in room.members.items()
        ]

    def _batch(self, since: int) -> dict[str, Any]:
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        for entry in self.log[since:]:
            room = self.rooms[entry.room_id]
            if entry.kind == "invite":
                if not room.joined:
                    invite[entry.room_id] = {"invite_state": {"events": [entry.event]}}
                continue
            if not room.joined:
                continue
            section = join.setdefault(
                entry.room_id,
                {
                    "timeline": {"events": [], "limited": False, "prev_batch": f"p{since}"},
                    "state": {"events": self._room_state(room)},
                    "summary": {"m.joined_member_count": len(room.members)},
                },
            )
            section["timeline"]["events"].append(entry.event)
        return {"next_batch": f"s{len(self.log)}", "rooms": {"join": join, "invite": invite}}

    async def _sync(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "M_UNKNOWN_TOKEN", "Unknown access token")
        since_text = request.query_params.get("since")
        self.sync_sinces.append(since_text)
        since = int(since_text[1:]) if since_text else 0
        timeout_ms = int(request.query_params.get("timeout") or 0)
        if since_text and since >= len(self.log) and timeout_ms:
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(timeout_ms / 1000, self.idle_wait_s))
        return JSONResponse(self._batch(since))

    async def _join(self, request: Request) -> Response:
        room_id = request.path_params["room"]
        self.joins.append(room_id)
        room = self.rooms.get(room_id)
        if room is None:
            return self._error(404, "M_NOT_FOUND", "No such room")
        if room_id in self.forbidden_rooms:
            return self._error(403, "M_FORBIDDEN", "You are not invited to this room")
        room.joined = True
        # The join itself shows up in the next sync, with the room's state.
        self.post(
            room_id,
            BOT,
            {"membership": "join", "displayname": self.display_name},
            event_type="m.room.member",
        )
        return JSONResponse({"room_id": room_id})

    async def _send(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "M_UNKNOWN_TOKEN", "Unknown access token")
        room_id = request.path_params["room"]
        content = json.loads(await request.body())
        if self.rate_limits:
            return self._error(
                429, "M_LIMIT_EXCEEDED", "Too many requests", retry_after_ms=self.rate_limits.pop(0)
            )
        if room_id in self.forbidden_rooms:
            return self._error(403, "M_FORBIDDEN", "You are not in this room")
        if self.server_errors:
            self.server_errors -= 1
            return self._error(500, "M_UNKNOWN", "Internal server error")
        if self.reject_formatted and "formatted_body" in content:
            return self._error(400, "M_BAD_JSON", "formatted_body is not acceptable")
        event_id = self.post(room_id, BOT, content)  # the echo comes back through /sync
        self.sent.append(Sent(room_id, request.path_params["txn"], content, event_id))
        return JSONResponse({"event_id": event_id})

    async def _typing(self, request: Request) -> Response:
        body = await request.json()
        self.typing.append((request.path_params["room"], request.path_params["user"], body))
        if request.path_params["room"] in self.forbidden_rooms:
            return self._error(403, "M_FORBIDDEN", "You are not in this room")
        return JSONResponse({})

    async def _event(self, request: Request) -> Response:
        room_id, event_id = request.path_params["room"], request.path_params["event_id"]
        self.event_requests.append((room_id, event_id))
        for entry in self.log:
            if entry.room_id == room_id and entry.event.get("event_id") == event_id:
                return JSONResponse({**entry.event, "room_id": room_id})
        return self._error(404, "M_NOT_FOUND", "Event not found")

    async def _download(self, request: Request) -> Response:
        media_id = request.path_params["media_id"]
        self.media_requests.append(media_id)
        if not self._authorized(request):
            return self._error(401, "M_MISSING_TOKEN", "Missing access token")
        found = self.media.get(media_id)
        if found is None:
            return self._error(404, "M_NOT_FOUND", "No such media")
        return Response(found[0], media_type=found[1])


@contextlib.asynccontextmanager
async def running(homeserver: FakeHomeserver) -> AsyncIterator[FakeHomeserver]:
    """Serve *homeserver* on a free port in this event loop; ``homeserver.url`` is its URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            homeserver.app(),
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-matrix")
    deadline = time.monotonic() + 10
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            raise RuntimeError("the fake homeserver did not start")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    homeserver.url = f"http://127.0.0.1:{port}"
    try:
        yield homeserver
    finally:
        server.should_exit = True
        await task
