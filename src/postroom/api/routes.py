"""The HTTP API (INTERFACES §4): thin handlers over the engine's functions.

Every error is ``{"error": "<one sentence>"}`` with 400 (malformed, validation), 401, 404, 409
or 413. Lists are wrapped (``{"messages": [...]}``); ``metadata`` is always an object.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from postroom.api.models import MAX_INT64, FolderIn, MessageIn, RouteIn, RouteRow, TaskIn
from postroom.api.openapi import refusals
from postroom.core.errors import InvalidInput
from postroom.core.messages import Attachment, InboundMessage, Verb
from postroom.engine.folders import FolderSpec, folder_to_dict
from postroom.engine.notices import new_message_id
from postroom.engine.services import Services
from postroom.engine.signals import Event
from postroom.engine.tasks import TaskService, task_to_dict
from postroom.engine.turns import job_to_dict
from postroom.engine.views import drop_to_dict, message_to_dict, run_to_dict

__all__ = ["ApiContext", "build_router", "inbound_from_body", "ingest_body"]

ACTOR = "api"
_VERBS = {v.value for v in Verb}
SSE_KEEPALIVE_S = 15.0
#: A row id in a path; beyond 64 bits it is refused before anything runs.
RowId = Annotated[int, Path(ge=0, le=MAX_INT64)]
#: A message sequence number in a query.
Seq = Query(None, ge=0, le=MAX_INT64)


@dataclass(frozen=True, slots=True)
class ApiContext:
    services: Services
    tasks: TaskService
    render_metrics: Callable[[], Awaitable[tuple[bytes, str]]]
    #: Providers and their accounts' cooldowns (no keys), for ``GET /providers``.
    provider_status: Callable[[], list[dict[str, Any]]] = list
    #: Each channel adapter's state, for ``GET /channels``.
    channel_status: Callable[[], list[dict[str, Any]]] = list


def inbound_from_body(body: MessageIn, *, clock: Callable[[], datetime]) -> InboundMessage:
    if body.verb not in _VERBS:
        raise InvalidInput(
            f"Unknown verb {body.verb!r}; the verbs are {', '.join(sorted(_VERBS))}."
        )
    timestamp = body.timestamp or clock()
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    return InboundMessage(
        id=body.id if body.id is not None else new_message_id(),
        chat_jid=body.chat_jid,
        sender=body.sender,
        content=body.content,
        timestamp=timestamp,
        sender_name=body.sender_name,
        reply_to=body.reply_to,
        topic=body.topic,
        verb=Verb(body.verb),
        mentioned=body.mentioned,
        attachments=tuple(Attachment(**a.model_dump()) for a in body.attachments),
    )


async def ingest_body(services: Services, body: MessageIn) -> dict[str, Any]:
    """``POST /api/v1/messages``: the answer to one inbound message."""
    result = await services.ingest.ingest(inbound_from_body(body, clock=services.clock))
    return result.to_dict()


def build_router(ctx: ApiContext) -> APIRouter:
    services = ctx.services
    api = APIRouter(prefix="/api/v1")

    # -- messages ------------------------------------------------------------------------------
    @api.post("/messages", summary="Inbound message from any adapter")
    async def post_message(body: MessageIn) -> dict[str, Any]:
        # Well-formed requests are answered by api.ingest_lane before they get here; this
        # route answers the rest (with FastAPI's validation) and documents the endpoint.
        return await ingest_body(services, body)

    @api.get("/messages", summary="Stored messages in seq order")
    async def get_messages(
        chat_jid: str | None = None,
        folder: str | None = None,
        after_seq: int | None = Seq,
        limit: int = Query(100, ge=1, le=1000),
    ) -> dict[str, Any]:
        found = await services.history.messages(
            chat_jid=chat_jid, folder=folder, after_seq=after_seq, limit=limit
        )
        return {"messages": [message_to_dict(m) for m in found]}

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
    async def list_routes() -> dict[str, Any]:
        return {"routes": [v.to_dict() for v in await services.routes.list_routes()]}

    @api.post("/routes", status_code=201)
    async def add_route(body: RouteIn) -> dict[str, Any]:
        route_id = await services.routes.add_route(body.seq, body.match, body.target, actor=ACTOR)
        return {"id": route_id}

    @api.put("/routes")
    async def set_routes(body: list[RouteRow]) -> dict[str, Any]:
        rows = [row.model_dump(exclude_none=True) for row in body]
        views = await services.routes.set_routes(rows, actor=ACTOR)
        return {"routes": [v.to_dict() for v in views]}

    @api.delete("/routes/{route_id}", status_code=204)
    async def delete_route(route_id: RowId) -> Response:
        await services.routes.delete_route(route_id, actor=ACTOR)
        return Response(status_code=204)

    @api.post("/routes/explain", summary="The decision for a hypothetical message")
    async def explain(body: MessageIn) -> dict[str, Any]:
        message = inbound_from_body(body, clock=services.clock)
        services.ingest.validate(message)
        decision = await services.router.explain(message)
        return decision.to_dict()

    # -- folders --------------------------------------------------------------------------------
    @api.get("/folders")
    async def list_folders() -> dict[str, Any]:
        return {"folders": [folder_to_dict(f) for f in await services.folders.list_folders()]}

    @api.post("/folders", status_code=201, responses=refusals(409))
    async def add_folder(body: FolderIn) -> dict[str, Any]:
        spec = FolderSpec.from_mapping(body.settings())
        folder = await services.folders.add_folder(body.path, spec, actor=ACTOR)
        return folder_to_dict(folder)

    @api.delete("/folders/{path:path}", status_code=204, responses=refusals(409))
    async def delete_folder(path: str) -> Response:
        await services.folders.remove_folder(path, actor=ACTOR)
        return Response(status_code=204)

    # -- tasks ----------------------------------------------------------------------------------
    @api.get("/tasks")
    async def list_tasks() -> dict[str, Any]:
        return {"tasks": [task_to_dict(t) for t in await ctx.tasks.list()]}

    @api.post("/tasks", status_code=201)
    async def add_task(body: TaskIn) -> dict[str, Any]:
        task = await ctx.tasks.add(
            folder=body.folder,
            chat_jid=body.chat_jid,
            schedule=body.schedule,
            prompt=body.prompt,
            tz=body.tz,
            actor=ACTOR,
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
        status: str | None = None, limit: int = Query(100, ge=1, le=1000)
    ) -> dict[str, Any]:
        jobs = await services.turns.list_jobs(status=status, limit=limit)
        return {"jobs": [job_to_dict(j) for j in jobs]}

    @api.post("/jobs/{job_id}/retry", responses=refusals(409))
    async def retry_job(job_id: RowId) -> dict[str, Any]:
        return job_to_dict(await services.turns.retry(job_id))

    @api.post("/jobs/{job_id}/cancel", responses=refusals(409))
    async def cancel_job(job_id: RowId) -> dict[str, Any]:
        return job_to_dict(await services.turns.cancel(job_id))

    @api.get("/runs/{run_id}")
    async def get_run(run_id: RowId) -> dict[str, Any]:
        return run_to_dict(await services.history.run(run_id))

    @api.get("/providers", summary="Configured providers and their accounts' cooldowns")
    async def list_providers() -> dict[str, Any]:
        return {"providers": ctx.provider_status()}

    @api.get("/channels", summary="Each channel adapter's state, last event and last error")
    async def list_channels() -> dict[str, Any]:
        return {"channels": ctx.channel_status()}

    @api.get("/drops")
    async def list_drops(limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        drops = await services.history.drops(limit=limit)
        return {"drops": [drop_to_dict(d) for d in drops]}

    return api


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
        iterator = subscription.__aiter__()
        while True:
            try:
                async with asyncio.timeout(SSE_KEEPALIVE_S):
                    event = await anext(iterator)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield b": keep-alive\n\n"
                continue
            except StopAsyncIteration:
                return
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
