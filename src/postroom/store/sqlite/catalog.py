"""Statements on the catalog: routes and their audit log, folders, the change counter."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from postroom.core.folders import BusyPolicy, Folder, Role, Session
from postroom.store.records import FolderAuditRecord, RouteAuditRecord, RouteRecord, RouteSpec
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import dump_json, from_iso, load_json, to_iso

__all__ = ["CatalogStatements"]

_FOLDER_COLUMNS = (
    "path, persona, provider, model, engagement_ttl_s, busy_policy, session, role, tools, "
    "mirror, inherits, created_at, created_by, budget_per_day, updated_at, file_stamp"
)


class CatalogStatements(Statements):
    # -- catalog ------------------------------------------------------------------------------
    async def catalog_version(self) -> int:
        row = await self._one("SELECT value FROM meta WHERE key = 'catalog_version'")
        return int(row[0]) if row else 0

    async def bump_catalog_version(self) -> int:
        row = await self._one(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
            "WHERE key = 'catalog_version' RETURNING value"
        )
        return int(row[0])

    async def list_routes(self) -> list[RouteRecord]:
        rows = await self._all(
            "SELECT id, seq, match, target, created_at, created_by FROM routes ORDER BY seq, id"
        )
        return [_route(row) for row in rows]

    async def get_route(self, route_id: int) -> RouteRecord | None:
        row = await self._one(
            "SELECT id, seq, match, target, created_at, created_by FROM routes WHERE id = ?",
            (route_id,),
        )
        return _route(row) if row else None

    async def insert_route(self, spec: RouteSpec, *, created_at: datetime, created_by: str) -> int:
        row = await self._one(
            "INSERT INTO routes (seq, match, target, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (spec.seq, spec.match, spec.target, to_iso(created_at), created_by),
        )
        return int(row[0])

    async def delete_routes(self, route_ids: Iterable[int]) -> None:
        await self._many("DELETE FROM routes WHERE id = ?", [(rid,) for rid in route_ids])

    async def add_route_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        route_id: int | None,
        before: Any,
        after: Any,
    ) -> None:
        await self._run(
            "INSERT INTO route_audit (at, actor, action, route_id, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                to_iso(at),
                actor,
                action,
                route_id,
                None if before is None else dump_json(before),
                None if after is None else dump_json(after),
            ),
        )

    async def list_route_audit(self, *, limit: int) -> list[RouteAuditRecord]:
        rows = await self._all(
            "SELECT id, at, actor, action, route_id, before, after FROM route_audit "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [
            RouteAuditRecord(
                id=row[0],
                at=from_iso(row[1]),
                actor=row[2],
                action=row[3],
                route_id=row[4],
                before=load_json(row[5]),
                after=load_json(row[6]),
            )
            for row in rows
        ]

    async def list_folders(self) -> list[Folder]:
        rows = await self._all(f"SELECT {_FOLDER_COLUMNS} FROM folders ORDER BY path")
        return [_folder(row) for row in rows]

    async def get_folder(self, path: str) -> Folder | None:
        row = await self._one(f"SELECT {_FOLDER_COLUMNS} FROM folders WHERE path = ?", (path,))
        return _folder(row) if row else None

    async def insert_folder(self, folder: Folder) -> None:
        created = to_iso(folder.created_at or datetime.now(UTC))
        await self._run(
            "INSERT INTO folders (path, parent, persona, provider, model, engagement_ttl_s, "
            "busy_policy, session, role, tools, mirror, budget_per_day, file_stamp, inherits, "
            "created_at, created_by, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                folder.path,
                folder.parent,
                *_settings(folder),
                int(folder.inherits),
                created,
                folder.created_by,
                to_iso(folder.updated_at) if folder.updated_at else created,
            ),
        )

    async def update_folder(self, folder: Folder) -> None:
        await self._run(
            "UPDATE folders SET persona = ?, provider = ?, model = ?, engagement_ttl_s = ?, "
            "busy_policy = ?, session = ?, role = ?, tools = ?, mirror = ?, budget_per_day = ?, "
            "file_stamp = ?, updated_at = ? WHERE path = ?",
            (
                *_settings(folder),
                to_iso(folder.updated_at or datetime.now(UTC)),
                folder.path,
            ),
        )

    async def delete_folder(self, path: str) -> None:
        await self._run("DELETE FROM folders WHERE path = ?", (path,))

    async def add_folder_audit(
        self, *, at: datetime, actor: str, action: str, folder: str, before: Any, after: Any
    ) -> None:
        await self._run(
            "INSERT INTO folder_audit (at, actor, action, folder, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                to_iso(at),
                actor,
                action,
                folder,
                None if before is None else dump_json(before),
                None if after is None else dump_json(after),
            ),
        )

    async def list_folder_audit(self, *, folder: str | None, limit: int) -> list[FolderAuditRecord]:
        where, params = ("WHERE folder = ? ", [folder]) if folder is not None else ("", [])
        rows = await self._all(
            "SELECT id, at, actor, action, folder, before, after FROM folder_audit "
            f"{where}ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            FolderAuditRecord(
                row[0],
                from_iso(row[1]),
                row[2],
                row[3],
                row[4],
                load_json(row[5]),
                load_json(row[6]),
            )
            for row in rows
        ]


def _settings(folder: Folder) -> tuple[Any, ...]:
    """The setting columns, in the order both statements write them."""
    return (
        folder.persona,
        folder.provider,
        folder.model,
        folder.engagement_ttl_s,
        _enum(folder.busy_policy),
        _enum(folder.session),
        _enum(folder.role),
        None if folder.tools is None else dump_json(list(folder.tools)),
        None if folder.mirror is None else dump_json(list(folder.mirror)),
        folder.budget_per_day,
        folder.file_stamp,
    )


def _enum(value: Enum | None) -> Any:
    return None if value is None else value.value


def _route(row: Any) -> RouteRecord:
    return RouteRecord(row[0], row[1], row[2], row[3], from_iso(row[4]), row[5])


def _tuple_or_none(text: str | None) -> tuple[str, ...] | None:
    value = load_json(text)
    if value is None:
        return None
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _folder(row: Any) -> Folder:
    return Folder(
        path=row[0],
        persona=row[1],
        provider=row[2],
        model=row[3],
        engagement_ttl_s=row[4],
        busy_policy=BusyPolicy(row[5]) if row[5] else None,
        session=Session(row[6]) if row[6] else None,
        role=Role(row[7]) if row[7] else None,
        tools=_tuple_or_none(row[8]),
        mirror=_tuple_or_none(row[9]),
        inherits=bool(row[10]),
        created_at=from_iso(row[11]),
        created_by=row[12],
        budget_per_day=row[13],
        updated_at=from_iso(row[14]) if row[14] else None,
        file_stamp=row[15],
    )
