"""What every dashboard page shares: the signed-in caller, CSRF checks on writes, rendering a
template with the navigation, and turning a refused write into one sentence beside its form."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from postroom.core.errors import Conflict, Forbidden, InvalidInput, NotFound, PostroomError
from postroom.engine.sessions import Session, SessionKeeper

__all__ = ["NAV", "PREFIX", "Handler", "Shell", "error_status", "form_text"]

PREFIX = "/dashboard"
#: The navigation, named after the pages (INTERFACES §6: the names are a contract).
NAV: tuple[tuple[str, str], ...] = (
    ("Overview", ""),
    ("Routes", "/routes"),
    ("Folders", "/folders"),
    ("Conversations", "/conversations"),
    ("Jobs", "/jobs"),
    ("Deliveries", "/deliveries"),
    ("Drops", "/drops"),
    ("Tasks", "/tasks"),
    ("Usage", "/usage"),
    ("Access", "/access"),
    ("Nodes", "/nodes"),
)
#: Pages may be framed by nobody, run only our scripts, and send no referrer anywhere.
_SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
        "script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

Handler = Callable[[Request, Session], Awaitable[Response]]


def error_status(exc: PostroomError) -> int:
    for kind, status in ((InvalidInput, 400), (Forbidden, 403), (NotFound, 404), (Conflict, 409)):
        if isinstance(exc, kind):
            return status
    return 400


def form_text(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _when(value: Any) -> str:
    """A time as the tables show it: ``2026-11-26 14:03:07`` (UTC), or an em dash."""
    if isinstance(value, str) and value:
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return "—"


def _money(value: Any) -> str:
    if value is None:
        return "unpriced"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


@dataclass(frozen=True, slots=True)
class Shell:
    sessions: SessionKeeper
    environment: Environment
    assistant_name: str

    @classmethod
    def build(cls, *, sessions: SessionKeeper, assistant_name: str) -> Shell:
        environment = Environment(
            loader=PackageLoader("postroom.dashboard", "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        environment.filters["when"] = _when
        environment.filters["money"] = _money
        environment.filters["q"] = lambda v: quote(str(v), safe="")
        return cls(sessions=sessions, environment=environment, assistant_name=assistant_name)

    def render(
        self,
        name: str,
        request: Request,
        session: Session | None,
        *,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        page = self.environment.get_template(name).render(
            prefix=PREFIX,
            nav=NAV,
            path=request.url.path,
            session=session,
            csrf=session.csrf if session else "",
            assistant=self.assistant_name,
            **context,
        )
        return HTMLResponse(page, status_code=status, headers=_SECURITY_HEADERS)

    def fragment(self, name: str, **context: Any) -> str:
        return self.environment.get_template(name).render(prefix=PREFIX, **context)

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """*handler* for a signed-in caller; a write must carry the session's CSRF token."""

        async def guarded(request: Request) -> Response:
            session = await self.sessions.session(request.cookies)
            if session is None:
                if request.method == "GET":
                    target = quote(request.url.path, safe="/")
                    return RedirectResponse(f"{PREFIX}/login?next={target}", status_code=303)
                return self.render(
                    "login.html",
                    request,
                    None,
                    status=401,
                    error="Your session has ended; sign in again.",
                    next=PREFIX,
                )
            if request.method == "POST":
                form = await request.form()
                presented = form.get("csrf") or request.headers.get("x-csrf-token")
                if not self.sessions.csrf_matches(
                    session, presented if isinstance(presented, str) else None
                ):
                    return HTMLResponse(
                        "This form is out of date (its CSRF token does not match your session); "
                        "reload the page and try again.",
                        status_code=403,
                        headers=_SECURITY_HEADERS,
                    )
            return await handler(request, session)

        return guarded

    def back(self, to: str) -> RedirectResponse:
        """After a write: back to the page (POST, redirect, GET), so a reload repeats nothing."""
        return RedirectResponse(PREFIX + to, status_code=303)
