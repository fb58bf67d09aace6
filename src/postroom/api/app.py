"""The ASGI application of the HTTP API: errors as one sentence, bearer tokens, body limits.

Only ``/healthz``, the web chat page and its assets are open; everything under ``/api/`` and
``/metrics`` needs ``Authorization: Bearer <api.token>`` when a token is configured.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from postroom import __version__
from postroom.api.routes import ApiContext, build_router
from postroom.core.errors import Conflict, InvalidInput, NotFound, PostroomError, TooLarge
from postroom.core.signing import token_matches

__all__ = ["create_api"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _bearer(scope: Scope) -> str | None:
    for name, raw in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, value = bytes(raw).decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not value:
                return None
            return value.strip()
    return None


def _error(status: int, message: str) -> JSONResponse:
    # A sentence may quote the client's input, which can hold a lone surrogate (a JSON
    # ``\ud800`` escape, or invalid UTF-8 that ``json.loads`` lets through): write it escaped,
    # or encoding the answer would fail.
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message}, status_code=status)


def _describe_validation(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "The request is malformed."
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    where = ".".join(loc)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"Unknown field {where!r}; it is not accepted here."
    if kind == "missing":
        return f"Missing field {where!r}."
    if kind == "json_invalid":
        return "The body is not valid JSON."
    message = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    return f"Field {where!r}: {message}." if where else f"{message}."


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
        refuse = _error(413, f"The body is over {self._limit} bytes.")
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
        replay = iter(messages)

        async def buffered() -> Message:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self._app(scope, buffered, send)


class BearerAuth:
    """Refuses ``/api/`` and ``/metrics`` requests without the bearer token (401).

    Plain ASGI rather than an ``http`` middleware function: those run every request through a
    task group and memory streams, which cost more than ingesting the message itself.
    """

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            guarded = path.startswith("/api/") or path == "/metrics"
            if guarded and not token_matches(self._token, _bearer(scope)):
                await _error(401, "Missing or wrong bearer token.")(scope, receive, send)
                return
        await self._app(scope, receive, send)


def create_api(
    ctx: ApiContext,
    *,
    token: str,
    body_limit: int,
    title: str = "postroom",
) -> FastAPI:
    """The FastAPI app with the API router, health and metrics; surfaces add their routes."""
    app = FastAPI(
        title=title,
        version=__version__,
        description="A self-hosted message router for LLM agents.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
    )

    @app.exception_handler(RequestValidationError)
    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "Request refused."
        if exc.status_code == 404 and message == "Not Found":
            message = "There is nothing at this path."
        elif exc.status_code == 405:
            message = "This method is not allowed on this path."
        return _error(exc.status_code, message)

    @app.exception_handler(PostroomError)
    async def on_postroom(_: Request, exc: PostroomError) -> JSONResponse:
        if isinstance(exc, TooLarge):
            return _error(413, str(exc))
        if isinstance(exc, InvalidInput):
            return _error(400, str(exc))
        if isinstance(exc, NotFound):
            return _error(404, str(exc))
        if isinstance(exc, Conflict):
            return _error(409, str(exc))
        return _error(500, str(exc))

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        body, content_type = await ctx.render_metrics()
        return PlainTextResponse(body.decode(), media_type=content_type)

    app.include_router(build_router(ctx))
    # Added last, so it runs first: an unauthenticated body is never buffered.
    app.add_middleware(BodyLimit, limit=body_limit)
    app.add_middleware(BearerAuth, token=token)
    return app
