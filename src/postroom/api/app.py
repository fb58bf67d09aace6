"""The ASGI application of the HTTP API: errors as one sentence, bearer tokens, body limits.

Only ``/healthz``, the web chat page and its assets are open; everything under ``/api/``,
``/metrics`` and ``/mcp`` needs ``Authorization: Bearer <token>`` — ``[api] token`` or a named
token whose scope covers the endpoint (:mod:`postroom.api.scopes`).
"""

from __future__ import annotations

import functools

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from postroom import __version__
from postroom.api.access import build_access_router
from postroom.api.errors import describe_validation, error_response, error_status
from postroom.api.ingest_lane import IngestLane, documented_route
from postroom.api.middleware import BearerAuth, BodyLimit, JsonBodies
from postroom.api.openapi import corrected_openapi
from postroom.api.routes import ApiContext, build_router, ingest_body
from postroom.core.errors import PostroomError

__all__ = ["BLOB_PATH", "create_api"]

#: Attachments: the web chat fetches them without a token, with the operator's dashboard session
#: or a visitor's cookie (a visitor sees only the files of their own chat).
BLOB_PATH = "/api/v1/blobs/"


def create_api(
    ctx: ApiContext,
    *,
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
        return error_response(400, describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "Request refused."
        if exc.status_code == 404 and message == "Not Found":
            message = "There is nothing at this path."
        elif exc.status_code == 405:
            message = "This method is not allowed on this path."
        return error_response(exc.status_code, message)

    @app.exception_handler(PostroomError)
    async def on_postroom(_: Request, exc: PostroomError) -> JSONResponse:
        return error_response(error_status(exc), str(exc))

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        body, content_type = await ctx.render_metrics()
        return PlainTextResponse(body.decode(), media_type=content_type)

    app.include_router(build_router(ctx))
    app.include_router(build_access_router(ctx.services))
    # The statuses the server really answers (400, not FastAPI's 422), and the ingest lane's
    # endpoint, which FastAPI's routing never sees; built on first request.
    app.openapi = corrected_openapi(app, documented_route())  # type: ignore[method-assign]
    # Middlewares run in the reverse order of adding: auth, then the body limit, then the JSON
    # check, then the ingest lane — an unauthenticated body is never buffered, an oversized one
    # never parsed.
    app.add_middleware(IngestLane, ingest=functools.partial(ingest_body, ctx))
    app.add_middleware(JsonBodies)
    app.add_middleware(BodyLimit, limit=body_limit)
    app.add_middleware(
        BearerAuth,
        authenticate=ctx.services.tokens.authenticate,
        session_paths=(BLOB_PATH,),
    )
    return app
