"""Plain ASGI middlewares of the HTTP API: bearer tokens and their scopes, body limits.

Plain ASGI rather than Starlette's ``http`` middleware functions: those run every request
through a task group and memory streams, which cost more than ingesting the message itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from postroom.api.errors import error_response
from postroom.api.scopes import refusal
from postroom.engine.tokens import PRINCIPAL_KEY, Principal

__all__ = [
    "PRINCIPAL",
    "ASGIApp",
    "BearerAuth",
    "BodyLimit",
    "JsonBodies",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "replay",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The ASGI scope key under which :class:`BearerAuth` leaves the caller's :class:`Principal`.
PRINCIPAL = PRINCIPAL_KEY


def _bearer(scope: Scope) -> str | None:
    for name, raw in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, value = bytes(raw).decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not value:
                return None
            return value.strip()
    return None


def replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that returns the already read *messages* first, then reads on."""
    pending = iter(messages)

    async def replayed() -> Message:
        try:
            return next(pending)
        except StopIteration:
            return await receive()

    return replayed


class BodyLimit:
    """Refuses request bodies over the limit with 413 before the app sees any of them.

    A declared ``Content-Length`` over the limit is refused at once; otherwise the body is read
    (up to the limit) before the app runs, so a chunked upload cannot get half-processed.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        refuse = error_response(413, f"The body is over {self._limit} bytes.")
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self._limit:
                await refuse(scope, receive, send)
                return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self._limit:
                await refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self._app(scope, replay(messages, receive), send)


class JsonBodies:
    """Refuses an API write whose body is not declared JSON (400, one sentence).

    Without it FastAPI leaves such a body unparsed and answers with what its model thinks of
    the raw bytes. A write without a body (``POST /jobs/{id}/retry``) needs no content type.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in ("POST", "PUT", "PATCH")
            and scope["path"].startswith("/api/")
        ):
            content_type = ""
            has_body = False
            for name, value in scope.get("headers", ()):
                if name == b"content-type":
                    content_type = bytes(value).decode("latin-1")
                elif name == b"content-length":
                    has_body = has_body or value not in (b"0", b"")
                elif name == b"transfer-encoding":
                    has_body = True
            if has_body and "json" not in content_type.lower():
                given = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
                refuse = error_response(
                    400,
                    f"The body must be JSON, sent with Content-Type: application/json ({given} "
                    "was given).",
                )
                await refuse(scope, receive, send)
                return
        await self._app(scope, receive, send)


class BearerAuth:
    """Tells who calls ``/api/``, ``/metrics`` and ``/mcp`` from the bearer token, and refuses
    a missing or unknown token (401) or one outside the endpoint's scope (403).

    The caller is left in the ASGI scope under :data:`PRINCIPAL` for the handlers, which
    audit their writes under its name and confine them to its folder. A token is only ever
    read from the ``Authorization`` header, never from the URL.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Callable[[str | None], Awaitable[Principal | None]],
        session_paths: tuple[str, ...] = (),
    ) -> None:
        self._app = app
        self._authenticate = authenticate
        #: Paths (prefixes) a request without any ``Authorization`` header may reach with no
        #: principal: their handler checks the browser's session cookie instead.
        self._session_paths = session_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            mcp = path == "/mcp" or path.startswith("/mcp/")
            if (
                self._session_paths
                and path.startswith(self._session_paths)
                and not any(name == b"authorization" for name, _ in scope.get("headers", ()))
            ):
                await self._app(scope, receive, send)
                return
            if mcp or path.startswith("/api/") or path == "/metrics":
                principal = await self._authenticate(_bearer(scope))
                if principal is None:
                    await error_response(401, "Missing or wrong bearer token.")(
                        scope, receive, send
                    )
                    return
                # MCP tools check their own scopes: one endpoint serves them all.
                refused = None if mcp else refusal(scope["method"], path, principal)
                if refused is not None:
                    await error_response(403, refused)(scope, receive, send)
                    return
                scope[PRINCIPAL] = principal
        await self._app(scope, receive, send)
