"""The arguments of each MCP tool: JSON schemas with descriptions written for a model.

The names are the HTTP API's field names (INTERFACES §4). Types are strict (``"seq": "1"``
is refused, as on the API) and unknown arguments are refused, so a model learns at once that
it misspelt one instead of having it ignored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from postroom.core.folders import BusyPolicy, Role, Session
from postroom.core.messages import Verb
from postroom.store.records import JobStatus

__all__ = [
    "AddRouteArgs",
    "CreateFolderArgs",
    "DeleteRouteArgs",
    "DisengageArgs",
    "DropsArgs",
    "FolderArgs",
    "JobIdArgs",
    "LimitArgs",
    "ListJobsArgs",
    "MessageArgs",
    "NoArgs",
    "PairingCodeArgs",
    "PreviewArgs",
    "ReadMessagesArgs",
    "RouteRow",
    "RunIdArgs",
    "SetRoutesArgs",
    "describe_error",
    "schema_of",
]

SEQ = (
    "Evaluation order: lower seq is tried first, negative allowed; rows with the same seq are "
    "tried in the order they were added."
)
MATCH = (
    "Space-separated key=pattern tests that must all hold. Keys: platform (e.g. telegram), "
    "room (the chat id after 'platform:'), chat_jid (platform:room), sender, verb (message, "
    "mention, reply, post, ...). Patterns are globs: * and ? never cross '/', [a-z] is a "
    "class; a pattern also holds for everything under a matching path (room=guild/* holds for "
    "guild/77/channel/3). 'key=' holds only for an empty value. Empty match: every message. "
    "Example: 'platform=discord room=guild/* verb=mention'."
)
TARGET = (
    "Where matching messages go: 'folder' fires a turn of that folder (agent); "
    "'folder#observe' stores the message as context without a turn; 'folder#topic' fires "
    "under that topic. A path segment may be {sender} for one folder per sender "
    "(e.g. 'atlas/{sender}'). The folder (or the parent of {sender}) must already exist."
)
DRY_RUN = (
    "If true, change nothing and answer what the change would do to the last `limit` real "
    "messages: {examined, changed, messages} listing each message whose routing would differ."
)
LIMIT = "How many recent stored messages a preview examines (default 500, at most 5000)."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoArgs(_Args):
    pass


class RouteRow(_Args):
    seq: int = Field(description=SEQ)
    match: str = Field("", description=MATCH)
    target: str = Field(description=TARGET)


class AddRouteArgs(RouteRow):
    dry_run: bool = Field(False, description=DRY_RUN)
    limit: int = Field(500, ge=1, le=5000, description=LIMIT)


class DeleteRouteArgs(_Args):
    id: int = Field(description="The route's id, as list_routes shows it.")
    dry_run: bool = Field(False, description=DRY_RUN)
    limit: int = Field(500, ge=1, le=5000, description=LIMIT)


_ROWS = (
    "The complete new route table (for a token confined to a folder: the complete set of rows "
    "targeting that folder's tree), as {seq, match, target} objects."
)


class SetRoutesArgs(_Args):
    rows: list[RouteRow] = Field(max_length=10_000, description=_ROWS)
    dry_run: bool = Field(False, description=DRY_RUN)
    limit: int = Field(500, ge=1, le=5000, description=LIMIT)


class PreviewArgs(_Args):
    rows: list[RouteRow] = Field(max_length=10_000, description=_ROWS)
    limit: int = Field(500, ge=1, le=5000, description=LIMIT)


class LimitArgs(_Args):
    limit: int = Field(20, ge=1, le=10_000, description="How many entries, newest first.")


class PairingCodeArgs(_Args):
    code: str = Field(
        max_length=32,
        description="The pairing code a stranger was given, e.g. ABCD-2345 (case and dash "
        "do not matter).",
    )


class DropsArgs(_Args):
    limit: int = Field(
        100, ge=1, le=1000, description="At most this many, the newest ones (listed oldest first)."
    )


class JobIdArgs(_Args):
    id: int = Field(description="The job's id, as list_jobs shows it.")


class RunIdArgs(_Args):
    id: int = Field(description="The run's id: the run_id of an agent's answer in read_messages.")


class FolderArgs(_Args):
    path: str = Field(max_length=255, description="The folder's path, e.g. atlas/content.")


class CreateFolderArgs(FolderArgs):
    persona: str | None = Field(
        None, max_length=65_536, description="Who the agent is and how it answers (AGENT.md)."
    )
    provider: str | None = Field(None, description="LLM provider; the default when left out.")
    model: str | None = Field(None, description="Model name; the provider's default when out.")
    engagement_ttl: str | None = Field(
        None,
        description="How long a reply keeps the chat talking to this folder without a "
        "mention, e.g. 30m; 0 disables.",
    )
    # Choices are the domain's enums, given as their text (strict=False lets text in).
    session: Session | None = Field(
        None,
        strict=False,
        description="per-chat: one history per chat; shared: one across its chats.",
    )
    busy_policy: BusyPolicy | None = Field(
        None,
        strict=False,
        description="A message arriving during a turn: followup (a turn after it), interrupt "
        "(stop it and answer everything) or steer.",
    )
    role: Role | None = Field(
        None,
        strict=False,
        description="agent; conductor (its own turns may edit the routes under it); admin.",
    )
    mirror: list[str] | None = Field(
        None, max_length=32, description="Chat JIDs that get a copy of this folder's traffic."
    )
    budget_per_day: float | None = Field(
        None,
        ge=0,
        description="USD this folder (with its per-sender children) may spend per UTC day.",
    )

    def settings(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"path"}, exclude_none=True)


class UpdateFolderArgs(CreateFolderArgs):
    """The settings to change; a setting given as null is unset (inherited again)."""

    def settings(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"path"}, exclude_unset=True)


class ListJobsArgs(_Args):
    status: JobStatus | None = Field(None, strict=False, description="Only jobs in this status.")
    limit: int = Field(100, ge=1, le=1000, description="How many, newest first.")


class ReadMessagesArgs(_Args):
    chat_jid: str | None = Field(None, description="Only this chat, e.g. telegram:group/5.")
    folder: str | None = Field(
        None, description="Only messages routed to this folder (required for a confined token)."
    )
    after_seq: int | None = Field(None, ge=0, description="Only messages after this seq.")
    limit: int = Field(100, ge=1, le=1000, description="At most this many, the newest ones.")


class AttachmentArgs(_Args):
    kind: str = Field(max_length=32, description="image, audio, video or file.")
    mime: str = Field("", max_length=255)
    name: str = Field("", max_length=255)
    size: int = Field(0, ge=0)
    url: str = Field("", max_length=4096)
    data: str = Field("", description="The bytes, base64.")


class MessageArgs(_Args):
    id: str | None = Field(
        None, max_length=255, description="The platform's message id; generated if left out."
    )
    chat_jid: str = Field(description="The chat, platform:room, e.g. telegram:group/5.")
    sender: str = Field(description="Who wrote it, platform:room, e.g. telegram:user/42.")
    sender_name: str = Field("", max_length=255, description="The sender's display name.")
    content: str = Field(description="The text of the message.")
    timestamp: datetime | None = Field(None, strict=False, description="ISO 8601; now if left out.")
    reply_to: str | None = Field(
        None, max_length=255, description="The id of the message it replies to."
    )
    topic: str = Field("", max_length=255, description="The platform's native thread, if any.")
    verb: Verb = Field(
        Verb.MESSAGE,
        strict=False,
        description="What the message does; a text starting with the assistant's name becomes "
        "a mention by itself.",
    )
    mentioned: bool = Field(False, description="The platform says the bot was mentioned.")
    is_from_me: bool = Field(
        False,
        description="The bot's own message echoed back by the platform: stored, never routed.",
    )
    is_dm: bool = Field(
        False,
        description="A direct message to the bot (admitted by the access policy for direct "
        "messages); false for a group or channel.",
    )
    attachments: list[AttachmentArgs] = Field(
        default_factory=list, max_length=32, description="Files that came with the message."
    )


class DisengageArgs(_Args):
    chat_jid: str = Field(description="The chat, platform:room.")
    topic: str | None = Field(
        None,
        max_length=255,
        description="Only this topic's engagement ('' is the chat as a whole); every topic "
        "of the chat when left out.",
    )


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema as a model reads it best: every ``$ref`` written out in place
    and pydantic's generated titles left out."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    inlined: dict[str, Any] = _plain(schema, definitions)
    return inlined


def _plain(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(value, definitions) for value in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        # The field's own description speaks for it; the type's docstring is for people.
        named = definitions[ref.removeprefix("#/$defs/")]
        own = {key: value for key, value in node.items() if key != "$ref"}
        node = {**{k: v for k, v in named.items() if k != "description"}, **own}
    return {
        key: _plain(value, definitions)
        for key, value in node.items()
        if not (key == "title" and isinstance(value, str))
    }


def describe_error(tool: str, exc: ValidationError) -> str:
    """The first problem with a tool's arguments as one sentence."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"{tool} takes no argument {where!r}."
    if kind == "missing":
        return f"{tool} needs the argument {where!r}."
    message = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    return f"{tool}: argument {where!r}: {message}." if where else f"{tool}: {message}."
