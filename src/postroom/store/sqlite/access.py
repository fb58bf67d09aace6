"""Statements on admission: principals, pairing requests, their audit, and daily budgets."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from postroom.core.access import PairingState, Principal, Role
from postroom.store.records import PairingRequest
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["AccessStatements"]

_PRINCIPAL = "id, pattern, role, note, created_at, created_by"
_PAIRING = "code, platform, chat_jid, sender, sender_name, created_at, expires_at, status"


class AccessStatements(Statements):
    # -- principals -------------------------------------------------------------------------
    async def list_principals(self) -> list[Principal]:
        rows = await self._all(f"SELECT {_PRINCIPAL} FROM principals ORDER BY id")
        return [_principal(row) for row in rows]

    async def get_principal(self, principal_id: int) -> Principal | None:
        row = await self._one(f"SELECT {_PRINCIPAL} FROM principals WHERE id = ?", (principal_id,))
        return None if row is None else _principal(row)

    async def find_principal(self, pattern: str) -> Principal | None:
        row = await self._one(f"SELECT {_PRINCIPAL} FROM principals WHERE pattern = ?", (pattern,))
        return None if row is None else _principal(row)

    async def insert_principal(
        self, pattern: str, role: Role, *, note: str, created_at: datetime, created_by: str
    ) -> int:
        row = await self._one(
            "INSERT INTO principals (pattern, role, note, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (pattern, role.value, note, to_iso(created_at), created_by),
        )
        assert row is not None
        return int(row[0])

    async def set_principal_role(self, principal_id: int, role: Role, *, note: str) -> None:
        await self._run(
            "UPDATE principals SET role = ?, note = ? WHERE id = ?",
            (role.value, note, principal_id),
        )

    async def delete_principal(self, principal_id: int) -> bool:
        return await self._run("DELETE FROM principals WHERE id = ?", (principal_id,)) > 0

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
    ) -> None:
        await self._run(
            "INSERT INTO access_audit (time, actor, action, principal_id, code, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                to_iso(at),
                actor,
                action,
                principal_id,
                code,
                None if before is None else json.dumps(before),
                None if after is None else json.dumps(after),
            ),
        )

    # -- pairing ----------------------------------------------------------------------------
    async def pairing_state(self, chat_jid: str, platform: str, *, now: datetime) -> PairingState:
        moment = to_iso(now)
        held = await self._one(
            "SELECT 1 FROM pairing_requests WHERE chat_jid = ? AND expires_at > ? LIMIT 1",
            (chat_jid, moment),
        )
        pending = await self._one(
            "SELECT COUNT(*) FROM pairing_requests "
            "WHERE platform = ? AND status = 'pending' AND expires_at > ?",
            (platform, moment),
        )
        return PairingState(held is not None, int(pending[0]) if pending else 0)

    async def insert_pairing(self, request: PairingRequest) -> None:
        # Expired requests go as new ones come: the table stays as small as the live codes.
        await self._run(
            "DELETE FROM pairing_requests WHERE expires_at <= ?", (to_iso(request.created_at),)
        )
        await self._run(
            f"INSERT INTO pairing_requests ({_PAIRING}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request.code,
                request.platform,
                request.chat_jid,
                request.sender,
                request.sender_name,
                to_iso(request.created_at),
                to_iso(request.expires_at),
                request.status,
            ),
        )

    async def code_in_use(self, code: str) -> bool:
        return await self._one("SELECT 1 FROM pairing_requests WHERE code = ?", (code,)) is not None

    async def list_pairings(self, *, now: datetime) -> list[PairingRequest]:
        rows = await self._all(
            f"SELECT {_PAIRING} FROM pairing_requests WHERE status = 'pending' AND expires_at > ? "
            "ORDER BY created_at, code",
            (to_iso(now),),
        )
        return [_pairing(row) for row in rows]

    async def get_pairing(self, code: str, *, now: datetime) -> PairingRequest | None:
        row = await self._one(
            f"SELECT {_PAIRING} FROM pairing_requests "
            "WHERE code = ? AND status = 'pending' AND expires_at > ?",
            (code, to_iso(now)),
        )
        return None if row is None else _pairing(row)

    async def close_pairing(self, code: str, *, denied: bool) -> None:
        if denied:
            await self._run("UPDATE pairing_requests SET status = 'denied' WHERE code = ?", (code,))
        else:
            await self._run("DELETE FROM pairing_requests WHERE code = ?", (code,))

    # -- budgets ----------------------------------------------------------------------------
    async def cost_since(self, folder: str, since: datetime) -> tuple[float, int]:
        """The priced cost of the runs of *folder* and every folder under it since *since*,
        and how many of those runs used tokens that have no price (a failed call reports no
        usage and costs nothing)."""
        row = await self._one(
            # COUNT(CASE …): a count of a condition in the SQL of both engines.
            "SELECT COALESCE(SUM(cost), 0), "
            "COUNT(CASE WHEN cost IS NULL AND usage IS NOT NULL THEN 1 END) FROM runs "
            "WHERE started_at >= ? AND (folder = ? OR (folder >= ? AND folder < ?))",
            (to_iso(since), folder, folder + "/", folder + "0"),
        )
        assert row is not None
        return float(row[0]), int(row[1])

    async def claim_budget_notice(
        self, chat_jid: str, folder: str, *, now: datetime, interval_s: float
    ) -> bool:
        row = await self._one(
            "SELECT notified_at FROM budget_notices WHERE chat_jid = ? AND folder = ?",
            (chat_jid, folder),
        )
        if row is not None and (now - from_iso(row[0])).total_seconds() < interval_s:
            return False
        await self._run(
            "INSERT INTO budget_notices (chat_jid, folder, notified_at) VALUES (?, ?, ?) "
            "ON CONFLICT (chat_jid, folder) DO UPDATE SET notified_at = excluded.notified_at",
            (chat_jid, folder, to_iso(now)),
        )
        return True


def _principal(row: Any) -> Principal:
    return Principal(row[0], row[1], Role(row[2]), row[3], from_iso(row[4]), row[5])


def _pairing(row: Any) -> PairingRequest:
    return PairingRequest(
        row[0], row[1], row[2], row[3], row[4], from_iso(row[5]), from_iso(row[6]), row[7]
    )
