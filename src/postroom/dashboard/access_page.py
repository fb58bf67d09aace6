"""The access page (ROUTING §8): principals with Remove and a form to add one, and the pending
pairing codes with ``Approve`` and ``Deny``. Every write goes through the AccessService the
CLI and the API use, audited as ``dashboard:<token name>``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from postroom.core.access import Role
from postroom.core.errors import NotFound, PostroomError
from postroom.dashboard.shell import Shell, error_status, form_text
from postroom.engine.access import pairing_to_dict, principal_to_dict
from postroom.engine.services import Services
from postroom.engine.sessions import Session
from postroom.engine.tokens import Scope

__all__ = ["routes"]

SURFACE = "dashboard"
#: What the page says after each write (the redirect names the write).
DONE = {
    "add": "Principal saved.",
    "remove": "Principal removed: its senders follow the policies again.",
    "approve": "Approved: the sender is a member now, and its chat was told.",
    "deny": "Request denied.",
}
ROLES = tuple(role.value for role in (Role.MEMBER, Role.OWNER, Role.BLOCKED))


def routes(shell: Shell, context: Any) -> list[BaseRoute]:
    page = AccessPage(shell, context.services)
    return [
        Route("/dashboard/access", shell.page(page.show), methods=["GET"]),
        Route("/dashboard/access", shell.page(page.add), methods=["POST"]),
        Route("/dashboard/access/{item_id:int}/remove", shell.page(page.remove), methods=["POST"]),
        Route(
            "/dashboard/access/pending/{code}/{verb:str}", shell.page(page.decide), methods=["POST"]
        ),
    ]


def age(since: datetime, now: datetime) -> str:
    """How long ago *since* was, as a person reads it: ``45 s``, ``12 min``, ``3 h``."""
    seconds = max(int((now - since).total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


class AccessPage:
    def __init__(self, shell: Shell, services: Services) -> None:
        self._shell = shell
        self._services = services

    async def _page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        try:
            session.principal.require_whole_table("the access page")
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        access = self._services.access
        now = self._services.clock()
        pending = [
            pairing_to_dict(r) | {"age": age(r.created_at, now)}
            for r in await access.list_pairings()
        ]
        return self._shell.render(
            "access.html",
            request,
            session,
            status=status,
            principals=[principal_to_dict(p) for p in await access.list_principals()],
            pending=pending,
            policy=access.policy,
            roles=ROLES,
            done=DONE.get(request.query_params.get("done", "")),
            **extra,
        )

    async def show(self, request: Request, session: Session) -> Response:
        return await self._page(request, session)

    async def add(self, request: Request, session: Session) -> Response:
        form = await request.form()
        given = {k: form_text(form, k) for k in ("pattern", "role", "note")}
        try:
            _may_write(session, "adding principals")
            await self._services.access.add(
                given["pattern"],
                role=given["role"] or Role.MEMBER,
                note=given["note"],
                actor=session.principal.actor(SURFACE),
            )
        except PostroomError as exc:
            return await self._page(
                request, session, status=error_status(exc), form_error=str(exc), given=given
            )
        return self._shell.back("/access?done=add")

    async def remove(self, request: Request, session: Session) -> Response:
        principal_id = request.path_params["item_id"]
        return await self._act(
            request,
            session,
            lambda: self._services.access.remove(
                principal_id, actor=session.principal.actor(SURFACE)
            ),
            what="removing principals",
            failed=f"Principal {principal_id}",
            done="remove",
        )

    async def decide(self, request: Request, session: Session) -> Response:
        code, verb = request.path_params["code"], request.path_params["verb"]
        access, actor = self._services.access, session.principal.actor(SURFACE)
        actions: dict[str, Callable[[], Awaitable[Any]]] = {
            "approve": lambda: access.approve(code, actor=actor),
            "deny": lambda: access.deny(code, actor=actor),
        }
        return await self._act(
            request,
            session,
            actions.get(verb, lambda: _unknown(verb)),
            what="approving or denying pairing codes",
            failed=f"Code {code}",
            done=verb,
        )

    async def _act(
        self,
        request: Request,
        session: Session,
        action: Callable[[], Awaitable[Any]],
        *,
        what: str,
        failed: str,
        done: str,
    ) -> Response:
        """Run a row's button; a refusal is shown above the tables in one sentence."""
        try:
            _may_write(session, what)
            await action()
        except PostroomError as exc:
            return await self._page(
                request,
                session,
                status=error_status(exc),
                action_error=f"{failed}: {exc}",
            )
        return self._shell.back(f"/access?done={done}")


def _may_write(session: Session, what: str) -> None:
    session.principal.require(Scope.ADMIN, what)
    session.principal.require_whole_table(what)


async def _unknown(verb: str) -> None:
    raise NotFound(f"There is no action {verb!r} here.")
