"""The terminal UI's WebSocket, ``/ws/tui``: a folder's conversations, live, for the operator.

The TUI (``postroom chat``) connects with the API token and a folder. It is shown the folder's
traffic across every chat it happens in (MESSAGES §6) plus its own operator chat
``tui:<folder>`` (ROUTING §1, §3 step 0), and what the operator types there is ingested as sender
``tui-user``: a sender only this token-authenticated socket may set, never the HTTP API.

Frames, server to client: ``hello`` (folder, chat, the folder list), ``history``, then live
``message``, ``typing`` and ``stream`` (an answer's text while the model writes it, see
:mod:`postroom.engine.streaming`); ``accepted`` or ``error`` answer a ``send``. Client to server:
``send``, ``switch`` (another folder: a new ``hello`` and ``history``) and ``ping``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

import structlog
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from postroom.core.errors import NotFound, PostroomError
from postroom.core.messages import InboundMessage, Sender
from postroom.core.signing import token_matches
from postroom.engine.notices import new_message_id
from postroom.engine.services import Services
from postroom.engine.signals import Event, Subscription
from postroom.engine.views import message_to_dict
from postroom.web.socket_auth import presented_token, subprotocol

__all__ = ["OPERATOR_NAME", "TuiSocket", "tui_chat_jid"]

log = structlog.get_logger(__name__)

OPERATOR_NAME = "operator"
HISTORY_LIMIT = 200
#: Close codes the client reads: the token was refused, the folder does not exist.
CLOSE_UNAUTHORIZED = 4401
CLOSE_NOT_FOUND = 4404
#: The keys a ``send`` frame may carry; the type and sender of what it stores are fixed.
SEND_KEYS = frozenset({"type", "client_id", "text"})


def tui_chat_jid(folder: str) -> str:
    """The operator chat addressed to *folder* directly (ROUTING §1)."""
    return f"tui:{folder}"


@dataclass(slots=True)
class _View:
    """What one socket is looking at. Switching folders replaces the folder and moves the
    cursor past the history just sent, so a live event is shown exactly once."""

    folder: str
    last_seq: int = 0

    @property
    def chat_jid(self) -> str:
        return tui_chat_jid(self.folder)

    def shows(self, event: Event) -> bool:
        data = event.data
        if event.kind == "message":
            return data.get("routed_to") == self.folder or data.get("chat_jid") == self.chat_jid
        if event.kind in ("typing", "stream"):
            return data.get("folder") == self.folder or data.get("chat_jid") == self.chat_jid
        return False


class TuiSocket:
    """The ``/ws/tui`` route over the engine's services."""

    def __init__(self, *, services: Services, token: str, assistant_name: str) -> None:
        self._services = services
        self._token = token
        self._assistant = assistant_name

    def route(self) -> WebSocketRoute:
        return WebSocketRoute("/ws/tui", self._socket)

    async def _socket(self, websocket: WebSocket) -> None:
        try:
            await self._open(websocket)
        except WebSocketDisconnect:
            # A client that goes away is normal: one quiet line, never a traceback.
            log.debug("tui.disconnected")

    async def _open(self, websocket: WebSocket) -> None:
        protocol = subprotocol(websocket)
        # Refusals accept first and then close with a code, so the client can say why. The
        # token comes in a header (or the subprotocol), never in the URL (socket_auth).
        token = presented_token(websocket)
        if token is None or not token_matches(self._token, token):
            await websocket.accept(subprotocol=protocol)
            await websocket.close(code=CLOSE_UNAUTHORIZED, reason="the access token was refused")
            return
        folder = websocket.query_params.get("folder") or "main"
        if not await self._exists(folder):
            await websocket.accept(subprotocol=protocol)
            await websocket.close(code=CLOSE_NOT_FOUND, reason=f"there is no folder {folder}")
            return
        await websocket.accept(subprotocol=protocol)
        log.info("tui.connected", folder=folder)
        await self._serve(websocket, _View(folder))

    async def _exists(self, folder: str) -> bool:
        try:
            await self._services.folders.get_folder(folder)
        except NotFound:
            return False
        return True

    async def _serve(self, websocket: WebSocket, view: _View) -> None:
        # One lock orders the frames: a switch sends hello and history while no live frame
        # can slip in between them.
        lock = asyncio.Lock()
        # Subscribe before reading the history, so nothing falls between the two; the filter
        # follows the view as it switches.
        subscription = self._services.signals.bus.subscribe(
            accept=view.shows, kinds=frozenset({"message", "typing", "stream"})
        )
        try:
            async with lock:
                await self._introduce(websocket, view)
            async with asyncio.TaskGroup() as group:
                reader = group.create_task(self._read(websocket, view, lock))
                writer = group.create_task(self._write(websocket, view, lock, subscription))
                done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
                for task in (reader, writer):
                    if task not in done:
                        task.cancel()
        except* (WebSocketDisconnect, RuntimeError):
            # A closed tab or client is normal: one quiet line, never a traceback.
            log.debug("tui.disconnected", folder=view.folder)
        finally:
            subscription.close()
            # The client may be gone already: closing is then a no-op that raises.
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close()

    async def _introduce(self, websocket: WebSocket, view: _View) -> None:
        """``hello`` and ``history`` for the view's folder (on connect and on every switch)."""
        history = self._services.history
        folders = [f.path for f in await self._services.folders.list_folders()]
        await websocket.send_json(
            {
                "type": "hello",
                "folder": view.folder,
                "chat_jid": view.chat_jid,
                "sender": Sender.TUI_USER.value,
                "assistant": self._assistant,
                "folders": folders,
            }
        )
        routed = await history.messages(folder=view.folder, limit=HISTORY_LIMIT)
        own = await history.messages(chat_jid=view.chat_jid, limit=HISTORY_LIMIT)
        merged = {m.seq: m for m in (*routed, *own)}
        messages = [merged[seq] for seq in sorted(merged)][-HISTORY_LIMIT:]
        # Anything at or below the newest seq read is in the history (or older than its window).
        view.last_seq = max(merged, default=0)
        await websocket.send_json(
            {"type": "history", "messages": [message_to_dict(m) for m in messages]}
        )

    async def _write(
        self, websocket: WebSocket, view: _View, lock: asyncio.Lock, subscription: Subscription
    ) -> None:
        async for event in subscription:
            async with lock:
                # Queued before a switch, delivered after it: filter again.
                if not view.shows(event):
                    continue
                if event.kind == "message":
                    if int(event.data["seq"]) <= view.last_seq:
                        continue
                    await websocket.send_json({"type": "message", "message": event.data})
                else:
                    await websocket.send_json({"type": event.kind, **event.data})
        # A subscriber that fell behind is closed by the bus: end the socket, and the client
        # reconnects and reads the history again.

    async def _read(self, websocket: WebSocket, view: _View, lock: asyncio.Lock) -> None:
        while True:
            raw = await websocket.receive_text()
            try:
                frame = json.loads(raw)
            except json.JSONDecodeError:
                frame = None
            if not isinstance(frame, dict):
                await self._error(websocket, lock, None, "The frame is not a JSON object.")
                continue
            kind = frame.get("type")
            if kind == "ping":
                async with lock:
                    await websocket.send_json({"type": "pong"})
            elif kind == "send":
                await self._send(websocket, view, lock, frame)
            elif kind == "switch":
                await self._switch(websocket, view, lock, frame)
            else:
                await self._error(
                    websocket, lock, frame.get("client_id"), f"Unknown frame type {kind!r}."
                )

    async def _switch(
        self, websocket: WebSocket, view: _View, lock: asyncio.Lock, frame: dict[str, Any]
    ) -> None:
        folder = frame.get("folder")
        if not isinstance(folder, str) or not await self._exists(folder):
            await self._error(
                websocket, lock, frame.get("client_id"), f"There is no folder {folder}."
            )
            return
        async with lock:
            view.folder = folder
            await self._introduce(websocket, view)

    async def _send(
        self, websocket: WebSocket, view: _View, lock: asyncio.Lock, frame: dict[str, Any]
    ) -> None:
        client_id = frame.get("client_id")
        text = frame.get("text")
        # Who speaks and as what is the server's to say (MESSAGES §2): a frame that tries to
        # name its type, sender or anything else is refused whole, not stored as a user row.
        extra = sorted(set(frame) - SEND_KEYS)
        if extra:
            await self._error(
                websocket,
                lock,
                client_id,
                "A send frame carries only text and client_id; the server sets the type and "
                f"sender (refused: {', '.join(extra)}).",
            )
            return
        if not isinstance(text, str) or not text.strip():
            await self._error(websocket, lock, client_id, "The message is empty.")
            return
        services = self._services
        message = InboundMessage(
            id=new_message_id(),
            chat_jid=view.chat_jid,
            sender=Sender.TUI_USER.value,
            content=text,
            timestamp=services.clock(),
            sender_name=OPERATOR_NAME,
            is_dm=True,
        )
        try:
            result = await services.ingest.ingest(message, operator=True)
        except PostroomError as exc:
            await self._error(websocket, lock, client_id, str(exc))
            return
        async with lock:
            await websocket.send_json(
                {
                    "type": "accepted",
                    "client_id": client_id,
                    "id": result.id,
                    "chat_jid": result.chat_jid,
                    "seq": result.seq,
                    "decision": result.decision.to_dict(),
                }
            )

    async def _error(
        self, websocket: WebSocket, lock: asyncio.Lock, client_id: Any, text: str
    ) -> None:
        async with lock:
            await websocket.send_json({"type": "error", "client_id": client_id, "error": text})
