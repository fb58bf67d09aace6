"""The routing decision (INTERFACES §3) and the state resolution reads.

A :class:`Decision` is both the answer shown to people (``to_dict()`` has exactly the public keys)
and the instruction the engine carries out: which command effect to apply, which folder to
create from a ``{sender}`` template, which drop reason to record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from postroom.core.access import Role
from postroom.core.messages import MessageType, Verb

__all__ = [
    "EMPTY_CHAT",
    "Action",
    "ChatState",
    "Command",
    "CommandKind",
    "Decision",
    "DropReason",
    "Engagement",
    "Layer",
    "ReplyTarget",
    "RoutingMessage",
]


class Action(StrEnum):
    FIRE = "fire"
    OBSERVE = "observe"
    COMMAND = "command"
    IGNORE = "ignore"


class Layer(StrEnum):
    ACCESS = "access"
    OPERATOR = "operator"
    ENGAGEMENT = "engagement"
    REPLY_CHAIN = "reply_chain"
    STICKY = "sticky"
    ROUTE = "route"
    COMMAND = "command"
    #: PIPELINE §1 item 7: the chat fired too many turns in the last minute.
    LIMIT = "limit"
    MISS = "miss"
    OWN = "own"
    DUPLICATE = "duplicate"


class DropReason(StrEnum):
    NO_ROUTE = "no_route"
    FOLDER_MISSING = "folder_missing"
    NOT_ADMITTED = "not_admitted"
    PAIRING_PENDING = "pairing_pending"
    BLOCKED = "blocked"


class CommandKind(StrEnum):
    """The effect of a steering command; the engine applies it in the ingest transaction."""

    SET_STICKY = "set_sticky"
    CLEAR_STICKY = "clear_sticky"
    REFUSE_STICKY = "refuse_sticky"
    SET_TOPIC = "set_topic"
    CLEAR_TOPIC = "clear_topic"
    NEW = "new"
    STOP = "stop"
    STATUS = "status"
    CHATID = "chatid"


@dataclass(frozen=True, slots=True)
class Command:
    kind: CommandKind
    #: The sticky folder to set, or the resolved folder for /new, /stop and /status.
    folder: str | None = None
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class Engagement:
    """``(chat, topic)`` is engaged to ``folder`` until ``until`` (UTC)."""

    folder: str
    until: datetime


@dataclass(frozen=True, slots=True)
class ChatState:
    """What routing needs to know about one chat."""

    sticky_group: str | None = None
    sticky_topic: str | None = None
    #: Engagements of the chat by topic (``""`` for the chat as a whole).
    engagements: Mapping[str, Engagement] = field(default_factory=dict)


EMPTY_CHAT = ChatState()


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """The stored message a reply points at."""

    message_type: MessageType
    is_from_me: bool
    routed_to: str | None
    topic: str


# Not frozen, for the same reason as Decision: built once per inbound message.
@dataclass(slots=True)
class RoutingMessage:
    """The parts of a message that resolution looks at."""

    chat_jid: str
    sender: str
    content: str
    verb: str = Verb.MESSAGE.value
    mentioned: bool = False
    #: The platform's native thread, not yet normalized.
    native_topic: str = ""
    message_type: MessageType = MessageType.USER
    is_from_me: bool = False
    reply: ReplyTarget | None = None


# Not frozen: one Decision is built per message on the routing hot path, and a frozen
# dataclass's __init__ (object.__setattr__ per field) costs about five times as much. Treat it
# as immutable all the same: every change goes through dataclasses.replace().
@dataclass(slots=True)
class Decision:
    """Where a message goes and why. ``reason`` joins the trail into one sentence."""

    action: Action
    layer: Layer
    folder: str | None = None
    topic: str | None = None
    content: str | None = None
    inline: str | None = None
    route_id: int | None = None
    ack: str | None = None
    job_id: int | None = None
    trail: tuple[str, ...] = ()
    #: The verb after trigger detection (what is stored and matched).
    verb: str = Verb.MESSAGE.value
    command: Command | None = None
    drop: DropReason | None = None
    #: The fired folder does not exist yet: create it under this ``{sender}`` template parent.
    create_from_template: str | None = None
    #: The role of the principal that admitted the sender (ROUTING §8), if one did.
    role: Role | None = None
    #: Observed by the chat's turn limit (layer ``limit``), not by a folder's budget.
    rate_limited: bool = False
    #: Admission refused a stranger's DM and a pairing code is to be sent to the chat.
    send_code: bool = False

    @property
    def reason(self) -> str:
        return "; ".join(self.trail)

    @property
    def stores_message(self) -> bool:
        """Whether the message is stored with its content (everything but drops)."""
        return self.drop is None

    def with_job(self, job_id: int | None) -> Decision:
        return replace(self, job_id=job_id)

    def as_duplicate(self) -> Decision:
        return replace(self, layer=Layer.DUPLICATE)

    def as_rate_limited(self, turns_per_minute: int) -> Decision:
        """This firing decision, observed instead: the chat is over its turns per minute
        (PIPELINE §1 item 7, the loop guard of last resort)."""
        return replace(
            self,
            action=Action.OBSERVE,
            layer=Layer.LIMIT,
            rate_limited=True,
            trail=(
                *self.trail,
                f"the chat fired {turns_per_minute} turns in the last 60 s "
                "([limits] turns_per_minute): observed, no turn",
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The public decision object: every key present, ``None`` where it does not apply."""
        return {
            "action": self.action.value,
            "layer": self.layer.value,
            "folder": self.folder,
            "topic": self.topic,
            "content": self.content,
            "inline": self.inline,
            "route_id": self.route_id,
            "ack": self.ack,
            "job_id": self.job_id,
            "reason": self.reason,
        }

    def to_record(self) -> dict[str, Any]:
        """Everything needed to give the same answer again for a redelivered message."""
        record = self.to_dict()
        record["verb"] = self.verb
        record["command"] = self.command.kind.value if self.command else None
        record["drop"] = self.drop.value if self.drop else None
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Decision:
        reason = record.get("reason") or ""
        command = record.get("command")
        drop = record.get("drop")
        return cls(
            action=Action(record["action"]),
            layer=Layer(record["layer"]),
            folder=record.get("folder"),
            topic=record.get("topic"),
            content=record.get("content"),
            inline=record.get("inline"),
            route_id=record.get("route_id"),
            ack=record.get("ack"),
            job_id=record.get("job_id"),
            trail=(reason,) if reason else (),
            verb=record.get("verb") or Verb.MESSAGE.value,
            command=Command(CommandKind(command)) if command else None,
            drop=DropReason(drop) if drop else None,
        )
