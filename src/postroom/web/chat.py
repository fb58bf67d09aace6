"""The web chat: the page at ``/`` and ``/chat/<channel>``, and its WebSocket.

Every visitor has a chat of their own, ``web:<channel>/<visitor>``: ``anon-<id>`` from a signed
cookie (sender ``web:anon/<id>``), or ``user-<id>`` for the operator signed in on the dashboard
(sender ``web:user/<id>``; the session cookie goes with the socket, a token never in its URL).
An anonymous page sees only its own chat, and of it what a platform chat shows (MESSAGES §5):
its messages, the answers, command outputs and the notices meant for it — filtered here, before
anything is sent, so no run details, traces, folder names or set-up hints ever reach a visitor's
socket. A page opened in a signed-in session is the operator view and sees every chat live,
everything included (MESSAGES §6). Messages typed here go through ingest like any other; what
the page shows comes from the live feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from postroom.core.display import shown_to_chat
from postroom.core.errors import InvalidInput, PostroomError
from postroom.core.messages import Attachment, InboundMessage
from postroom.core.signing import sign_value, token_tag, verify_value
from postroom.engine.attachments import AttachmentLimits, check_attachment
from postroom.engine.notices import new_message_id
from postroom.engine.services import Services
from postroom.engine.sessions import SessionKeeper
from postroom.engine.signals import Event
from postroom.engine.tokens import Principal
from postroom.engine.views import message_to_dict

__all__ = ["VISITOR_COOKIE", "WebChat"]

log = structlog.get_logger(__name__)

VISITOR_COOKIE = "postroom_visitor"
_CHANNEL = re.compile(r"[a-z0-9_-]{1,64}")
HISTORY_LIMIT = 200
PING_TIMEOUT_S = 75.0
#: What a visitor's page may know of a message's metadata: a command output's exit code, that a
#: row was a command (shown as one), the attachments they sent.
_VISITOR_METADATA = ("exit_code", "command", "attachments")
#: Files one message of the web chat may carry.
MAX_FILES = 8


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
        sessions: SessionKeeper,
        secret: bytes,
        assistant_name: str,
        setup_hint: str | None = None,
        attachments: AttachmentLimits | None = None,
    ) -> None:
        self._services = services
        self._attachments = attachments or AttachmentLimits()
        self._setup_hint = setup_hint
        self._sessions = sessions
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

    async def operator(self, cookies: Mapping[str, str]) -> Principal | None:
        """The operator signed in on the dashboard whose session *cookies* carry, or ``None``:
        a token confined to a folder is no operator, and its page is a visitor's."""
        session = await self._sessions.session(cookies)
        if session is None or session.principal.folder is not None:
            return None
        return session.principal

    async def operator_of(self, request: Request) -> Principal | None:
        """The operator a request comes from (``GET /api/v1/blobs``: every chat's files)."""
        return await self.operator(request.cookies)

    def visitor_chat(self, request: Request, channel: str) -> str | None:
        """The chat of the anonymous visitor whose signed cookie *request* carries, on the
        page of *channel* (``GET /api/v1/blobs``: a visitor sees their own chat's files)."""
        ident = verify_value(self._secret, request.cookies.get(VISITOR_COOKIE))
        if ident is None or not _CHANNEL.fullmatch(channel):
            return None
        return f"web:{channel}/anon-{ident}"

    # -- the page --------------------------------------------------------------------------
    async def _page_response(self, request: Request) -> Response:
        channel = request.path_params.get("channel", "main")
        if not _CHANNEL.fullmatch(channel):
            return Response("No such chat channel.", status_code=404, media_type="text/plain")
        response = Response(self._page, media_type="text/html; charset=utf-8")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
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
        try:
            await self._open(websocket)
        except WebSocketDisconnect:
            # A tab closed while its socket opened: one quiet line, never a traceback (which
            # would show the request, headers and all).
            log.debug("web.disconnected", channel=websocket.path_params.get("channel"))

    async def _open(self, websocket: WebSocket) -> None:
        channel = websocket.path_params["channel"]
        # Refusals accept first and then close with a code, so the page can say why.
        if not _CHANNEL.fullmatch(channel):
            await websocket.accept()
            await websocket.close(code=4404, reason="no such channel")
            return
        headers: list[tuple[bytes, bytes]] = []
        if "token" in websocket.query_params:
            # A token in a URL ends up in logs and histories: refused, with where to go.
            await websocket.accept()
            await websocket.close(code=4401, reason="sign in on the dashboard instead")
            return
        operator = await self.operator(websocket.cookies)
        if operator is not None:
            tag = token_tag(operator.name)
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
            return visitor.operator or event.data.get("chat_jid") == visitor.chat_jid

        # Subscribe before reading the history, so nothing falls between the two.
        subscription = bus.subscribe(
            accept=wanted, kinds=frozenset({"message", "typing", "stream"})
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
            shown = [_view(visitor, message_to_dict(m)) for m in history]
            await websocket.send_json(
                {"type": "history", "messages": [m for m in shown if m is not None]}
            )
            if self._setup_hint and visitor.operator:
                # Not stored: a hint for the operator, until a model is configured.
                await websocket.send_json(
                    {"type": "message", "message": self._notice(visitor, self._setup_hint)}
                )
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(self._read(websocket, visitor))
                writer = group.create_task(self._write(websocket, visitor, subscription, last_seq))
                done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
                for task in (reader, writer):
                    if task not in done:
                        task.cancel()
        except* (WebSocketDisconnect, RuntimeError):
            # A closed tab is normal: one quiet line, never a traceback.
            log.debug("web.disconnected", chat_jid=visitor.chat_jid)
        finally:
            subscription.close()
            # The page may be gone already: closing a socket the client closed is no error.
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close()

    async def _write(
        self, websocket: WebSocket, visitor: _Visitor, subscription: Any, last_seq: int
    ) -> None:
        async for event in subscription:
            if event.kind == "message":
                if int(event.data["seq"]) <= last_seq:
                    continue
                message = _view(visitor, event.data)
                if message is not None:
                    await websocket.send_json({"type": "message", "message": message})
            else:  # typing, or an answer's text while it is written (never stored)
                data = dict(event.data)
                if not visitor.operator:
                    data.pop("folder", None)
                    data.pop("role", None)
                await websocket.send_json({"type": event.kind, **data})

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
        text = frame.get("text", "")
        services = self._services
        try:
            files = _files(frame.get("attachments"), self._attachments)
            if not isinstance(text, str) or (not text.strip() and not files):
                raise InvalidInput("The message is empty.")
            message = InboundMessage(
                id=new_message_id(),
                chat_jid=visitor.chat_jid,
                sender=visitor.sender,
                content=text,
                timestamp=services.clock(),
                sender_name=visitor.name,
                is_dm=True,
                attachments=files,
            )
            result = await services.ingest.ingest(message)
        except PostroomError as exc:
            await websocket.send_json({"type": "error", "client_id": client_id, "error": str(exc)})
            return
        decision = result.decision.to_dict()
        if not visitor.operator:
            # Where a message went and why is the operator's business.
            decision = {"action": decision["action"], "layer": decision["layer"]}
        await websocket.send_json(
            {"type": "accepted", "client_id": client_id, "id": result.id, "decision": decision}
        )


def _files(raw: Any, limits: AttachmentLimits) -> tuple[Attachment, ...]:
    """The files of a ``send`` frame (``[{name, mime, data}]``, data in base64), checked."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_FILES:
        raise InvalidInput(f"Send at most {MAX_FILES} files with one message.")
    files: list[Attachment] = []
    for item in raw:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(key, ""), str) for key in ("name", "mime", "data")
        ):
            raise InvalidInput("A file must be an object of name, mime and data (base64).")
        mime = str(item.get("mime") or "application/octet-stream")
        kind = "image" if mime.lower().startswith("image/") else "file"
        name = str(item.get("name") or "")[:255]
        files.append(
            check_attachment(Attachment(kind, mime, name, data=str(item.get("data"))), limits)
        )
    return tuple(files)


def _view(visitor: _Visitor, message: dict[str, Any]) -> dict[str, Any] | None:
    """A stored message as this page may see it: all of it for the operator; for a visitor,
    what their chat shows (MESSAGES §5), without the folder, the run or operator metadata."""
    if visitor.operator:
        return message
    metadata = message.get("metadata") or {}
    if not shown_to_chat(str(message.get("message_type")), metadata):
        return None
    kept = {key: metadata[key] for key in _VISITOR_METADATA if key in metadata}
    if kept.get("command") is not True:  # a notice's metadata names the command it answers
        kept.pop("command", None)
    return {**message, "routed_to": None, "run_id": None, "metadata": kept}
