"""Principals and pairing (ROUTING §8): the one set of functions behind the CLI's ``postroom
access``, the API's ``/api/v1/access``, the MCP tools and the dashboard's Access page.

Every write is audited with its actor and bumps the catalog version, so a running server (or
another process's) admits or refuses by the new principals before it routes the next message.
Approving a code creates a ``member`` principal for exactly the sender that asked (its JID with
glob characters escaped), never a wider pattern, and tells that chat it may talk now.

Pairing codes are opened by the ingest transaction of the stranger's message
(:func:`open_pairing`): the code goes to the chat as a host message, and each new request is
announced to the ``[access] notify`` chats.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from postroom.core.access import (
    MAX_NOTE_CHARS,
    AccessPolicy,
    Principal,
    Role,
    escape_glob,
    new_pairing_code,
    normalize_code,
    pairing_prompt,
    parse_principal_pattern,
    parse_role,
)
from postroom.core.errors import InvalidInput, NotFound
from postroom.core.messages import InboundMessage
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.notices import post_notice
from postroom.engine.signals import Signals
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import PairingRequest

__all__ = [
    "APPROVED_NOTICE",
    "AccessService",
    "Approval",
    "open_pairing",
    "pairing_to_dict",
    "principal_to_dict",
]

log = structlog.get_logger(__name__)

APPROVED_NOTICE = "You can talk to this assistant now."


def principal_to_dict(principal: Principal) -> dict[str, Any]:
    """The public principal object."""
    return {
        "id": principal.id,
        "pattern": principal.pattern,
        "role": principal.role.value,
        "note": principal.note,
        "created_at": principal.created_at.isoformat() if principal.created_at else None,
        "created_by": principal.created_by,
    }


def pairing_to_dict(request: PairingRequest) -> dict[str, Any]:
    """The public pending-request object (INTERFACES §2 ``access pending --json``)."""
    return {
        "code": request.code,
        "platform": request.platform,
        "chat_jid": request.chat_jid,
        "sender": request.sender,
        "sender_name": request.sender_name,
        "created_at": request.created_at.isoformat(),
        "expires_at": request.expires_at.isoformat(),
    }


@dataclass(frozen=True, slots=True)
class Approval:
    """An approved request and the principal it created (or changed)."""

    request: PairingRequest
    principal: Principal

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": pairing_to_dict(self.request),
            "principal": principal_to_dict(self.principal),
        }


async def open_pairing(
    tx: StoreTx, message: InboundMessage, *, policy: AccessPolicy, clock: Clock
) -> PairingRequest:
    """Offer the stranger's chat a one-time code, in the message's own transaction, and tell
    the ``notify`` chats. The caller has checked that this chat holds no code and that the
    platform is under ``max_pending``."""
    now = clock()
    code = new_pairing_code(secrets.randbelow)
    while await tx.code_in_use(code):  # 31^8 codes: a repeat is a curiosity, not a loop
        code = new_pairing_code(secrets.randbelow)
    request = PairingRequest(
        code=code,
        platform=message.chat_jid.partition(":")[0],
        chat_jid=message.chat_jid,
        sender=message.sender,
        sender_name=message.sender_name,
        created_at=now,
        expires_at=now + timedelta(seconds=policy.pairing_ttl_s),
    )
    await tx.insert_pairing(request)
    await tx.add_access_audit(
        at=now,
        actor="postroom",
        action="pairing_requested",
        code=code,
        after=pairing_to_dict(request),
    )
    await post_notice(
        tx,
        message.chat_jid,
        pairing_prompt(code),
        clock=clock,
        metadata={"source": "pairing"},
    )
    who = f"{message.sender_name} ({message.sender})" if message.sender_name else message.sender
    announcement = (
        f"New pairing request {code} from {who} in {message.chat_jid}: approve with "
        f"`postroom access approve {code}` or deny with `postroom access deny {code}`."
    )
    for chat in policy.notify:
        await post_notice(
            tx,
            chat,
            announcement,
            clock=clock,
            metadata={"source": "pairing_request", "code": code},
        )
    log.info("pairing.requested", code=code, chat_jid=message.chat_jid, sender=message.sender)
    return request


class AccessService:
    """Lists and changes principals and pairing requests."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        policy: AccessPolicy | None = None,
        signals: Signals | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._policy = policy or AccessPolicy()
        self._signals = signals or Signals()

    @property
    def policy(self) -> AccessPolicy:
        return self._policy

    async def list_principals(self) -> list[Principal]:
        """Stored principals, then the ``[owners] senders`` of the configuration (id ``None``)."""
        async with self._store.read() as tx:
            snapshot = await self._catalog.current(tx)
        stored = [p for p in snapshot.principals.principals if p.id is not None]
        configured = [p for p in snapshot.principals.principals if p.id is None]
        return sorted(stored, key=lambda p: p.id or 0) + configured

    async def list_pairings(self) -> list[PairingRequest]:
        """Pending, unexpired requests, oldest first."""
        async with self._store.read() as tx:
            return await tx.list_pairings(now=self._clock())

    async def add(
        self, pattern: str, *, role: str | Role = Role.MEMBER, note: str = "", actor: str
    ) -> Principal:
        """Give a sender glob a role; an existing principal of the same pattern changes role."""
        parsed = parse_principal_pattern(pattern)
        wanted = role if isinstance(role, Role) else parse_role(role)
        note = _note(note)
        async with self._store.write() as tx:
            principal = await self._put(tx, parsed, wanted, note=note, actor=actor, action="add")
        log.info("principal.added", pattern=parsed, role=wanted.value, actor=actor)
        return principal

    async def remove(self, principal_id: int, *, actor: str) -> Principal:
        """Remove a principal: its senders follow the policies again."""
        async with self._store.write() as tx:
            found = await tx.get_principal(principal_id)
            if found is None:
                raise NotFound(f"There is no principal {principal_id}.")
            await tx.delete_principal(principal_id)
            await tx.add_access_audit(
                at=self._clock(),
                actor=actor,
                action="remove",
                principal_id=principal_id,
                before=principal_to_dict(found),
            )
            await tx.bump_catalog_version()
        log.info("principal.removed", id=principal_id, actor=actor)
        return found

    async def approve(self, code: str, *, actor: str) -> Approval:
        """Approve a pending code: its sender becomes a ``member`` (that exact sender only)."""
        normalized = _code(code)
        now = self._clock()
        async with self._store.write() as tx:
            request = await tx.get_pairing(normalized, now=now)
            if request is None:
                raise NotFound(_no_request(normalized))
            principal = await self._put(
                tx,
                escape_glob(request.sender),
                Role.MEMBER,
                note=f"approved pairing {normalized}",
                actor=actor,
                action="approve",
                code=normalized,
            )
            await tx.close_pairing(normalized, denied=False)
            await post_notice(
                tx,
                request.chat_jid,
                APPROVED_NOTICE,
                clock=self._clock,
                metadata={"source": "pairing"},
            )
        self._signals.deliveries.wake()
        log.info("pairing.approved", code=normalized, sender=request.sender, actor=actor)
        return Approval(request, principal)

    async def deny(self, code: str, *, actor: str) -> PairingRequest:
        """Deny a pending code: the request is gone, and the chat gets no new code until the
        old one would have expired."""
        normalized = _code(code)
        async with self._store.write() as tx:
            request = await tx.get_pairing(normalized, now=self._clock())
            if request is None:
                raise NotFound(_no_request(normalized))
            await tx.close_pairing(normalized, denied=True)
            await tx.add_access_audit(
                at=self._clock(),
                actor=actor,
                action="deny",
                code=normalized,
                before=pairing_to_dict(request),
            )
        log.info("pairing.denied", code=normalized, sender=request.sender, actor=actor)
        return request

    async def _put(
        self,
        tx: StoreTx,
        pattern: str,
        role: Role,
        *,
        note: str,
        actor: str,
        action: str,
        code: str | None = None,
    ) -> Principal:
        now = self._clock()
        existing = await tx.find_principal(pattern)
        if existing is None:
            principal_id = await tx.insert_principal(
                pattern, role, note=note, created_at=now, created_by=actor
            )
        else:
            principal_id = existing.id or 0
            await tx.set_principal_role(principal_id, role, note=note or existing.note)
        principal = await tx.get_principal(principal_id)
        assert principal is not None
        await tx.add_access_audit(
            at=now,
            actor=actor,
            action=action,
            principal_id=principal_id,
            code=code,
            before=None if existing is None else principal_to_dict(existing),
            after=principal_to_dict(principal),
        )
        await tx.bump_catalog_version()
        return principal


def _code(text: str) -> str:
    normalized = normalize_code(text) if isinstance(text, str) else None
    if normalized is None:
        raise InvalidInput(
            f"{text!r} is not a pairing code; codes look like ABCD-2345 (8 letters and digits)."
        )
    return normalized


def _no_request(code: str) -> str:
    return f"There is no pending pairing request {code} (it may have expired, or been decided)."


def _note(text: str) -> str:
    if not isinstance(text, str):
        raise InvalidInput("The note must be text.")
    note = text.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(
            f"The note is {len(note)} characters long; the limit is {MAX_NOTE_CHARS}."
        )
    return note
