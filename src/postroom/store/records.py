"""Rows the store reads and writes, besides the domain values of :mod:`postroom.core`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from postroom.core.messages import MessageType, Verb

__all__ = [
    "AdapterLease",
    "CompactionRecord",
    "ConversationRecord",
    "DeliveryRecord",
    "DropRecord",
    "FolderAuditRecord",
    "JobKind",
    "JobRecord",
    "JobStatus",
    "MemoryFact",
    "NewDelivery",
    "NewJob",
    "NewMessage",
    "NodeRecord",
    "PairingRequest",
    "RouteAuditRecord",
    "RouteRecord",
    "RouteSpec",
    "RunRecord",
    "RunSummary",
    "TaskRecord",
    "TokenRecord",
    "UsageRow",
]


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
class FolderAuditRecord:
    """Who changed a folder's settings, when, how, and the settings before and after."""

    id: int
    at: datetime
    actor: str
    action: str
    folder: str
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


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobKind(StrEnum):
    TURN = "turn"
    SCHEDULED = "scheduled"
    DELEGATED = "delegated"


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: int
    folder: str
    topic: str
    #: ``None`` for a shared conversation (every chat routed to the folder).
    chat_jid: str | None
    generation: int
    #: At least the tokens of its rows that may enter a context and are not compacted (their
    #: exact count when compaction last counted, plus the bounds of rows since), kept as rows
    #: come and go (PIPELINE §6); -1 while unknown (a conversation older than the estimate).
    token_estimate: int = 0


@dataclass(frozen=True, slots=True)
class NewJob:
    conversation_id: int
    folder: str
    chat_jid: str
    topic: str
    priority: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    kind: JobKind = JobKind.TURN
    task_id: int | None = None
    #: How many delegations led here (0 for a turn a message fired).
    depth: int = 0


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A turn in the queue (PIPELINE §2)."""

    id: int
    conversation_id: int
    folder: str
    chat_jid: str
    topic: str
    kind: JobKind
    task_id: int | None
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    run_at: datetime
    lease_until: datetime | None
    lease_owner: str | None
    lease_token: str | None
    last_error: str | None
    answer_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    #: The inbound messages this turn answers, as ``(id, chat_jid)``.
    messages: tuple[tuple[str, str], ...] = ()
    depth: int = 0


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """One chunk of a stored message to send to one chat."""

    message_id: str
    message_chat_jid: str
    chat_jid: str
    chunk: int
    chunks: int
    content: str
    kind: str
    message_type: str
    next_try: datetime
    created_at: datetime
    folder: str | None = None
    topic: str = ""
    reply_to: str | None = None
    #: Delivering it engages ``(chat_jid, topic)`` to ``folder`` (agent replies only).
    engage: bool = False


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: int
    message_id: str
    message_chat_jid: str
    chat_jid: str
    chunk: int
    chunks: int
    content: str
    kind: str
    message_type: str
    folder: str | None
    topic: str
    reply_to: str | None
    engage: bool
    status: str
    attempts: int
    next_try: datetime
    last_error: str | None
    platform_message_id: str | None
    created_at: datetime
    sent_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The exact request and outcome of one model run (MESSAGES §4)."""

    job_id: int
    folder: str
    provider: str
    system: str
    messages: list[dict[str, Any]]
    outcome: str
    started_at: datetime
    conversation_id: int | None = None
    model: str | None = None
    account: str | None = None
    tools: list[Any] = field(default_factory=list)
    output_raw: str | None = None
    output: str | None = None
    usage: dict[str, Any] | None = None
    cost: float | None = None
    duration_ms: int | None = None
    error: str | None = None
    finished_at: datetime | None = None
    id: int | None = None
    #: ``turn``, or the housekeeping call it was: ``memory_flush``, ``summary``.
    purpose: str = "turn"
    #: The skills injected into the system prompt, with their scores (MESSAGES §4).
    skills: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run without its request and output: what ``runs list`` shows."""

    id: int
    job_id: int
    folder: str
    provider: str
    model: str | None
    usage: dict[str, Any] | None
    cost: float | None
    duration_ms: int | None
    outcome: str
    error: str | None
    started_at: datetime
    purpose: str


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A scheduled prompt (PIPELINE §7)."""

    id: int
    folder: str
    chat_jid: str
    schedule: str
    tz: str | None
    prompt: str
    enabled: bool
    next_run: datetime | None
    last_run: datetime | None
    last_status: str | None
    created_at: datetime
    created_by: str


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A ``postroom serve`` process on the database (PIPELINE §9), and when it last said so."""

    id: str
    name: str
    boot_id: str
    host: str
    port: int
    pid: int
    started_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class AdapterLease:
    """Which node runs a single-connection adapter, and until when without renewing."""

    adapter: str
    node_id: str
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A named API and MCP token; the secret itself is never stored, only its hash."""

    name: str
    scope: str
    folder: str | None
    created_at: datetime
    created_by: str


@dataclass(frozen=True, slots=True)
class PairingRequest:
    """A one-time code offered to a stranger's direct message (ROUTING §8)."""

    code: str
    platform: str
    chat_jid: str
    sender: str
    sender_name: str | None
    created_at: datetime
    expires_at: datetime
    status: str = "pending"


@dataclass(frozen=True, slots=True)
class MemoryFact:
    id: int
    folder: str
    category: str
    fact: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    id: int
    conversation_id: int
    summary: str
    up_to_seq: int
    messages_before: int
    messages_after: int
    tokens_saved: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Runs, tokens and cost of one folder and model on one day (UTC)."""

    day: str
    folder: str
    provider: str
    model: str | None
    runs: int
    input_tokens: int
    output_tokens: int
    #: ``None`` when a run used tokens of a model without a price (the cost is unknown).
    cost: float | None
