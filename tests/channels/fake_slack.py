"""A fake Slack speaking the Web API's wire format (``/api/<method>``: form, query or JSON in,
``{"ok": …}`` out), serving private files behind the bot token, and a Socket Mode WebSocket
(``hello``, ``events_api`` and ``slash_commands`` envelopes, acks back). Plus helpers that build
and sign Events API and slash command requests as Slack does:
``v0=HMAC-SHA256("v0:{ts}:{body}")``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import urllib.parse
import uuid
from collections import defaultdict
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

TEAM = "T0TEAM"
BOT_USER = "U0BOT"
BOT_ID = "B0BOT"
BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


class FakeSlack:
    def __init__(self) -> None:
        self.base_url = ""
        self.calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.users: dict[str, str] = {"U1ALICE": "alice", "U2BOB": "bob"}
        self.conversations: dict[str, dict[str, Any]] = {}
        #: Canned answers for the next chat.postMessage calls: (status, body, headers).
        self.post_failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        #: Refuse mrkdwn (as if the markup were malformed) while True.
        self.reject_markup = False
        self.files: dict[str, tuple[bytes, str]] = {}
        self.file_requests: list[str | None] = []
        self._ts = itertools.count(1)
        # Socket Mode
        self.envelopes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.acks: list[str] = []
        #: The payload of each ack that carried one (a slash command's answer), by envelope.
        self.ack_payloads: dict[str, Any] = {}
        self.socket_opened = asyncio.Event()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/{method}", self._api, methods=["GET", "POST"]),
                Route("/files/{name}", self._file, methods=["GET"]),
                WebSocketRoute("/socket", self._socket),
            ]
        )

    @property
    def posted(self) -> list[dict[str, Any]]:
        return self.calls["chat.postMessage"]

    def file_url(self, name: str) -> str:
        return f"{self.base_url}/files/{name}"

    # -- Web API ------------------------------------------------------------------------------
    async def _api(self, request: Request) -> Response:
        method = request.path_params["method"]
        args: dict[str, Any] = dict(request.query_params)
        body = await request.body()
        if body:
            if request.headers.get("content-type", "").startswith("application/json"):
                args.update(json.loads(body))
            else:
                args.update(dict(await request.form()))
        auth = request.headers.get("authorization", "")
        args["_auth"] = auth
        self.calls[method].append(args)
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if auth != f"Bearer {expected}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return JSONResponse({"ok": False, "error": "unknown_method"})
        result: Response = handler(args)
        return result

    def _auth_test(self, args: dict[str, Any]) -> Response:
        return JSONResponse(
            {
                "ok": True,
                "url": "https://acme.slack.com/",
                "team": "Acme",
                "user": "postroom",
                "team_id": TEAM,
                "user_id": BOT_USER,
                "bot_id": BOT_ID,
            }
        )

    def _users_info(self, args: dict[str, Any]) -> Response:
        name = self.users.get(str(args.get("user")))
        if name is None:
            return JSONResponse({"ok": False, "error": "user_not_found"})
        user = {"id": args["user"], "name": name, "profile": {"display_name": name.title()}}
        return JSONResponse({"ok": True, "user": user})

    def _conversations_info(self, args: dict[str, Any]) -> Response:
        channel = self.conversations.get(str(args.get("channel")))
        if channel is None:
            return JSONResponse({"ok": False, "error": "channel_not_found"})
        return JSONResponse({"ok": True, "channel": {"id": args["channel"], **channel}})

    def _chat_postMessage(self, args: dict[str, Any]) -> Response:
        if self.post_failures:
            status, body, headers = self.post_failures.pop(0)
            return JSONResponse(body, status_code=status, headers=headers)
        if self.reject_markup and args.get("mrkdwn") not in (False, "false", "0"):
            return JSONResponse({"ok": False, "error": "invalid_blocks"})
        n = next(self._ts)
        ts = f"1800000{n:03d}.000{n:03d}"
        message = {"type": "message", "text": args.get("text"), "ts": ts, "bot_id": BOT_ID}
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        return JSONResponse(
            {"ok": True, "channel": args.get("channel"), "ts": ts, "message": message}
        )

    def _apps_connections_open(self, args: dict[str, Any]) -> Response:
        url = self.base_url.replace("http://", "ws://") + "/socket"
        return JSONResponse({"ok": True, "url": url})

    async def _file(self, request: Request) -> Response:
        self.file_requests.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != f"Bearer {BOT_TOKEN}":
            return Response("login page", status_code=302, headers={"location": "/login"})
        data, mime = self.files[request.path_params["name"]]
        return Response(data, media_type=mime)

    # -- Socket Mode ----------------------------------------------------------------------------
    async def _socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0APP"}}
        await websocket.send_text(json.dumps(hello))
        self.socket_opened.set()

        async def read() -> None:
            while True:
                data = json.loads(await websocket.receive_text())
                if "payload" in data:
                    self.ack_payloads[str(data.get("envelope_id"))] = data["payload"]
                self.acks.append(str(data.get("envelope_id")))

        async def write() -> None:
            while True:
                envelope = await self.envelopes.get()
                await websocket.send_text(json.dumps(envelope))

        tasks = {
            asyncio.create_task(read(), name="fake-slack-read"),
            asyncio.create_task(write(), name="fake-slack-write"),
        }
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await task

    def push_event(self, payload: dict[str, Any]) -> str:
        """Send an Events API payload over the socket; return its envelope id."""
        envelope_id = uuid.uuid4().hex
        self.envelopes.put_nowait(
            {
                "envelope_id": envelope_id,
                "payload": payload,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )
        return envelope_id

    def push_command(self, fields: dict[str, str]) -> str:
        """Send a slash command over the socket (its own envelope type); return its id."""
        envelope_id = uuid.uuid4().hex
        self.envelopes.put_nowait(
            {
                "envelope_id": envelope_id,
                "payload": fields,
                "type": "slash_commands",
                "accepts_response_payload": True,
            }
        )
        return envelope_id


# -- Events API requests -------------------------------------------------------------------------


def event_callback(event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "api_app_id": "A0APP",
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": 1712345678,
        "authorizations": [
            {"enterprise_id": None, "team_id": TEAM, "user_id": BOT_USER, "is_bot": True}
        ],
    }


def message_event(
    text: str,
    *,
    ts: str,
    channel: str = "C1GENERAL",
    channel_type: str = "channel",
    user: str = "U1ALICE",
    **extra: Any,
) -> dict[str, Any]:
    event = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": TEAM,
    }
    event.update(extra)
    return event


def slash_command(
    command: str,
    text: str = "",
    *,
    channel: str = "C1GENERAL",
    channel_name: str = "general",
    user: str = "U1ALICE",
) -> dict[str, str]:
    """The fields Slack sends when someone types a registered slash command."""
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM,
        "team_domain": "acme",
        "channel_id": channel,
        "channel_name": channel_name,
        "user_id": user,
        "user_name": "alice",
        "command": command,
        "text": text,
        "api_app_id": "A0APP",
        "response_url": f"https://hooks.slack.com/commands/{TEAM}/1/x",
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
    }


def signed(
    payload: dict[str, Any], *, timestamp: int, secret: str = SIGNING_SECRET
) -> tuple[bytes, dict[str, str]]:
    """The body and headers Slack sends for *payload* at *timestamp*."""
    return _signed(json.dumps(payload).encode(), "application/json", timestamp, secret)


def signed_form(
    fields: dict[str, str], *, timestamp: int, secret: str = SIGNING_SECRET
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a slash command request (a form, signed like events)."""
    body = urllib.parse.urlencode(fields).encode()
    return _signed(body, "application/x-www-form-urlencoded", timestamp, secret)


def _signed(
    body: bytes, content_type: str, timestamp: int, secret: str
) -> tuple[bytes, dict[str, str]]:
    base = b"v0:" + str(timestamp).encode() + b":" + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return body, {
        "content-type": content_type,
        "x-slack-request-timestamp": str(timestamp),
        "x-slack-signature": signature,
    }
