"""``POST /api/v1/messages``: the one path of the endpoint every adapter's messages take.

Its fixed cost is the gateway's ceiling in messages per second, and FastAPI's routing,
dependency solving, exception middleware and response encoding cost more than storing and
routing the message. So this plain ASGI lane answers every request to the endpoint itself —
the message, and every refusal in the API's words and statuses (a body that is not JSON, a
field that is missing or wrong, a message ingest refuses) — and FastAPI never sees one. The
OpenAPI document still describes the endpoint, from :func:`documented_route`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from pydantic import ValidationError

from postroom.api.errors import describe_errors, error_body, error_status
from postroom.api.middleware import ASGIApp, Receive, Scope, Send
from postroom.api.models import MessageIn
from postroom.core.errors import PostroomError

__all__ = ["PATH", "IngestLane", "documented_route"]

PATH = "/api/v1/messages"
SUMMARY = "Inbound message from any adapter"


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
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away: there is no one to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        status, answer = await self.answer(_content_type(scope), b"".join(chunks))
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

    async def answer(self, content_type: str | None, raw: bytes) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer to one request body."""
        if not _is_json(content_type):
            return 400, error_body("Send the message as JSON (Content-Type: application/json).")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError: ValueError
            return 400, error_body("The body is not valid JSON.")
        if not isinstance(data, dict):
            return 400, error_body("The body must be a JSON object.")
        try:
            body = MessageIn.model_validate(data)
        except ValidationError as exc:
            return 400, error_body(describe_errors(exc.errors()))
        try:
            return 200, await self._ingest(body)
        except PostroomError as exc:
            return error_status(exc), error_body(str(exc))


def _content_type(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bytes(value).decode("latin-1")
    return None


def _is_json(content_type: str | None) -> bool:
    """JSON as FastAPI reads it: no type given, ``application/json`` or a ``+json`` type."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def documented_route() -> APIRoute:
    """The endpoint as ``/api/v1/openapi.json`` describes it; never mounted (the lane answers)."""

    async def post_message(body: MessageIn) -> dict[str, Any]:
        raise NotImplementedError("POST /api/v1/messages is answered by the ingest lane")

    return APIRoute(PATH, post_message, methods=["POST"], summary=SUMMARY)
