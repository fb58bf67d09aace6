"""The HTTP API (INTERFACES §4): thin handlers over the engine's functions.

Every error is ``{"error": "<one sentence>"}`` with 400 (malformed, validation), 401, 403, 404,
409 or 413. Who may call what is in :mod:`postroom.api.scopes`; each handler audits its writes
under the caller's token name and confines them to the token's folder. Lists are wrapped
(``{"messages": [...]}``); ``metadata`` is always an object.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from postroom.api.middleware import PRINCIPAL
from postroom.api.models import (
    MAX_INT64,
    FolderIn,
    MessageIn,
    RouteIn,
    RouteRow,
    SkillIn,
    TaskIn,
    TokenIn,
)
from postroom.api.openapi import refusals
from postroom.api.uploads import Uploads
from postroom.core.attachments import IMAGE_MIMES, Blob
from postroom.core.errors import InvalidInput
from postroom.core.messages import Attachment, InboundMessage
from postroom.engine.budgets import with_budget_warning
from postroom.engine.folders import FolderSpec, folder_to_dict
from postroom.engine.inbound import build_inbound
from postroom.engine.preview import DEFAULT_PREVIEW, MAX_PREVIEW
from postroom.engine.services import Services
from postroom.engine.signals import Event
from postroom.engine.skills import skill_to_dict
from postroom.engine.tasks import TaskService, task_to_dict
from postroom.engine.tokens import OWNER, Principal, token_to_dict
from postroom.engine.turns import job_to_dict
from postroom.engine.views import (
    delivery_record_to_dict,
    drop_to_dict,
    message_to_dict,
    route_change_to_dict,
    run_summary_to_dict,
    run_to_dict,
)

__all__ = ["ApiContext", "build_router", "inbound_from_body", "ingest_body"]

SURFACE = "api"
SSE_KEEPALIVE_S = 15.0
#: A row id in a path; beyond 64 bits it is refused before anything runs.
RowId = Annotated[int, Path(ge=0, le=MAX_INT64)]
#: A message sequence number in a query.
Seq = Query(None, ge=0, le=MAX_INT64)


async def _nobody(request: Request) -> Principal | None:
    return None


@dataclass(frozen=True, slots=True)
class ApiContext:
    services: Services
    tasks: TaskService
    render_metrics: Callable[[], Awaitable[tuple[bytes, str]]]
    #: Providers and their accounts' cooldowns (no keys), for ``GET /providers``.
    provider_status: Callable[[], list[dict[str, Any]]] = list
    #: Each channel adapter's state, for ``GET /channels``.
    channel_status: Callable[[], list[dict[str, Any]]] = list
    #: The nodes sharing the database (PIPELINE §9), for ``GET /nodes``.
    node_status: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    #: How ``POST /messages`` checks and fetches attachments.
    uploads: Uploads = field(default_factory=Uploads)
    #: The web chat visitor a request without a token comes from (``GET /blobs``): their
    #: chat's JID for the page's *channel*, or ``None`` without a valid session.
    visitor_chat: Callable[[Request, str], str | None] = lambda request, channel: None
    #: The operator signed in on the dashboard a request without a token comes from
    #: (``GET /blobs`` for the operator view of the web chat), or ``None``.
    operator_session: Callable[[Request], Awaitable[Principal | None]] = _nobody


def inbound_from_body(body: MessageIn, *, clock: Callable[[], datetime]) -> InboundMessage:
    return build_inbound(
        chat_jid=body.chat_jid,
        sender=body.sender,
        text=body.content,
        verb=body.verb,
        topic=body.topic,
        reply_to=body.reply_to,
        mentioned=body.mentioned,
        is_from_me=body.is_from_me,
        is_dm=body.is_dm,
        message_id=body.id,
        sender_name=body.sender_name,
        timestamp=body.timestamp,
        attachments=[Attachment(**a.model_dump()) for a in body.attachments],
        now=None if body.timestamp else clock(),
    )


async def ingest_body(ctx: ApiContext, body: MessageIn) -> dict[str, Any]:
    """``POST /api/v1/messages``: the answer to one inbound message."""
    services = ctx.services
    message = inbound_from_body(body, clock=services.clock)
    if message.attachments:
        message = replace(
            message, attachments=tuple(await ctx.uploads.resolve(message.attachments))
        )
    result = await services.ingest.ingest(message)
    return result.to_dict()


def blob_response(blob: Blob) -> Response:
    """An attachment's bytes. Only images are served as their type; anything else is a
    download of opaque bytes, so a file someone sent can never run as a page of this origin."""
    image = blob.mime in IMAGE_MIMES
    return Response(
        blob.data,
        media_type=blob.mime if image else "application/octet-stream",
        headers={
            "Cache-Control": "private, max-age=86400, immutable",
            "Content-Disposition": "inline" if image else "attachment",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "X-Content-Type-Options": "nosniff",
        },
    )


def caller(request: Request) -> Principal:
    """The token that made the request (set by :class:`~postroom.api.middleware.BearerAuth`)."""
    principal = request.scope.get(PRINCIPAL)
    return principal if isinstance(principal, Principal) else OWNER


Caller = Depends(caller)
DryRun = Query(
    False, description="Answer what the write would do to recent traffic; write nothing."
)
PreviewLimit = Query(DEFAULT_PREVIEW, ge=1, le=MAX_PREVIEW, description="Messages to examine.")


def build_router(ctx: ApiContext) -> APIRouter:
    services = ctx.services
    api = APIRouter(prefix="/api/v1")

    # -- messages (POST /messages is api.ingest_lane's) --------------------------------------
    @api.get("/messages", summary="Stored messages in seq order")
    async def get_messages(
        chat_jid: str | None = None,
        folder: str | None = None,
        after_seq: int | None = Seq,
        limit: int = Query(100, ge=1, le=1000),
        who: Principal = Caller,
    ) -> dict[str, Any]:
        found = await services.history.messages(
            chat_jid=chat_jid, folder=folder, after_seq=after_seq, limit=limit, within=who.folder
        )
        return {"messages": [message_to_dict(m) for m in found]}

    @api.get(
        "/messages/{chat_jid:path}/{message_id}/journey",
        summary="One inbound message's whole path: decision, jobs, runs, answers, deliveries",
    )
    async def journey(chat_jid: str, message_id: str, who: Principal = Caller) -> dict[str, Any]:
        return await services.journeys.journey(chat_jid, message_id, within=who.folder)

    @api.get("/events", summary="Server-Sent Events: stored messages and deliveries, live")
    async def events(request: Request, after_seq: int | None = Seq) -> StreamingResponse:
        last_id = request.headers.get("last-event-id", "")
        if after_seq is None and last_id.isdigit():
            after_seq = int(last_id)
            if after_seq > MAX_INT64:  # refused before the stream starts, not inside it
                raise InvalidInput("Last-Event-ID is not a message sequence number.")
        return StreamingResponse(
            _event_stream(services, request, after_seq),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- routes ----------------------------------------------------------------------------------
    @api.get("/routes")
    async def list_routes(who: Principal = Caller) -> dict[str, Any]:
        views = await services.routes.list_routes(within=who.folder)
        return {"routes": [v.to_dict() for v in views]}

    @api.post("/routes", status_code=201, summary="Add a route (or preview it with dry_run)")
    async def add_route(
        body: RouteIn,
        dry_run: bool = DryRun,
        limit: int = PreviewLimit,
        who: Principal = Caller,
    ) -> Any:
        if dry_run:
            preview = await services.routes.preview_add(
                body.seq, body.match, body.target, within=who.folder, limit=limit
            )
            return JSONResponse(preview.to_dict())
        route_id = await services.routes.add_route(
            body.seq, body.match, body.target, actor=who.actor(SURFACE), within=who.folder
        )
        return {"id": route_id}

    @api.put("/routes", summary="Replace the route table (or preview it with dry_run)")
    async def set_routes(
        body: list[RouteRow],
        dry_run: bool = DryRun,
        limit: int = PreviewLimit,
        who: Principal = Caller,
    ) -> dict[str, Any]:
        rows = _rows(body)
        if dry_run:
            preview = await services.routes.preview_routes(rows, within=who.folder, limit=limit)
            return preview.to_dict()
        views = await services.routes.set_routes(rows, actor=who.actor(SURFACE), within=who.folder)
        return {"routes": [v.to_dict() for v in views]}

    @api.delete("/routes/{route_id}", status_code=204, summary="Remove a route")
    async def delete_route(
        route_id: RowId,
        dry_run: bool = DryRun,
        limit: int = PreviewLimit,
        who: Principal = Caller,
    ) -> Response:
        if dry_run:
            preview = await services.routes.preview_delete(route_id, within=who.folder, limit=limit)
            return JSONResponse(preview.to_dict())
        await services.routes.delete_route(route_id, actor=who.actor(SURFACE), within=who.folder)
        return Response(status_code=204)

    @api.post("/routes/explain", summary="The decision for a hypothetical message")
    async def explain(body: MessageIn) -> dict[str, Any]:
        message = inbound_from_body(body, clock=services.clock)
        services.ingest.validate(message)
        decision = await services.router.explain(message)
        return decision.to_dict()

    @api.post("/routes/preview", summary="What a proposed table would do to recent traffic")
    async def preview(
        body: list[RouteRow],
        limit: int = PreviewLimit,
        who: Principal = Caller,
    ) -> dict[str, Any]:
        found = await services.routes.preview_routes(_rows(body), within=who.folder, limit=limit)
        return found.to_dict()

    @api.get("/routes/history", summary="Who changed the route table, when and how")
    async def route_history(
        limit: int = Query(20, ge=1, le=10_000), who: Principal = Caller
    ) -> dict[str, Any]:
        entries = await services.history.route_changes(limit=limit, within=who.folder)
        return {"history": [route_change_to_dict(e) for e in entries]}

    # -- folders --------------------------------------------------------------------------------
    @api.get("/folders")
    async def list_folders(who: Principal = Caller) -> dict[str, Any]:
        found = await services.folders.list_folders(within=who.folder)
        return {"folders": [folder_to_dict(f) for f in found]}

    @api.post("/folders", status_code=201, responses=refusals(409))
    async def add_folder(body: FolderIn, who: Principal = Caller) -> dict[str, Any]:
        spec = FolderSpec(**body.settings())
        folder = await services.folders.add_folder(
            body.path, spec, actor=who.actor(SURFACE), within=who.folder
        )
        return await with_budget_warning(services.budgets, folder)

    # -- skills (before the folder routes: {path:path} would take ".../skills") ---------------
    @api.get("/folders/{path:path}/skills", summary="The skills a folder sees (own, inherited)")
    async def list_skills(path: str, who: Principal = Caller) -> dict[str, Any]:
        found = await services.skills.visible(path, within=who.folder)
        return {"skills": [skill_to_dict(skill, origin) for skill, origin in found]}

    @api.post("/folders/{path:path}/skills", status_code=201, responses=refusals(409))
    async def add_skill(path: str, body: SkillIn, who: Principal = Caller) -> dict[str, Any]:
        skill = await services.skills.add(
            path, body.model_dump(), actor=who.actor(SURFACE), within=who.folder
        )
        return skill_to_dict(skill)

    @api.get("/folders/{path:path}/skills/{name}", summary="One skill a folder sees")
    async def get_skill(path: str, name: str, who: Principal = Caller) -> dict[str, Any]:
        skill, origin = await services.skills.show(path, name, within=who.folder)
        return skill_to_dict(skill, origin)

    @api.patch("/folders/{path:path}/skills/{name}", summary="Change a skill's fields")
    async def update_skill(
        path: str,
        name: str,
        body: dict[str, Any] = Body(  # noqa: B008
            ..., examples=[{"keywords": ["invoice", "billing"]}]
        ),
        who: Principal = Caller,
    ) -> dict[str, Any]:
        skill = await services.skills.update(
            path, name, body, actor=who.actor(SURFACE), within=who.folder
        )
        return skill_to_dict(skill)

    @api.delete("/folders/{path:path}/skills/{name}", status_code=204)
    async def delete_skill(path: str, name: str, who: Principal = Caller) -> Response:
        await services.skills.remove(path, name, actor=who.actor(SURFACE), within=who.folder)
        return Response(status_code=204)

    @api.get("/folders/{path:path}", summary="One folder: its persona and every setting")
    async def get_folder(path: str, who: Principal = Caller) -> dict[str, Any]:
        return folder_to_dict(await services.folders.show(path, within=who.folder))

    @api.patch("/folders/{path:path}", summary="Change any subset of a folder's settings")
    async def update_folder(
        path: str,
        body: dict[str, Any] = Body(  # noqa: B008
            ..., examples=[{"persona": "You are Atlas.", "model": None}]
        ),
        who: Principal = Caller,
    ) -> dict[str, Any]:
        folder = await services.folders.update(
            path, body, actor=who.actor(SURFACE), within=who.folder
        )
        return await with_budget_warning(services.budgets, folder)

    @api.delete("/folders/{path:path}", status_code=204, responses=refusals(409))
    async def delete_folder(path: str, who: Principal = Caller) -> Response:
        await services.folders.remove_folder(path, actor=who.actor(SURFACE), within=who.folder)
        return Response(status_code=204)

    # -- tokens ---------------------------------------------------------------------------------
    @api.get("/tokens", summary="Named tokens (never their secrets)")
    async def list_tokens() -> dict[str, Any]:
        return {"tokens": [token_to_dict(t) for t in await services.tokens.list()]}

    @api.post(
        "/tokens",
        status_code=201,
        summary="Make a token; its secret is in this answer only",
        responses=refusals(409),
    )
    async def add_token(body: TokenIn, who: Principal = Caller) -> dict[str, Any]:
        made = await services.tokens.add(
            body.name, scope=body.scope, folder=body.folder, actor=who.actor(SURFACE)
        )
        return made.to_dict()

    @api.delete("/tokens/{name}", status_code=204)
    async def delete_token(name: str, who: Principal = Caller) -> Response:
        await services.tokens.remove(name, actor=who.actor(SURFACE))
        return Response(status_code=204)

    # -- tasks ----------------------------------------------------------------------------------
    @api.get("/tasks")
    async def list_tasks() -> dict[str, Any]:
        return {"tasks": [task_to_dict(t) for t in await ctx.tasks.list()]}

    @api.post("/tasks", status_code=201)
    async def add_task(body: TaskIn, who: Principal = Caller) -> dict[str, Any]:
        task = await ctx.tasks.add(
            folder=body.folder,
            chat_jid=body.chat_jid,
            schedule=body.schedule,
            prompt=body.prompt,
            tz=body.tz,
            actor=who.actor(SURFACE),
        )
        return task_to_dict(task)

    @api.post("/tasks/{task_id}/pause")
    async def pause_task(task_id: RowId) -> dict[str, Any]:
        return task_to_dict(await ctx.tasks.pause(task_id))

    @api.post("/tasks/{task_id}/resume")
    async def resume_task(task_id: RowId) -> dict[str, Any]:
        return task_to_dict(await ctx.tasks.resume(task_id))

    @api.delete("/tasks/{task_id}", status_code=204)
    async def delete_task(task_id: RowId) -> Response:
        await ctx.tasks.remove(task_id)
        return Response(status_code=204)

    # -- jobs, runs, drops ----------------------------------------------------------------------
    @api.get("/jobs")
    async def list_jobs(
        status: str | None = None,
        limit: int = Query(100, ge=1, le=1000),
        who: Principal = Caller,
    ) -> dict[str, Any]:
        jobs = await services.turns.list_jobs(status=status, limit=limit, within=who.folder)
        runs = await services.history.run_ids([j.id for j in jobs])
        return {"jobs": [job_to_dict(j, run_ids=runs.get(j.id, [])) for j in jobs]}

    @api.post("/jobs/{job_id}/retry", responses=refusals(409))
    async def retry_job(job_id: RowId) -> dict[str, Any]:
        return job_to_dict(await services.turns.retry(job_id))

    @api.post("/jobs/{job_id}/cancel", responses=refusals(409))
    async def cancel_job(job_id: RowId) -> dict[str, Any]:
        return job_to_dict(await services.turns.cancel(job_id))

    @api.get("/runs", summary="Run summaries, newest first")
    async def list_runs(
        folder: str | None = None, limit: int = Query(50, ge=1, le=1000)
    ) -> dict[str, Any]:
        found = await services.history.runs(folder=folder, limit=limit)
        return {"runs": [run_summary_to_dict(r) for r in found]}

    @api.get("/runs/{run_id}")
    async def get_run(run_id: RowId, who: Principal = Caller) -> dict[str, Any]:
        return run_to_dict(await services.history.run(run_id, within=who.folder))

    @api.get("/deliveries", summary="Outbox rows, newest first (failed: pending after a refusal)")
    async def list_deliveries(
        status: str | None = Query(
            None, description="pending, failed, sent or abandoned; every row when left out."
        ),
        limit: int = Query(100, ge=1, le=1000),
    ) -> dict[str, Any]:
        found = await services.deliveries.list(status=status, limit=limit)
        return {"deliveries": [delivery_record_to_dict(d) for d in found]}

    @api.post(
        "/deliveries/{delivery_id}/retry",
        summary="Send a failed or abandoned delivery again now",
        responses=refusals(409),
    )
    async def retry_delivery(delivery_id: RowId, who: Principal = Caller) -> dict[str, Any]:
        retried = await services.deliveries.retry(delivery_id, actor=who.actor(SURFACE))
        return delivery_record_to_dict(retried)

    @api.get("/providers", summary="Configured providers and their accounts' cooldowns")
    async def list_providers() -> dict[str, Any]:
        return {"providers": ctx.provider_status()}

    @api.get("/channels", summary="Each channel adapter's state, last event and last error")
    async def list_channels() -> dict[str, Any]:
        return {"channels": ctx.channel_status()}

    @api.get("/nodes", summary="The nodes sharing the database; on SQLite, the one server")
    async def list_nodes() -> dict[str, Any]:
        return {"nodes": await ctx.node_status() if ctx.node_status is not None else []}

    @api.get(
        "/blobs/{sha256}",
        summary=(
            "An attachment's bytes (a token, the operator's dashboard session, or the web chat "
            "session of a chat holding it)"
        ),
        response_class=Response,
        responses=refusals(404),
    )
    async def get_blob(
        sha256: str, request: Request, channel: str = Query("main", max_length=64)
    ) -> Response:
        chat_jid: str | None = None
        if request.scope.get(PRINCIPAL) is None and await ctx.operator_session(request) is None:
            # No token and no operator: BearerAuth let the request through for a visitor's
            # session, which sees its own chat's files only.
            chat_jid = ctx.visitor_chat(request, channel)
            if chat_jid is None:
                raise HTTPException(401, "Missing or wrong bearer token.")
        blob = await services.history.blob(sha256, chat_jid=chat_jid)
        return blob_response(blob)

    @api.get("/drops")
    async def list_drops(limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        drops = await services.history.drops(limit=limit)
        return {"drops": [drop_to_dict(d) for d in drops]}

    return api


def _rows(body: list[RouteRow]) -> list[dict[str, Any]]:
    """A whole table as the route service takes it (``id`` only where the client gave one)."""
    return [row.model_dump(exclude_none=True) for row in body]


async def _event_stream(
    services: Services, request: Request, after_seq: int | None
) -> AsyncIterator[bytes]:
    subscription = services.signals.bus.subscribe(kinds=frozenset({"message", "delivery"}))
    try:
        last_seq = after_seq
        if after_seq is not None:
            # Replay what the client missed, then go live (skipping what the replay covered).
            backlog = await services.history.since(None, after_seq, limit=1000)
            for message in backlog:
                yield _frame(Event("message", message_to_dict(message)))
                last_seq = message.seq
        yield b": connected\n\n"
        async for event in subscription.with_keepalives(SSE_KEEPALIVE_S, request.is_disconnected):
            if event is None:
                yield b": keep-alive\n\n"
                continue
            if (
                event.kind == "message"
                and last_seq is not None
                and int(event.data["seq"]) <= last_seq
            ):
                continue
            yield _frame(event)
    finally:
        subscription.close()


def _frame(event: Event) -> bytes:
    data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event.kind}\n"
    if event.kind == "message":
        head += f"id: {event.data['seq']}\n"
    return f"{head}data: {data}\n\n".encode()
