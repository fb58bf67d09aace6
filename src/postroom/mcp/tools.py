"""The MCP tools (INTERFACES §5): one table of name, description, arguments, scope, handler.

Each handler is a thin call of the same engine function the CLI and the HTTP API use, with
the caller's token name as the audit actor (``mcp:<name>``) and its folder as the confinement;
each answer is the object the HTTP API returns for the same thing. A tool the caller's scope
does not cover, or that cannot be confined to the caller's folder, is refused before it runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from postroom.core.messages import Attachment, InboundMessage
from postroom.engine.engagement import disengage
from postroom.engine.folders import FolderSpec, folder_to_dict
from postroom.engine.inbound import build_inbound
from postroom.engine.services import Services
from postroom.engine.tokens import Principal, Scope
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
    FolderArgs,
    IdArgs,
    LimitArgs,
    ListJobsArgs,
    MessageArgs,
    NoArgs,
    PreviewArgs,
    ReadMessagesArgs,
    SetRoutesArgs,
)

__all__ = ["SURFACE", "TOOLS", "Tool"]

SURFACE = "mcp"

A = TypeVar("A", bound=BaseModel)
Handler = Callable[[Services, Principal, A], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Tool(Generic[A]):
    name: str
    description: str
    arguments: type[A]
    #: The least scope that may call it.
    scope: Scope
    #: It honours a confined token's folder; otherwise such a token may not call it.
    confined: bool
    handler: Handler[A]
    read_only: bool = False
    destructive: bool = False


def _inbound(args: MessageArgs, services: Services) -> InboundMessage:
    return build_inbound(
        chat_jid=args.chat_jid,
        sender=args.sender,
        text=args.content,
        verb=args.verb,
        topic=args.topic,
        reply_to=args.reply_to,
        mentioned=args.mentioned,
        message_id=args.id,
        sender_name=args.sender_name,
        timestamp=args.timestamp,
        attachments=[Attachment(**a.model_dump()) for a in args.attachments],
        now=services.clock(),
    )


def _rows(args: SetRoutesArgs | PreviewArgs) -> list[dict[str, Any]]:
    return [row.model_dump() for row in args.rows]


# -- routes ---------------------------------------------------------------------------------------
async def _list_routes(services: Services, who: Principal, _: NoArgs) -> dict[str, Any]:
    views = await services.routes.list_routes(within=who.folder)
    return {"routes": [v.to_dict() for v in views]}


async def _add_route(services: Services, who: Principal, args: AddRouteArgs) -> dict[str, Any]:
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


async def _delete_route(
    services: Services, who: Principal, args: DeleteRouteArgs
) -> dict[str, Any]:
    routes = services.routes
    if args.dry_run:
        preview = await routes.preview_delete(args.id, within=who.folder, limit=args.limit)
        return preview.to_dict()
    record = await routes.delete_route(args.id, actor=who.actor(SURFACE), within=who.folder)
    return {"id": record.id, "seq": record.seq, "match": record.match, "target": record.target}


async def _set_routes(services: Services, who: Principal, args: SetRoutesArgs) -> dict[str, Any]:
    routes = services.routes
    if args.dry_run:
        preview = await routes.preview_routes(_rows(args), within=who.folder, limit=args.limit)
        return preview.to_dict()
    views = await routes.set_routes(_rows(args), actor=who.actor(SURFACE), within=who.folder)
    return {"routes": [v.to_dict() for v in views]}


async def _preview_routes(services: Services, who: Principal, args: PreviewArgs) -> dict[str, Any]:
    preview = await services.routes.preview_routes(_rows(args), within=who.folder, limit=args.limit)
    return preview.to_dict()


async def _explain_route(services: Services, _who: Principal, args: MessageArgs) -> dict[str, Any]:
    message = _inbound(args, services)
    services.ingest.validate(message)
    return (await services.router.explain(message)).to_dict()


async def _route_history(services: Services, who: Principal, args: LimitArgs) -> dict[str, Any]:
    entries = await services.history.route_changes(limit=args.limit, within=who.folder)
    return {"history": [route_change_to_dict(e) for e in entries]}


# -- folders --------------------------------------------------------------------------------------
async def _list_folders(services: Services, who: Principal, _: NoArgs) -> dict[str, Any]:
    found = await services.folders.list_folders(within=who.folder)
    return {"folders": [folder_to_dict(f) for f in found]}


async def _get_folder(services: Services, who: Principal, args: FolderArgs) -> dict[str, Any]:
    return folder_to_dict(await services.folders.get_folder(args.path, within=who.folder))


async def _create_folder(
    services: Services, who: Principal, args: CreateFolderArgs
) -> dict[str, Any]:
    spec = FolderSpec.from_mapping(args.settings())
    folder = await services.folders.add_folder(
        args.path, spec, actor=who.actor(SURFACE), within=who.folder
    )
    return folder_to_dict(folder)


# -- the queue, runs, messages --------------------------------------------------------------
async def _list_jobs(services: Services, who: Principal, args: ListJobsArgs) -> dict[str, Any]:
    jobs = await services.turns.list_jobs(status=args.status, limit=args.limit, within=who.folder)
    return {"jobs": [job_to_dict(j) for j in jobs]}


async def _retry_job(services: Services, _who: Principal, args: IdArgs) -> dict[str, Any]:
    return job_to_dict(await services.turns.retry(args.id))


async def _cancel_job(services: Services, _who: Principal, args: IdArgs) -> dict[str, Any]:
    return job_to_dict(await services.turns.cancel(args.id))


async def _get_run(services: Services, who: Principal, args: IdArgs) -> dict[str, Any]:
    return run_to_dict(await services.history.run(args.id, within=who.folder))


async def _list_drops(services: Services, _who: Principal, args: LimitArgs) -> dict[str, Any]:
    return {"drops": [drop_to_dict(d) for d in await services.history.drops(limit=args.limit)]}


async def _read_messages(
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


async def _send_message(services: Services, _who: Principal, args: MessageArgs) -> dict[str, Any]:
    result = await services.ingest.ingest(_inbound(args, services))
    return result.to_dict()


async def _disengage(services: Services, who: Principal, args: DisengageArgs) -> dict[str, Any]:
    ended = await disengage(
        services.store,
        args.chat_jid,
        topic=args.topic,
        clock=services.clock,
        within=who.folder,
    )
    return ended.to_dict()


READ, ROUTES, ADMIN = Scope.READ, Scope.ROUTES, Scope.ADMIN

TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "list_routes",
        "The route table in evaluation order. A message goes to the target of the first row "
        "(lowest seq, then lowest id) whose match holds. Each row has id, seq, match, target, "
        "mode (fire, observe or topic), fires_on (which messages start a turn) and shadowed_by "
        "(the id of an earlier row that catches every message this one could, so this row "
        "never decides anything; null otherwise).",
        NoArgs,
        READ,
        True,
        _list_routes,
        read_only=True,
    ),
    Tool(
        "add_route",
        "Add one row to the route table; it takes effect on the next message. Answers {id}. "
        "With dry_run true nothing is written and the answer is a preview of which recent "
        "real messages would be routed differently (use it before writing when unsure). "
        "A row whose seq is higher than a catch-all row (match '') is never reached.",
        AddRouteArgs,
        ROUTES,
        True,
        _add_route,
    ),
    Tool(
        "delete_route",
        "Remove one row of the route table by id (see list_routes); the messages it caught "
        "fall through to later rows, or are dropped when none matches. Answers the removed "
        "row. With dry_run true nothing is removed and the answer is a preview.",
        DeleteRouteArgs,
        ROUTES,
        True,
        _delete_route,
        destructive=True,
    ),
    Tool(
        "set_routes",
        "Replace the route table with rows, all at once: rows left out are removed, and every "
        "row gets a new id. A token confined to a folder replaces only the rows targeting that "
        "folder's tree; the other rows stay. Answers the new table. For small edits prefer "
        "add_route and delete_route; run it with dry_run true first.",
        SetRoutesArgs,
        ROUTES,
        True,
        _set_routes,
        destructive=True,
    ),
    Tool(
        "preview_routes",
        "What a proposed route table would do to real traffic, changing nothing: the last "
        "`limit` stored inbound messages and dropped messages are routed against the current "
        "table and against rows (with every chat's state as it is now). Answers {examined, "
        "changed, messages}: each message whose action, folder or topic would differ, with "
        "its first 200 characters (null for a dropped message) and both decisions. rows has "
        "the form set_routes takes.",
        PreviewArgs,
        READ,
        True,
        _preview_routes,
        read_only=True,
    ),
    Tool(
        "explain_route",
        "Where a hypothetical message would go right now, and why: the routing decision "
        "{action (fire, observe, command, ignore), layer, folder, topic, content, route_id, "
        "reason} from the current table and the chat's current state. Changes nothing.",
        MessageArgs,
        READ,
        True,
        _explain_route,
        read_only=True,
    ),
    Tool(
        "route_history",
        "Who changed the route table, when and how, newest first: each write with its time, "
        "actor (cli:<user>, api:<token>, mcp:<token>, agent:<folder>), action (add, delete, "
        "set) and the rows before and after.",
        LimitArgs,
        READ,
        True,
        _route_history,
        read_only=True,
    ),
    Tool(
        "list_folders",
        "Every folder: a folder is an agent, named by a path such as atlas/content, with its "
        "persona and settings (a null setting is inherited from the parent or the defaults).",
        NoArgs,
        READ,
        True,
        _list_folders,
        read_only=True,
    ),
    Tool(
        "get_folder",
        "One folder's persona and settings.",
        FolderArgs,
        READ,
        True,
        _get_folder,
        read_only=True,
    ),
    Tool(
        "create_folder",
        "Create a folder (an agent), and any missing parent folders. Routes can target it "
        "once it exists. Answers the new folder.",
        CreateFolderArgs,
        ROUTES,
        True,
        _create_folder,
    ),
    Tool(
        "list_jobs",
        "The turn queue, newest first. A job is one turn: a folder answering messages of one "
        "chat (message_ids); status queued, running, done, failed or cancelled, with attempts "
        "and the last error.",
        ListJobsArgs,
        READ,
        True,
        _list_jobs,
        read_only=True,
    ),
    Tool(
        "retry_job",
        "Queue a failed or cancelled job again. Answers the job.",
        IdArgs,
        ADMIN,
        False,
        _retry_job,
    ),
    Tool(
        "cancel_job",
        "Cancel a queued or running job; the messages it was answering stay unanswered. "
        "Answers the job.",
        IdArgs,
        ADMIN,
        False,
        _cancel_job,
        destructive=True,
    ),
    Tool(
        "list_drops",
        "Messages nobody handled, oldest first, with the reason (no_route: no row matched; "
        "folder_missing: the target folder does not exist). Their text is not stored.",
        LimitArgs,
        READ,
        False,
        _list_drops,
        read_only=True,
    ),
    Tool(
        "read_messages",
        "Stored messages in order (by seq), of a chat, of a folder, or both: user messages, "
        "agent answers (assistant), host notices, system and tool rows, each with its "
        "message_type, who sent it and where it was routed. Answers the newest `limit` "
        "after `after_seq`.",
        ReadMessagesArgs,
        READ,
        True,
        _read_messages,
        read_only=True,
    ),
    Tool(
        "send_message",
        "Inject an inbound message as if it had arrived from a chat platform (as POST "
        "/api/v1/messages): it is stored and routed and may start a turn whose answer is "
        "delivered to that chat. Answers {id, chat_jid, seq, duplicate, decision}. To only "
        "see where a message would go, use explain_route.",
        MessageArgs,
        ADMIN,
        False,
        _send_message,
    ),
    Tool(
        "get_run",
        "One run of an agent: the exact system prompt, messages and tools sent to the model, "
        "its raw and final output, usage, cost, duration and outcome.",
        IdArgs,
        READ,
        True,
        _get_run,
        read_only=True,
    ),
    Tool(
        "disengage",
        "End a chat's engagement: after an agent answers, the chat keeps talking to it without "
        "mentions for a while; this ends that now, so the next message is routed by the table "
        "again. Answers {chat_jid, ended: [{topic, folder}]}.",
        DisengageArgs,
        ROUTES,
        True,
        _disengage,
    ),
)
