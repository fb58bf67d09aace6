"""The MCP tools (INTERFACES §5): one table of name, description (written for a model),
arguments, scope and handler (:mod:`postroom.mcp.handlers`). A tool the caller's scope does not
cover, or that cannot be confined to the caller's folder, is refused before it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from postroom.engine.services import Services
from postroom.engine.tokens import Principal, Scope
from postroom.mcp import handlers
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
from postroom.mcp.handlers import SURFACE

__all__ = ["SURFACE", "TOOLS", "Tool"]

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
        handlers.list_routes,
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
        handlers.add_route,
    ),
    Tool(
        "delete_route",
        "Remove one row of the route table by id (see list_routes); the messages it caught "
        "fall through to later rows, or are dropped when none matches. Answers the removed "
        "row. With dry_run true nothing is removed and the answer is a preview.",
        DeleteRouteArgs,
        ROUTES,
        True,
        handlers.delete_route,
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
        handlers.set_routes,
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
        handlers.preview_routes,
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
        handlers.explain_route,
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
        handlers.route_history,
        read_only=True,
    ),
    Tool(
        "list_folders",
        "Every folder: a folder is an agent, named by a path such as atlas/content, with its "
        "persona and settings (a null setting is inherited from the parent or the defaults).",
        NoArgs,
        READ,
        True,
        handlers.list_folders,
        read_only=True,
    ),
    Tool(
        "get_folder",
        "One folder's persona and settings.",
        FolderArgs,
        READ,
        True,
        handlers.get_folder,
        read_only=True,
    ),
    Tool(
        "create_folder",
        "Create a folder (an agent), and any missing parent folders. Routes can target it "
        "once it exists. Answers the new folder.",
        CreateFolderArgs,
        ROUTES,
        True,
        handlers.create_folder,
    ),
    Tool(
        "update_folder",
        "Change some of a folder's settings (its persona included); only the settings given "
        "change, and a setting given as null is unset (inherited again). Takes effect on the "
        "folder's next turn. Answers the folder as it is now.",
        UpdateFolderArgs,
        ROUTES,
        True,
        handlers.update_folder,
    ),
    Tool(
        "list_jobs",
        "The turn queue, newest first. A job is one turn: a folder answering messages of one "
        "chat (message_ids); status queued, running, done, failed or cancelled, with attempts "
        "and the last error.",
        ListJobsArgs,
        READ,
        True,
        handlers.list_jobs,
        read_only=True,
    ),
    Tool(
        "retry_job",
        "Queue a failed or cancelled job again. Answers the job.",
        JobIdArgs,
        ADMIN,
        False,
        handlers.retry_job,
    ),
    Tool(
        "cancel_job",
        "Cancel a queued or running job; the messages it was answering stay unanswered. "
        "Answers the job.",
        JobIdArgs,
        ADMIN,
        False,
        handlers.cancel_job,
        destructive=True,
    ),
    Tool(
        "list_drops",
        "Messages nobody handled, oldest first, with the reason (no_route: no row matched; "
        "folder_missing: the target folder does not exist). Their text is not stored.",
        DropsArgs,
        READ,
        False,
        handlers.list_drops,
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
        handlers.read_messages,
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
        handlers.send_message,
    ),
    Tool(
        "get_run",
        "One run of an agent: the exact system prompt, messages and tools sent to the model, "
        "its raw and final output, usage, cost, duration and outcome.",
        RunIdArgs,
        READ,
        True,
        handlers.get_run,
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
        handlers.disengage_chat,
    ),
    Tool(
        "list_principals",
        "Who may talk to the agents: principals (a sender JID or glob with a role: owner, "
        "member or blocked; the most specific pattern wins) and the pending pairing requests "
        "(a stranger's direct message got a one-time code; approve_pairing lets them talk). "
        "Answers {principals: [...], pending: [{code, platform, chat_jid, sender, sender_name, "
        "created_at, expires_at}]}.",
        NoArgs,
        READ,
        False,
        handlers.list_principals,
        read_only=True,
    ),
    Tool(
        "approve_pairing",
        "Approve a pending pairing code: its sender (that exact sender only) becomes a member "
        "and may talk to the agents from now on; their chat is told. Answers {request, "
        "principal}.",
        PairingCodeArgs,
        ADMIN,
        False,
        handlers.approve_pairing,
    ),
    Tool(
        "deny_pairing",
        "Deny a pending pairing code: the request goes and the sender stays unanswered (their "
        "chat gets no new code until the old one would have expired). Answers the request.",
        PairingCodeArgs,
        ADMIN,
        False,
        handlers.deny_pairing,
        destructive=True,
    ),
)
