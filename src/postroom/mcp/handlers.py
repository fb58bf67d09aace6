"""What each MCP tool does: a thin call of the engine function the CLI and the HTTP API use
for the same thing, with the caller's token name as the audit actor (``mcp:<name>``) and its
folder as the confinement; each answers the object the HTTP API answers."""

from __future__ import annotations

from typing import Any

from postroom.core.messages import Attachment, InboundMessage
from postroom.engine.access import pairing_to_dict, principal_to_dict
from postroom.engine.budgets import with_budget_warning
from postroom.engine.engagement import disengage
from postroom.engine.folders import FolderSpec, folder_to_dict
from postroom.engine.inbound import build_inbound
from postroom.engine.services import Services
from postroom.engine.tokens import Principal
from postroom.engine.turns import job_to_dict
from postroom.engine.views import (
    drop_to_dict,
    message_to_dict,
    route_change_to_dict,
    run_to_dict,
)
from postroom.mcp.arguments import (
    AddRouteArgs,
    CreateFolderArgs,
    DeleteRouteArgs,
    DisengageArgs,
    DropsArgs,
    FolderArgs,
    JobIdArgs,
    LimitArgs,
    ListJobsArgs,
    MessageArgs,
    NoArgs,
    PairingCodeArgs,
    PreviewArgs,
    ReadMessagesArgs,
    RunIdArgs,
    SetRoutesArgs,
    UpdateFolderArgs,
)

__all__ = [
    "SURFACE",
    "add_route",
    "approve_pairing",
    "cancel_job",
    "create_folder",
    "delete_route",
    "deny_pairing",
    "disengage_chat",
    "explain_route",
    "get_folder",
    "get_run",
    "list_drops",
    "list_folders",
    "list_jobs",
    "list_principals",
    "list_routes",
    "preview_routes",
    "read_messages",
    "retry_job",
    "route_history",
    "send_message",
    "set_routes",
]

SURFACE = "mcp"


def _inbound(args: MessageArgs, services: Services) -> InboundMessage:
    return build_inbound(
        chat_jid=args.chat_jid,
        sender=args.sender,
        text=args.content,
        verb=args.verb,
        topic=args.topic,
        reply_to=args.reply_to,
        mentioned=args.mentioned,
        is_from_me=args.is_from_me,
        is_dm=args.is_dm,
        message_id=args.id,
        sender_name=args.sender_name,
        timestamp=args.timestamp,
        attachments=[Attachment(**a.model_dump()) for a in args.attachments],
        now=services.clock(),
    )


def _rows(args: SetRoutesArgs | PreviewArgs) -> list[dict[str, Any]]:
    return [row.model_dump() for row in args.rows]


# -- routes ---------------------------------------------------------------------------------------
async def list_routes(services: Services, who: Principal, _: NoArgs) -> dict[str, Any]:
    views = await services.routes.list_routes(within=who.folder)
    return {"routes": [v.to_dict() for v in views]}


async def add_route(services: Services, who: Principal, args: AddRouteArgs) -> dict[str, Any]:
    routes = services.routes
    if args.dry_run:
        preview = await routes.preview_add(
            args.seq, args.match, args.target, within=who.folder, limit=args.limit
        )
        return preview.to_dict()
    route_id = await routes.add_route(
        args.seq, args.match, args.target, actor=who.actor(SURFACE), within=who.folder
    )
    return {"id": route_id}


async def delete_route(services: Services, who: Principal, args: DeleteRouteArgs) -> dict[str, Any]:
    routes = services.routes
    if args.dry_run:
        preview = await routes.preview_delete(args.id, within=who.folder, limit=args.limit)
        return preview.to_dict()
    record = await routes.delete_route(args.id, actor=who.actor(SURFACE), within=who.folder)
    return {"id": record.id, "seq": record.seq, "match": record.match, "target": record.target}


async def set_routes(services: Services, who: Principal, args: SetRoutesArgs) -> dict[str, Any]:
    routes = services.routes
    if args.dry_run:
        preview = await routes.preview_routes(_rows(args), within=who.folder, limit=args.limit)
        return preview.to_dict()
    views = await routes.set_routes(_rows(args), actor=who.actor(SURFACE), within=who.folder)
    return {"routes": [v.to_dict() for v in views]}


async def preview_routes(services: Services, who: Principal, args: PreviewArgs) -> dict[str, Any]:
    preview = await services.routes.preview_routes(_rows(args), within=who.folder, limit=args.limit)
    return preview.to_dict()


async def explain_route(services: Services, _who: Principal, args: MessageArgs) -> dict[str, Any]:
    message = _inbound(args, services)
    services.ingest.validate(message)
    return (await services.router.explain(message)).to_dict()


async def route_history(services: Services, who: Principal, args: LimitArgs) -> dict[str, Any]:
    entries = await services.history.route_changes(limit=args.limit, within=who.folder)
    return {"history": [route_change_to_dict(e) for e in entries]}


# -- folders --------------------------------------------------------------------------------------
async def list_folders(services: Services, who: Principal, _: NoArgs) -> dict[str, Any]:
    found = await services.folders.list_folders(within=who.folder)
    return {"folders": [folder_to_dict(f) for f in found]}


async def get_folder(services: Services, who: Principal, args: FolderArgs) -> dict[str, Any]:
    return folder_to_dict(await services.folders.show(args.path, within=who.folder))


async def create_folder(
    services: Services, who: Principal, args: CreateFolderArgs
) -> dict[str, Any]:
    spec = FolderSpec(**args.settings())
    folder = await services.folders.add_folder(
        args.path, spec, actor=who.actor(SURFACE), within=who.folder
    )
    return await with_budget_warning(services.budgets, folder)


async def update_folder(
    services: Services, who: Principal, args: UpdateFolderArgs
) -> dict[str, Any]:
    folder = await services.folders.update(
        args.path, args.settings(), actor=who.actor(SURFACE), within=who.folder
    )
    return await with_budget_warning(services.budgets, folder)


# -- the queue, runs, messages --------------------------------------------------------------
async def list_jobs(services: Services, who: Principal, args: ListJobsArgs) -> dict[str, Any]:
    jobs = await services.turns.list_jobs(status=args.status, limit=args.limit, within=who.folder)
    return {"jobs": [job_to_dict(j) for j in jobs]}


async def retry_job(services: Services, _who: Principal, args: JobIdArgs) -> dict[str, Any]:
    return job_to_dict(await services.turns.retry(args.id))


async def cancel_job(services: Services, _who: Principal, args: JobIdArgs) -> dict[str, Any]:
    return job_to_dict(await services.turns.cancel(args.id))


async def get_run(services: Services, who: Principal, args: RunIdArgs) -> dict[str, Any]:
    return run_to_dict(await services.history.run(args.id, within=who.folder))


async def list_drops(services: Services, _who: Principal, args: DropsArgs) -> dict[str, Any]:
    return {"drops": [drop_to_dict(d) for d in await services.history.drops(limit=args.limit)]}


async def list_principals(services: Services, _who: Principal, _args: NoArgs) -> dict[str, Any]:
    principals = await services.access.list_principals()
    pending = await services.access.list_pairings()
    return {
        "principals": [principal_to_dict(p) for p in principals],
        "pending": [pairing_to_dict(r) for r in pending],
    }


async def approve_pairing(
    services: Services, who: Principal, args: PairingCodeArgs
) -> dict[str, Any]:
    done = await services.access.approve(args.code, actor=who.actor(SURFACE))
    return done.to_dict()


async def deny_pairing(services: Services, who: Principal, args: PairingCodeArgs) -> dict[str, Any]:
    request = await services.access.deny(args.code, actor=who.actor(SURFACE))
    return pairing_to_dict(request)


async def read_messages(
    services: Services, who: Principal, args: ReadMessagesArgs
) -> dict[str, Any]:
    found = await services.history.messages(
        chat_jid=args.chat_jid,
        folder=args.folder,
        after_seq=args.after_seq,
        limit=args.limit,
        within=who.folder,
    )
    return {"messages": [message_to_dict(m) for m in found]}


async def send_message(services: Services, _who: Principal, args: MessageArgs) -> dict[str, Any]:
    result = await services.ingest.ingest(_inbound(args, services))
    return result.to_dict()


async def disengage_chat(services: Services, who: Principal, args: DisengageArgs) -> dict[str, Any]:
    ended = await disengage(
        services.store,
        args.chat_jid,
        topic=args.topic,
        clock=services.clock,
        within=who.folder,
    )
    return ended.to_dict()
