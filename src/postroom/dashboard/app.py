"""The dashboard's routes: sign-in and sign-out, then one module per group of pages, each a
thin shell over the engine functions the CLI, the API and MCP use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from postroom.dashboard import access_page, activity, catalog_pages, insight, live
from postroom.dashboard.shell import PREFIX, Shell, form_text
from postroom.engine.services import Services
from postroom.engine.sessions import SESSION_COOKIE, SESSION_TTL_S, Session, SessionKeeper

__all__ = ["Dashboard", "DashboardContext"]


@dataclass(frozen=True, slots=True)
class DashboardContext:
    """What the pages read besides the engine: the channels' state and this server."""

    services: Services
    #: Each adapter's status (``ChannelStatus.to_dict``).
    channel_status: Callable[[], list[dict[str, Any]]] = list
    #: Check every adapter's credentials now (the overview's ``Check channels``).
    probe_channels: Callable[[], Awaitable[None]] | None = None
    #: The platforms each adapter serves, by adapter name.
    adapter_platforms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The platforms served by an outbound webhook.
    webhook_platforms: tuple[str, ...] = ()
    #: This server, for the nodes page: host, port, pid, started_at.
    server: Callable[[], dict[str, Any]] = dict
    #: Every node, as ``postroom nodes --json`` and ``GET /api/v1/nodes`` list them.
    nodes: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    #: The id of this process's node (the one serving the page).
    node_id: str = ""
    #: Whether the database keeps a heartbeated row per node (PostgreSQL); SQLite keeps none.
    node_rows: bool = False


class Dashboard:
    def __init__(
        self, *, context: DashboardContext, sessions: SessionKeeper, assistant_name: str
    ) -> None:
        self._context = context
        self._shell = Shell.build(sessions=sessions, assistant_name=assistant_name)
        self._static = str(resources.files("postroom.dashboard") / "static")

    def routes(self) -> list[BaseRoute]:
        shell, context = self._shell, self._context
        return [
            Route(f"{PREFIX}/login", self._login_page, methods=["GET"]),
            Route(f"{PREFIX}/login", self._sign_in, methods=["POST"]),
            Route(f"{PREFIX}/logout", shell.page(self._sign_out), methods=["POST"]),
            *insight.routes(shell, context),
            *catalog_pages.routes(shell, context),
            *activity.routes(shell, context),
            *access_page.routes(shell, context),
            *live.routes(shell, context),
            Mount(f"{PREFIX}/static", app=StaticFiles(directory=self._static)),
        ]

    async def _login_page(self, request: Request) -> Response:
        target = _next(request.query_params.get("next"))
        if await self._shell.sessions.session(request.cookies) is not None:
            return RedirectResponse(target, status_code=303)
        return self._shell.render("login.html", request, None, next=target)

    async def _sign_in(self, request: Request) -> Response:
        form = await request.form()
        target = _next(form_text(form, "next"))
        if not _same_origin(request):
            return self._shell.render(
                "login.html",
                request,
                None,
                status=403,
                next=target,
                error="This sign-in came from another site; open the dashboard and sign in there.",
            )
        session = await self._shell.sessions.sign_in(form_text(form, "token"))
        if session is None:
            return self._shell.render(
                "login.html",
                request,
                None,
                status=401,
                next=target,
                error="That token is not the API token or a named token of this server.",
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            session.cookie,
            max_age=SESSION_TTL_S,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def _sign_out(self, request: Request, session: Session) -> Response:
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response


def _next(value: str | None) -> str:
    """Where to go after signing in: a dashboard page of this server, nothing else."""
    if value and value.startswith(PREFIX) and not value.startswith("//"):
        return value
    return PREFIX


def _same_origin(request: Request) -> bool:
    """Whether a sign-in was posted by this server's own page (a browser says so in
    ``Sec-Fetch-Site``; with no referrer it sends ``Origin: null``); a script that is no
    browser sends neither and is let through, it holds the token anyway."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")
