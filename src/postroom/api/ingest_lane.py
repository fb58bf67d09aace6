"""``POST /api/v1/messages`` without FastAPI's per-request machinery.

Every adapter's inbound message comes through this one route, so its fixed cost is the
gateway's ceiling in messages per second: FastAPI's routing, dependency solving, exception
middleware and response encoding cost more than storing and routing the message. This lane
answers the well-formed request directly — the same body model, the same ingest call, the
same answer — and hands anything else (a body that is not JSON, a validation error, another
content type) to the FastAPI route, so every refusal keeps its one wording.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from postroom.api.errors import error_body, error_status
from postroom.api.middleware import ASGIApp, Message, Receive, Scope, Send, replay
from postroom.api.models import MessageIn
from postroom.core.errors import PostroomError

__all__ = ["IngestLane"]

PATH = "/api/v1/messages"


class IngestLane:
    def __init__(
        self, app: ASGIApp, *, ingest: Callable[[MessageIn], Awaitable[dict[str, Any]]]
    ) -> None:
        self._app = app
        self._ingest = ingest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-type" and not bytes(value).lower().startswith(b"application/json"):
                await self._app(scope, receive, send)
                return
        received: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                await self._app(scope, replay(received, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            body = MessageIn.model_validate(json.loads(b"".join(chunks)))
        except (ValueError, RecursionError, ValidationError):  # JSONDecodeError: ValueError
            await self._app(scope, replay(received, receive), send)
            return
        try:
            status, answer = 200, await self._ingest(body)
        except PostroomError as exc:
            status, answer = error_status(exc), error_body(str(exc))
        payload = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
