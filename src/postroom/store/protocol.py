"""The storage seam: a :class:`Store` hands out transactions, a :class:`StoreTx` reads and writes.

Every method of :class:`StoreTx` runs inside the transaction it belongs to, so the engine can
route and store one inbound message — dedupe, state lookups, the insert, command side effects —
as exactly one transaction. Implementations: SQLite (:mod:`postroom.store.sqlite`); PostgreSQL
later, behind the same protocol and the same tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from postroom.core.access import PairingState, Principal, Role
from postroom.core.attachments import Blob
from postroom.core.decision import ChatState, ReplyTarget
from postroom.core.folders import Folder
from postroom.core.messages import StoredMessage
from postroom.core.skills import Skill
from postroom.store.records import (
    AdapterLease,
    CompactionRecord,
    ConversationRecord,
    DeliveryRecord,
    DropRecord,
    FolderAuditRecord,
    JobRecord,
    JobStatus,
    MemoryFact,
    NewDelivery,
    NewJob,
    NewMessage,
    NodeRecord,
    PairingRequest,
    RouteAuditRecord,
    RouteRecord,
    RouteSpec,
    RunRecord,
    RunSummary,
    TaskRecord,
    TokenRecord,
    UsageRow,
)

__all__ = ["PriorOutcome", "SharedStore", "Store", "StoreTx", "TurnRow"]


@dataclass(frozen=True, slots=True)
class PriorOutcome:
    """What happened the first time a message with this ``(id, chat_jid)`` arrived."""

    seq: int | None
    decision: Mapping[str, Any] | None
    drop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A conversation row, with the turn that answers it (user rows) and that turn's status."""

    message: StoredMessage
    job_id: int | None = None
    job_status: str | None = None


class StoreTx(Protocol):
    """One open transaction."""

    # -- the catalog (routes and folders) and its change counter -------------------------
    async def catalog_version(self) -> int:
        """A counter bumped by every route or folder write, from any process."""
        ...

    async def bump_catalog_version(self) -> int: ...

    async def list_routes(self) -> list[RouteRecord]: ...

    async def get_route(self, route_id: int) -> RouteRecord | None: ...

    async def insert_route(
        self, spec: RouteSpec, *, created_at: datetime, created_by: str
    ) -> int: ...

    async def delete_routes(self, route_ids: Iterable[int]) -> None: ...

    async def add_route_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        route_id: int | None,
        before: Any,
        after: Any,
    ) -> None: ...

    async def list_route_audit(self, *, limit: int) -> list[RouteAuditRecord]: ...

    async def list_folders(self) -> list[Folder]: ...

    async def get_folder(self, path: str) -> Folder | None: ...

    async def insert_folder(self, folder: Folder) -> None: ...

    async def delete_folder(self, path: str) -> None: ...

    async def update_folder(self, folder: Folder) -> None:
        """Replace a folder's settings, ``updated_at`` and file stamp (its path, parent and
        creation stay)."""
        ...

    async def add_folder_audit(
        self, *, at: datetime, actor: str, action: str, folder: str, before: Any, after: Any
    ) -> None: ...

    async def list_folder_audit(self, *, folder: str | None, limit: int) -> list[FolderAuditRecord]:
        """Newest first."""
        ...

    # -- chats ----------------------------------------------------------------------------
    async def chat_state(self, chat_jid: str) -> ChatState:
        """Sticky group and topic, and the chat's engagements (expired ones included)."""
        ...

    async def set_sticky_group(
        self, chat_jid: str, folder: str | None, *, now: datetime
    ) -> None: ...

    async def set_sticky_topic(
        self, chat_jid: str, topic: str | None, *, now: datetime
    ) -> None: ...

    async def engage(self, chat_jid: str, topic: str, folder: str, until: datetime) -> None: ...

    async def end_engagements(self, chat_jid: str) -> int: ...

    async def end_engagement(self, chat_jid: str, topic: str) -> int:
        """End the engagement of one ``(chat, topic)``; return how many rows went (0 or 1)."""
        ...

    async def claim_missing_notice(
        self, chat_jid: str, *, now: datetime, interval_s: float
    ) -> bool:
        """True (and remember *now*) when the chat had no folder-missing notice for a while."""
        ...

    async def new_conversation(
        self, folder: str, topic: str, chat_jid: str | None, *, now: datetime
    ) -> int:
        """Start the next generation of a conversation (``/new``); return its id."""
        ...

    # -- messages and drops ---------------------------------------------------------------
    async def prior_outcome(self, message_id: str, chat_jid: str) -> PriorOutcome | None:
        """The recorded outcome of an earlier delivery of the same message, if any."""
        ...

    async def find_reply_target(self, chat_jid: str, ref: str) -> ReplyTarget | None:
        """The stored message *ref* names in this chat: by id, by platform id, or by the
        platform id of a chunk delivered for it in this chat."""
        ...

    async def insert_message(self, message: NewMessage) -> int:
        """Store a message and return its ``seq``.

        A row of a conversation that may enter a context has an upper bound of its tokens (its
        UTF-8 bytes) added here, once, to the conversation's ``token_estimate`` (the compaction
        decision reads that total, never the rows, while it is under the threshold). Observed
        rows are added when they join a conversation.
        """
        ...

    async def list_messages(
        self,
        *,
        chat_jid: str | None = None,
        folder: str | None = None,
        after_seq: int | None = None,
        limit: int = 100,
    ) -> list[StoredMessage]:
        """The newest *limit* matching messages after *after_seq*, in ``seq`` order."""
        ...

    async def insert_drop(self, drop: DropRecord) -> None: ...

    async def list_drops(self, *, limit: int) -> list[DropRecord]: ...

    async def get_drop(self, message_id: str, chat_jid: str) -> DropRecord | None: ...

    async def recent_inbound(self, *, limit: int) -> list[StoredMessage]:
        """The newest *limit* stored inbound user messages (not the gateway's own), newest
        first."""
        ...

    # -- messages, continued -----------------------------------------------------------------
    async def get_messages_since(
        self, chat_jid: str | None, since_seq: int, *, limit: int = 500
    ) -> list[StoredMessage]:
        """Messages with ``seq > since_seq`` (of one chat, or of every chat), oldest first."""
        ...

    async def last_seq(self) -> int:
        """The highest ``seq`` stored (0 when there is no message)."""
        ...

    async def several_senders(self, chat_jid: str, *, within: int) -> bool:
        """Whether the newest *within* ``user`` rows of the chat (not the bot's own echoes) come
        from more than one sender (MESSAGES §5: such a chat names who said what to the model)."""
        ...

    async def conversation_messages(self, conversation_id: int, *, limit: int) -> list[TurnRow]:
        """The newest *limit* rows of a conversation that may enter a context (MESSAGES §4:
        user, assistant, system and tool_result rows; not compacted; not commands), oldest
        first, each with the turn that answers it (for user rows) and that turn's status."""
        ...

    async def find_conversation(self, folder: str, topic: str, chat_jid: str | None) -> int | None:
        """The current generation of a conversation, if it was ever started."""
        ...

    async def attach_observed(
        self,
        folder: str,
        chat_jid: str,
        conversation_id: int,
        *,
        max_messages: int,
        max_chars: int,
    ) -> int:
        """Join the newest pending observed rows of ``(folder, chat_jid)`` to a conversation
        (at most *max_messages*, *max_chars* in all); mark the older pending ones skipped."""
        ...

    async def set_platform_id(self, message_id: str, chat_jid: str, platform_id: str) -> None: ...

    async def get_message(self, message_id: str, chat_jid: str) -> StoredMessage | None: ...

    async def update_message(
        self, message_id: str, chat_jid: str, *, content: str, metadata: Mapping[str, Any]
    ) -> None:
        """Replace a message's content and metadata (enrichment: a voice note's transcript),
        keeping its conversation's ``token_estimate`` at or above the count."""
        ...

    # -- conversations and the turn queue ------------------------------------------------------
    async def current_conversation(
        self, folder: str, topic: str, chat_jid: str | None, *, now: datetime
    ) -> int:
        """The current generation of a conversation, created on first use."""
        ...

    async def get_conversation(self, conversation_id: int) -> ConversationRecord | None: ...

    async def open_jobs(self, conversation_id: int, *, lock: bool = False) -> list[JobRecord]:
        """The conversation's queued and running turns; with *lock*, as they are now and held
        until the transaction ends, so no other process claims a queued one meanwhile."""
        ...

    async def insert_job(self, job: NewJob) -> int: ...

    async def attach_to_job(self, job_id: int, refs: Iterable[tuple[str, str]]) -> None:
        """Record that the turn answers these ``(message_id, chat_jid)`` messages."""
        ...

    async def move_job_messages(self, from_job: int, to_job: int) -> None: ...

    async def raise_job_priority(self, job_id: int, priority: int) -> None:
        """Lower the number (run sooner) if *priority* is more urgent."""
        ...

    async def claim_job(
        self, *, now: datetime, lease_until: datetime, owner: str, boot_id: str, token: str
    ) -> JobRecord | None:
        """Take the most urgent due queued turn whose conversation has none running."""
        ...

    async def renew_lease(self, job_id: int, token: str, lease_until: datetime) -> bool: ...

    async def get_job(self, job_id: int) -> JobRecord | None: ...

    async def list_jobs(self, *, status: str | None, limit: int) -> list[JobRecord]: ...

    async def job_for_message(self, message_id: str, chat_jid: str) -> JobRecord | None:
        """The turn that answers an inbound message, if it fired one."""
        ...

    async def finish_job(
        self,
        job_id: int,
        token: str,
        *,
        status: JobStatus,
        now: datetime,
        answer_id: str | None = None,
        error: str | None = None,
        attempts: int | None = None,
    ) -> bool:
        """End a running turn held under *token*; False if the lease was lost."""
        ...

    async def retry_job_later(
        self, job_id: int, token: str, *, attempts: int, run_at: datetime, error: str
    ) -> bool: ...

    async def release_lease(self, job_id: int, token: str) -> bool:
        """Put a running turn back in the queue without using an attempt."""
        ...

    async def release_expired_leases(self, *, now: datetime) -> list[int]: ...

    async def release_previous_boot(self, *, owner: str, boot_id: str) -> list[int]:
        """Requeue the turns an earlier process of this server left running."""
        ...

    async def cancel_job(self, job_id: int, *, now: datetime) -> JobRecord | None: ...

    async def requeue_job(self, job_id: int, *, now: datetime) -> JobRecord | None:
        """Queue a failed or cancelled turn again (the retry command)."""
        ...

    async def next_job_due(self) -> datetime | None:
        """When the earliest queued turn whose conversation has none running comes due."""
        ...

    async def job_counts(self) -> dict[str, int]:
        """Turns per status, and ``deliveries_pending`` for the outbox (for metrics)."""
        ...

    async def queue_position(self, conversation_id: int) -> tuple[str, int] | None:
        """``("running", 0)`` or ``("queued", n turns ahead)`` for the conversation."""
        ...

    # -- the outbox -------------------------------------------------------------------------------
    async def insert_deliveries(self, deliveries: Iterable[NewDelivery]) -> None: ...

    async def due_deliveries(self, *, now: datetime, limit: int) -> list[DeliveryRecord]:
        """For each chat, its oldest pending delivery, if due: chats are served in order."""
        ...

    async def claim_delivery(self, delivery_id: int, *, now: datetime) -> bool:
        """Hold a due row for this process while it sends it; False when another process
        holds it (PostgreSQL, PIPELINE §9; on SQLite always True)."""
        ...

    async def mark_delivered(
        self, delivery_id: int, *, now: datetime, platform_message_id: str | None
    ) -> None: ...

    async def reschedule_delivery(
        self, delivery_id: int, *, attempts: int, next_try: datetime, error: str
    ) -> None: ...

    async def abandon_delivery(self, delivery_id: int, *, now: datetime, error: str) -> None: ...

    async def next_delivery_due(self, *, after: datetime | None = None) -> datetime | None:
        """When the next pending delivery comes due (after *after*, if given)."""
        ...

    async def list_deliveries(
        self,
        *,
        message_id: str | None = None,
        status: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[DeliveryRecord]:
        """Rows by id; *status* ``failed`` means pending after at least one refused send."""
        ...

    async def get_delivery(self, delivery_id: int) -> DeliveryRecord | None: ...

    async def requeue_delivery(self, delivery_id: int, *, now: datetime) -> DeliveryRecord | None:
        """Make an abandoned or failing row due now, with a fresh TTL and no attempts; ``None``
        when the row is sent, pending without an error, or missing."""
        ...

    # -- memory, state, compactions, usage ------------------------------------------------------
    async def insert_fact(
        self,
        folder: str,
        category: str,
        fact: str,
        *,
        normalized: str,
        now: datetime,
        run_id: int | None = None,
    ) -> int: ...

    async def normalized_facts(self, folder: str) -> list[str]:
        """The normalized text of every fact of a folder (to spot near-duplicates)."""
        ...

    async def list_facts(
        self, folder: str, *, category: str | None = None, limit: int = 100
    ) -> list[MemoryFact]: ...

    async def search_facts(self, folder: str, query: str, *, limit: int) -> list[MemoryFact]:
        """Full-text search of a folder's facts, best match first."""
        ...

    async def set_state(self, folder: str, key: str, value: str, *, now: datetime) -> None:
        """Upsert a state entry; an empty value removes it."""
        ...

    async def get_state(self, folder: str) -> dict[str, str]: ...

    async def uncompacted_messages(self, conversation_id: int) -> list[StoredMessage]:
        """Every context row of a conversation not yet compacted, in ``seq`` order."""
        ...

    async def insert_compaction(
        self,
        conversation_id: int,
        *,
        summary: str,
        up_to_seq: int,
        messages_before: int,
        messages_after: int,
        tokens_saved: int,
        now: datetime,
        tokens_compacted: int = 0,
    ) -> int:
        """Store a summary and mark the rows it covers compacted (marked, never deleted);
        *tokens_compacted* (their estimate) leaves the conversation's ``token_estimate``."""
        ...

    async def correct_token_estimate(self, conversation_id: int, *, seen: int, actual: int) -> None:
        """The rows of a conversation were counted again and hold *actual* tokens where its
        ``token_estimate`` said *seen* (-1: unknown): move the total by the difference (rows
        stored meanwhile keep their share)."""
        ...

    async def latest_compaction(self, conversation_id: int) -> CompactionRecord | None: ...

    async def usage_summary(self, *, since: datetime | None = None) -> list[UsageRow]:
        """Runs, tokens and cost per day, folder and model (PIPELINE §4)."""
        ...

    # -- runs and tasks ---------------------------------------------------------------------------
    async def insert_run(self, run: RunRecord) -> int: ...

    async def get_run(self, run_id: int) -> RunRecord | None: ...

    async def list_runs(self, *, folder: str | None, limit: int) -> list[RunSummary]:
        """Newest first."""
        ...

    async def run_ids_for_jobs(self, job_ids: Iterable[int]) -> dict[int, list[int]]:
        """Each job's runs, oldest first (jobs without runs are left out)."""
        ...

    async def insert_task(self, task: TaskRecord) -> int: ...

    async def get_task(self, task_id: int) -> TaskRecord | None: ...

    async def list_tasks(self) -> list[TaskRecord]: ...

    async def update_task(self, task_id: int, **changes: Any) -> None:
        """Change ``enabled``, ``next_run``, ``last_run`` or ``last_status``."""
        ...

    async def delete_task(self, task_id: int) -> bool: ...

    async def due_tasks(self, *, now: datetime) -> list[TaskRecord]: ...

    async def task_has_open_job(self, task_id: int) -> bool: ...

    # -- named tokens -----------------------------------------------------------------------------
    async def insert_token(self, token: TokenRecord, *, secret_hash: str) -> None: ...

    async def list_tokens(self) -> list[TokenRecord]: ...

    async def find_token(self, secret_hash: str) -> TokenRecord | None:
        """The token whose secret hashes to *secret_hash* (one indexed read)."""
        ...

    async def delete_token(self, name: str) -> bool: ...

    # -- nodes (PIPELINE §9) and shared secrets ---------------------------------------------------
    async def register_node(self, node: NodeRecord) -> None:
        """Insert or replace a node's row (a restarted node keeps its id, with a new boot)."""
        ...

    async def heartbeat_node(self, node_id: str, *, at: datetime) -> None: ...

    async def remove_node(self, node_id: str) -> None: ...

    async def list_nodes(self) -> list[NodeRecord]: ...

    async def take_adapter_lease(
        self, adapter: str, node_id: str, *, now: datetime, until: datetime
    ) -> bool:
        """Hold *adapter* for *node_id* until *until*: renew the node's own lease, or take one
        nobody holds or whose holder let it run out; ``False`` while another node holds it."""
        ...

    async def release_adapter_lease(self, adapter: str, node_id: str) -> None:
        """Give up *adapter* if *node_id* holds it (another node may take it at once)."""
        ...

    async def list_adapter_leases(self) -> list[AdapterLease]: ...

    async def shared_secret(self, name: str, *, new: str) -> str:
        """The secret stored under *name*, storing *new* first if there is none (every node
        then signs cookies and sessions with the same key)."""

    # -- admission (ROUTING §8) and daily budgets ---------------------------------------------
    async def list_principals(self) -> list[Principal]: ...

    async def get_principal(self, principal_id: int) -> Principal | None: ...

    async def find_principal(self, pattern: str) -> Principal | None:
        """The principal of exactly this pattern text."""
        ...

    async def insert_principal(
        self, pattern: str, role: Role, *, note: str, created_at: datetime, created_by: str
    ) -> int: ...

    async def set_principal_role(self, principal_id: int, role: Role, *, note: str) -> None: ...

    async def delete_principal(self, principal_id: int) -> bool: ...

    async def add_access_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        principal_id: int | None = None,
        code: str | None = None,
        before: Any = None,
        after: Any = None,
    ) -> None: ...

    async def pairing_state(self, chat_jid: str, platform: str, *, now: datetime) -> PairingState:
        """Whether the chat holds an unexpired code, and the platform's pending count."""
        ...

    async def insert_pairing(self, request: PairingRequest) -> None:
        """Store a new request (expired ones are cleared first)."""
        ...

    async def code_in_use(self, code: str) -> bool: ...

    async def list_pairings(self, *, now: datetime) -> list[PairingRequest]:
        """Pending, unexpired requests, oldest first."""
        ...

    async def get_pairing(self, code: str, *, now: datetime) -> PairingRequest | None:
        """A pending, unexpired request."""
        ...

    async def close_pairing(self, code: str, *, denied: bool) -> None:
        """Approved: the request goes. Denied: it stays, marked, until it expires (the chat is
        not offered another code within the TTL)."""
        ...

    async def cost_since(self, folder: str, since: datetime) -> tuple[float, int]:
        """The priced cost of the runs of a folder's tree since *since*, and how many of those
        runs had no price."""
        ...

    async def claim_budget_notice(
        self, chat_jid: str, folder: str, *, now: datetime, interval_s: float
    ) -> bool:
        """True (and remember *now*) when the chat was not told about the folder's budget for
        *interval_s*."""
        ...

    # -- skills (MESSAGES §4) ---------------------------------------------------------------------
    async def list_skills(self, folders: Iterable[str] | None = None) -> list[Skill]:
        """The skills of *folders* (of every folder when ``None``), by folder and name."""
        ...

    async def get_skill(self, folder: str, name: str) -> Skill | None: ...

    async def put_skill(self, skill: Skill) -> None:
        """Insert a skill, or replace the one of the same folder and name (keeping its
        ``created_at``)."""
        ...

    async def delete_skill(self, folder: str, name: str) -> bool: ...

    # -- blobs: attachment bytes, content-addressed ---------------------------------------------
    async def insert_blobs(
        self, blobs: Iterable[Blob], *, chat_jid: str, message_id: str, now: datetime
    ) -> None:
        """Store each blob once (by its SHA-256) and record that the message holds it."""
        ...

    async def get_blobs(self, hashes: Iterable[str]) -> dict[str, Blob]:
        """The stored blobs among *hashes*, by hash."""
        ...

    async def chat_holds_blob(self, chat_jid: str, sha256: str) -> bool:
        """Whether a message of *chat_jid* carries the blob (a visitor may fetch it)."""
        ...


class Store(Protocol):
    """A database postroom keeps everything in."""

    def read(self) -> AbstractAsyncContextManager[StoreTx]:
        """A read transaction: a consistent snapshot."""
        ...

    def write(self) -> AbstractAsyncContextManager[StoreTx]:
        """A write transaction, committed when the block exits normally, else rolled back."""
        ...

    def claim(self) -> AbstractAsyncContextManager[StoreTx]:
        """The transaction the delivery loop chooses and claims due outbox rows in: a write
        where several processes share the database (:meth:`StoreTx.claim_delivery` holds a row
        for this one), a read where one server owns it (SQLite)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class SharedStore(Protocol):
    """A store several processes share (PostgreSQL, PIPELINE §9): it says which node this
    process is, and passes on the wake-ups other nodes' commits send."""

    node: str

    async def listen(self, listener: Callable[[str], None]) -> None: ...
