"""Rows the store reads and writes, besides the domain values of :mod:`postroom.core`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from postroom.core.messages import MessageType, Verb

__all__ = ["DropRecord", "NewMessage", "RouteAuditRecord", "RouteRecord", "RouteSpec"]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A route as written by a person: the text of its parts, already validated."""

    seq: int
    match: str
    target: str


@dataclass(frozen=True, slots=True)
class RouteRecord:
    """One stored row of the route table."""

    id: int
    seq: int
    match: str
    target: str
    created_at: datetime
    created_by: str

    def to_spec(self) -> RouteSpec:
        return RouteSpec(self.seq, self.match, self.target)


@dataclass(frozen=True, slots=True)
class RouteAuditRecord:
    """Who changed the route table, when, and what it held before and after."""

    id: int
    at: datetime
    actor: str
    action: str
    route_id: int | None
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class DropRecord:
    """A message nobody handled: kept for audit, without its content."""

    id: str
    chat_jid: str
    time: datetime
    sender: str
    verb: str
    reason: str


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message about to be stored; the store assigns its ``seq``."""

    id: str
    chat_jid: str
    sender: str
    content: str
    timestamp: datetime
    message_type: MessageType = MessageType.USER
    sender_name: str = ""
    is_from_me: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    verb: str = Verb.MESSAGE.value
    topic: str = ""
    reply_to: str | None = None
    platform_id: str | None = None
    routed_to: str | None = None
    observed: bool = False
    conversation_id: int | None = None
    run_id: int | None = None
    #: The routing decision as recorded (``Decision.to_record()``), for redeliveries.
    decision: Mapping[str, Any] | None = None
