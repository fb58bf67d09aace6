"""``/api/v1/access``: principals and pairing (ROUTING §8), and ``/api/v1/budgets``: each
budgeted folder's spend today. Thin shells over the engine's AccessService and BudgetService."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from postroom.api.middleware import PRINCIPAL
from postroom.api.models import MAX_INT64, PrincipalIn
from postroom.engine.access import pairing_to_dict, principal_to_dict
from postroom.engine.services import Services
from postroom.engine.tokens import OWNER, Principal

__all__ = ["build_access_router"]

SURFACE = "api"
RowId = Annotated[int, Path(ge=0, le=MAX_INT64)]
Code = Annotated[str, Path(max_length=32, description="The pairing code, e.g. ABCD-2345.")]


def _caller(request: Request) -> Principal:
    principal = request.scope.get(PRINCIPAL)
    return principal if isinstance(principal, Principal) else OWNER


Caller = Depends(_caller)


def build_access_router(services: Services) -> APIRouter:
    api = APIRouter(prefix="/api/v1")

    @api.get("/access", summary="Principals: stored ones, then [owners] senders (id null)")
    async def list_principals() -> dict[str, Any]:
        found = await services.access.list_principals()
        return {"principals": [principal_to_dict(p) for p in found]}

    @api.get("/access/pending", summary="Pairing codes waiting for a decision")
    async def list_pending() -> dict[str, Any]:
        found = await services.access.list_pairings()
        return {"pending": [pairing_to_dict(r) for r in found]}

    @api.post("/access", status_code=201, summary="Give a sender glob a role")
    async def add_principal(body: PrincipalIn, who: Principal = Caller) -> dict[str, Any]:
        principal = await services.access.add(
            body.pattern, role=body.role, note=body.note, actor=who.actor(SURFACE)
        )
        return principal_to_dict(principal)

    @api.post(
        "/access/pending/{code}/approve",
        summary="Approve a code: its sender becomes a member (that sender only)",
    )
    async def approve(code: Code, who: Principal = Caller) -> dict[str, Any]:
        done = await services.access.approve(code, actor=who.actor(SURFACE))
        return done.to_dict()

    @api.post("/access/pending/{code}/deny", summary="Deny a code")
    async def deny(code: Code, who: Principal = Caller) -> dict[str, Any]:
        request = await services.access.deny(code, actor=who.actor(SURFACE))
        return pairing_to_dict(request)

    @api.delete("/access/{principal_id}", status_code=204, summary="Remove a principal")
    async def remove(principal_id: RowId, who: Principal = Caller) -> Response:
        await services.access.remove(principal_id, actor=who.actor(SURFACE))
        return Response(status_code=204)

    @api.get("/budgets", summary="Each budgeted folder's cost today (UTC) against its budget")
    async def budgets() -> dict[str, Any]:
        found = await services.budgets.today(now=services.clock())
        return {"budgets": [b.to_dict() for b in found]}

    return api
