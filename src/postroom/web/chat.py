"""The web chat: the page at ``/`` and ``/chat/<channel>``, and its WebSocket.

Every visitor has a chat of their own, ``web:<channel>/<visitor>``: ``anon-<id>`` from a signed
cookie (sender ``web:anon/<id>``), or ``user-<id>`` for a page opened with the API token
(sender ``web:user/<id>``). An anonymous page sees only its own chat; a page opened with the
token is the operator view and sees every chat live (MESSAGES §6). Messages typed here go
through ingest like any other; what the page shows comes from the live feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from postroom.core.errors import PostroomError
from postroom.core.messages import InboundMessage
from postroom.core.signing import sign_value, token_matches, token_tag, verify_value
from postroom.engine.notices import new_message_id
from postroom.engine.services import Services
from postroom.engine.signals import Event
from postroom.engine.views import message_to_dict

__all__ = ["VISITOR_COOKIE", "WebChat"]

log = structlog.get_logger(__name__)

VISITOR_COOKIE = "postroom_visitor"
_CHANNEL = re.compile(r"[a-z0-9_-]{1,64}")
HISTORY_LIMIT = 200
PING_TIMEOUT_S = 75.0


@dataclass(frozen=True, slots=True)
class _Visitor:
    chat_jid: str
    sender: str
    name: str
    operator: bool


class WebChat:
    """Routes of the web chat surface, over the engine's services."""

    def __init__(
        self,
        *,
        services: Services,
        token: str,
        secret: bytes,
        assistant_name: str,
        setup_hint: str | None = None,
    ) -> None:
        self._services = services
        self._setup_hint = setup_hint
        self._token = token
        self._secret = secret
        self._assistant = assistant_name
        static = resources.files("postroom.web") / "static"
        self._static_dir = str(static)
        self._page = (static / "chat.html").read_bytes()

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self._page_response, methods=["GET"]),
            Route("/chat/{channel}", self._page_response, methods=["GET"]),
            WebSocketRoute("/ws/chat/{channel}", self._socket),
            Mount("/static", app=StaticFiles(directory=self._static_dir), name="static"),
        ]

    # -- the page --------------------------------------------------------------------------
    async def _page_response(self, request: Request) -> Response:
        channel = request.path_params.get("channel", "main")
        if not _CHANNEL.fullmatch(channel):
            return Response("No such chat channel.", status_code=404, media_type="text/plain")
        response = Response(self._page, media_type="text/html; charset=utf-8")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "style-src 'self'; script-src 'self'; frame-ancestors 'none'"
        )
        if verify_value(self._secret, request.cookies.get(VISITOR_COOKIE)) is None:
            response.set_cookie(
                VISITOR_COOKIE,
                sign_value(self._secret, secrets.token_hex(6)),
                max_age=365 * 24 * 3600,
                httponly=True,
                samesite="lax",
            )
        return response

    # -- the socket ---------------------------------------------------------------------------
    async def _socket(self, websocket: WebSocket) -> None:
        channel = websocket.path_params["channel"]
        # Refusals accept first and then close with a code, so the page can say why.
        if not _CHANNEL.fullmatch(channel):
            await websocket.accept()
            await websocket.close(code=4404, reason="no such channel")
            return
        token = websocket.query_params.get("token")
        headers: list[tuple[bytes, bytes]] = []
        if token is not None:
            if not token_matches(self._token, token):
                await websocket.accept()
                await websocket.close(code=4401, reason="the access token was refused")
                return
            tag = token_tag(token)
            visitor = _Visitor(f"web:{channel}/user-{tag}", f"web:user/{tag}", "Operator", True)
        else:
            ident = verify_value(self._secret, websocket.cookies.get(VISITOR_COOKIE))
            if ident is None:
                ident = secrets.token_hex(6)
                cookie = sign_value(self._secret, ident)
                headers.append(
                    (
                        b"set-cookie",
                        f"{VISITOR_COOKIE}={cookie}; Path=/; HttpOnly; "
                        "SameSite=Lax; Max-Age=31536000".encode(),
                    )
                )
            visitor = _Visitor(f"web:{channel}/anon-{ident}", f"web:anon/{ident}", "Visitor", False)
        await websocket.accept(headers=headers or None)
        await self._serve(websocket, visitor, channel)

    async def _serve(self, websocket: WebSocket, visitor: _Visitor, channel: str) -> None:
        bus = self._services.signals.bus

        def wanted(event: Event) -> bool:
            own = event.data.get("chat_jid") == visitor.chat_jid
            if event.kind == "delivery":
                # A scheduled answer lives in its task's conversation, not in this chat's
                # history: it reaches the page as its delivery.
                return own and event.data.get("kind") == "scheduled"
            if event.kind not in ("message", "typing", "stream"):
                return False
            return visitor.operator or own

        # Subscribe before reading the history, so nothing falls between the two.
        subscription = bus.subscribe(
            accept=wanted, kinds=frozenset({"message", "delivery", "typing", "stream"})
        )
        try:
            await websocket.send_json(
                {
                    "type": "hello",
                    "chat_jid": visitor.chat_jid,
                    "sender": visitor.sender,
                    "operator": visitor.operator,
                    "assistant": self._assistant,
                    "channel": channel,
                }
            )
            history = await self._services.history.messages(
                chat_jid=None if visitor.operator else visitor.chat_jid, limit=HISTORY_LIMIT
            )
            last_seq = history[-1].seq if history else 0
            await websocket.send_json(
                {"type": "history", "messages": [message_to_dict(m) for m in history]}
            )
            if self._setup_hint:
                # Not stored: a hint for whoever opens the page, until a model is configured.
                await websocket.send_json(
                    {"type": "message", "message": self._notice(visitor, self._setup_hint)}
                )
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(self._read(websocket, visitor))
                writer = group.create_task(self._write(websocket, subscription, last_seq))
                done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
                for task in (reader, writer):
                    if task not in done:
                        task.cancel()
        except* (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            subscription.close()
            with contextlib.suppress(RuntimeError):
                await websocket.close()

    async def _write(self, websocket: WebSocket, subscription: Any, last_seq: int) -> None:
        async for event in subscription:
            if event.kind == "message":
                if int(event.data["seq"]) <= last_seq:
                    continue
                await websocket.send_json({"type": "message", "message": event.data})
            elif event.kind == "delivery":
                await websocket.send_json({"type": "message", "message": self._delivered(event)})
            else:  # typing, or an answer's text while it is written (never stored)
                await websocket.send_json({"type": event.kind, **event.data})

    def _notice(self, visitor: _Visitor, text: str) -> dict[str, Any]:
        return {
            "id": "setup-hint",
            "chat_jid": visitor.chat_jid,
            "seq": 0,
            "sender": "host",
            "sender_name": "host",
            "content": text,
            "timestamp": self._services.clock().isoformat(),
            "message_type": "host",
            "verb": "message",
            "topic": "",
            "reply_to": None,
            "routed_to": None,
            "observed": False,
            "run_id": None,
            "metadata": {"source": "setup"},
        }

    def _delivered(self, event: Event) -> dict[str, Any]:
        data = event.data
        return {
            "id": f"{data['id']}:{data['chunk']}",
            "chat_jid": data["chat_jid"],
            "seq": None,
            "sender": "bot",
            "sender_name": self._assistant,
            "content": data["content"],
            "timestamp": self._services.clock().isoformat(),
            "message_type": data["message_type"],
            "verb": "message",
            "topic": data.get("topic") or "",
            "reply_to": None,
            "routed_to": data.get("folder"),
            "observed": False,
            "run_id": None,
            "metadata": {"scheduled": True},
        }

    async def _read(self, websocket: WebSocket, visitor: _Visitor) -> None:
        while True:
            try:
                async with asyncio.timeout(PING_TIMEOUT_S):
                    raw = await websocket.receive_text()
            except TimeoutError:
                return  # the page pings every 25 s: this one is gone
            try:
                frame = json.loads(raw)
            except json.JSONDecodeError:
                await websocket.send_json(
                    {"type": "error", "client_id": None, "error": "The frame is not JSON."}
                )
                continue
            if not isinstance(frame, dict):
                continue
            if frame.get("type") == "ping":
                await websocket.send_json({"type": "pong"})
            elif frame.get("type") == "send":
                await self._send(websocket, visitor, frame)

    async def _send(self, websocket: WebSocket, visitor: _Visitor, frame: dict[str, Any]) -> None:
        client_id = frame.get("client_id")
        text = frame.get("text")
        if not isinstance(text, str) or not text.strip():
            await websocket.send_json(
                {"type": "error", "client_id": client_id, "error": "The message is empty."}
            )
            return
        services = self._services
        message = InboundMessage(
            id=new_message_id(),
            chat_jid=visitor.chat_jid,
            sender=visitor.sender,
            content=text,
            timestamp=services.clock(),
            sender_name=visitor.name,
            is_dm=True,
        )
        try:
            result = await services.ingest.ingest(message)
        except PostroomError as exc:
            await websocket.send_json({"type": "error", "client_id": client_id, "error": str(exc)})
            return
        await websocket.send_json(
            {
                "type": "accepted",
                "client_id": client_id,
                "id": result.id,
                "decision": result.decision.to_dict(),
            }
        )
