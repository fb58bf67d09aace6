"""Request bodies of the HTTP API (INTERFACES §4). Unknown fields are refused, so a client can
never slip in a ``message_type`` or an internal field; typed fields are strict (``"seq": "1"``
and ``"mentioned": "yes"`` are 400), and integers are bounded where they are written."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from postroom.core.bounds import MAX_COUNT

#: The largest integer SQLite stores: ids and sequence numbers beyond it are refused (400).
MAX_INT64 = 2**63 - 1


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttachmentIn(_Body):
    kind: str = Field(max_length=32)
    mime: str = Field("", max_length=255)
    name: str = Field("", max_length=255)
    size: StrictInt = Field(0, ge=0, le=MAX_COUNT)
    url: str = Field("", max_length=4096)
    data: str = ""


class MessageIn(_Body):
    """An inbound message from any adapter."""

    id: str | None = Field(None, description="The platform's message id; generated if absent.")
    chat_jid: str = Field(description="platform:room, e.g. telegram:group/5")
    sender: str = Field(description="platform:room, e.g. telegram:user/42")
    sender_name: str = Field("", max_length=255)
    content: str
    timestamp: datetime | None = None
    reply_to: str | None = Field(None, max_length=255)
    topic: str = Field("", max_length=255, description="The platform's native thread.")
    verb: str = "message"
    mentioned: StrictBool = False
    is_from_me: StrictBool = Field(
        False, description="The bot's own message echoed back: stored, never routed."
    )
    #: A direct message (ROUTING §8: admission by dm_policy); false is group-like.
    is_dm: StrictBool = False
    attachments: list[AttachmentIn] = Field(default_factory=list, max_length=32)


class RouteIn(_Body):
    seq: StrictInt
    match: StrictStr = ""
    target: StrictStr


class RouteRow(RouteIn):
    """A row of a whole table (``PUT /routes``); ``id`` as ``GET /routes`` gives it is allowed."""

    id: StrictInt | None = None


class FolderIn(_Body):
    path: str
    persona: str | None = None
    provider: str | None = None
    model: str | None = None
    engagement_ttl: str | None = Field(None, description="e.g. 30m; 0 disables")
    session: str | None = None
    busy_policy: str | None = None
    role: str | None = None
    tools: list[str] | None = None
    mirror: list[str] | None = None
    budget_per_day: float | None = Field(None, description="USD a day")

    def settings(self) -> dict[str, Any]:
        return self.model_dump(exclude={"path"}, exclude_none=True)


class SkillIn(_Body):
    name: StrictStr = Field(description="a-z, 0-9, '_' and '-'; its file is skills/<name>.md")
    description: StrictStr = ""
    keywords: list[StrictStr] = Field(default_factory=list, max_length=64)
    body: StrictStr = Field("", description="The Markdown the model receives.")


class TaskIn(_Body):
    folder: str
    chat_jid: str
    schedule: str = Field(description="5-field cron, 'every N s|m|h', or an ISO-8601 time")
    prompt: str
    tz: str | None = None


class PrincipalIn(_Body):
    pattern: StrictStr = Field(
        max_length=1024, description="A sender JID or glob, e.g. telegram:user/42 or telegram:*"
    )
    role: StrictStr = Field(description="owner, member or blocked")
    note: StrictStr = Field("", max_length=1024)


class TokenIn(_Body):
    name: str = Field(max_length=64, description="a-z, 0-9, - and _; not owner")
    scope: str = Field("read", description="read, routes or admin")
    folder: str | None = Field(None, description="Confine the token to this folder's tree.")
