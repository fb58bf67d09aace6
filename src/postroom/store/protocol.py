"""The storage seam: a :class:`Store` hands out transactions, a :class:`StoreTx` reads and writes.

Every method of :class:`StoreTx` runs inside the transaction it belongs to, so the engine can
route and store one inbound message — dedupe, state lookups, the insert, command side effects —
as exactly one transaction. Implementations: SQLite (:mod:`postroom.store.sqlite`); PostgreSQL
later, behind the same protocol and the same tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from postroom.core.decision import ChatState, ReplyTarget
from postroom.core.folders import Folder
from postroom.core.messages import StoredMessage
from postroom.store.records import (
    DropRecord,
    NewMessage,
    RouteAuditRecord,
    RouteRecord,
    RouteSpec,
)

__all__ = ["PriorOutcome", "Store", "StoreTx"]


@dataclass(frozen=True, slots=True)
class PriorOutcome:
    """What happened the first time a message with this ``(id, chat_jid)`` arrived."""

    seq: int | None
    decision: Mapping[str, Any] | None
    drop_reason: str | None = None


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
        """The stored message *ref* names in this chat: by id, then by platform id."""
        ...

    async def insert_message(self, message: NewMessage) -> int:
        """Store a message and return its ``seq``."""
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


class Store(Protocol):
    """A database postroom keeps everything in."""

    def read(self) -> AbstractAsyncContextManager[StoreTx]:
        """A read transaction: a consistent snapshot."""
        ...

    def write(self) -> AbstractAsyncContextManager[StoreTx]:
        """A write transaction, committed when the block exits normally, else rolled back."""
        ...

    async def close(self) -> None: ...
