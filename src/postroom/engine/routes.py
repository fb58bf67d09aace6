"""The route tools (ROUTING §6): the one place the route table is written.

CLI, HTTP API, MCP server and dashboard all call these functions, so every write is validated
the same way (§2.1), audited (who, when, before, after) and seen by routing on the next message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postroom.core.annotate import annotate_routes
from postroom.core.errors import Forbidden, InvalidInput, NotFound
from postroom.core.folders import is_within
from postroom.core.match import parse_match
from postroom.core.route_index import Route, RouteIndex
from postroom.core.target import parse_target
from postroom.core.trigger import Trigger
from postroom.engine.catalog import Catalog, CatalogSnapshot, parse_route
from postroom.engine.clock import Clock
from postroom.engine.preview import RoutePreview, preview_limit, preview_traffic
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import RouteRecord, RouteSpec

__all__ = [
    "RouteService",
    "RouteView",
    "parse_seq",
    "route_warnings",
    "validate_route",
    "validate_rows",
]

SEQ_LIMIT = 2**31


@dataclass(frozen=True, slots=True)
class RouteView:
    """A route row as ``list_routes`` shows it: with mode, fires_on and shadowed_by."""

    id: int
    seq: int
    match: str
    target: str
    mode: str
    fires_on: str
    shadowed_by: int | None
    created_at: datetime | None
    created_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "match": self.match,
            "target": self.target,
            "mode": self.mode,
            "fires_on": self.fires_on,
            "shadowed_by": self.shadowed_by,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "created_by": self.created_by,
        }


def parse_seq(value: Any) -> int:
    """A seq from JSON or the command line: an integer, negative allowed."""
    if isinstance(value, bool):
        raise InvalidInput("seq must be an integer, not a boolean.")
    if isinstance(value, int):
        seq = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        seq = int(value.strip())
    else:
        raise InvalidInput(f"seq must be an integer, not {value!r}.")
    if not -SEQ_LIMIT < seq < SEQ_LIMIT:
        raise InvalidInput(f"seq {seq} is out of range (±{SEQ_LIMIT - 1}).")
    return seq


def validate_route(seq: Any, match: Any, target: Any, folders: Iterable[str]) -> RouteSpec:
    """Check one route against the grammar and the folders; return it in normal form."""
    number = parse_seq(seq)
    if match is None:
        match = ""
    expression = parse_match(match)
    parsed = parse_target(target)
    existing = set(folders)
    template_parent = parsed.template_parent
    if template_parent is None:
        if parsed.folder not in existing:
            raise InvalidInput(
                f"Target folder {parsed.folder} does not exist; create it first "
                f"(postroom folders add {parsed.folder})."
            )
    elif template_parent and template_parent not in existing:
        raise InvalidInput(
            f"Template parent {template_parent} of target {parsed} does not exist; create it "
            f"first (postroom folders add {template_parent})."
        )
    return RouteSpec(number, str(expression), str(parsed))


def _spec_dict(spec: RouteSpec, route_id: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": spec.seq, "match": spec.match, "target": spec.target}
    if route_id is not None:
        out = {"id": route_id, **out}
    return out


def _record_dict(record: RouteRecord) -> dict[str, Any]:
    return _spec_dict(record.to_spec(), record.id)


class RouteService:
    """Reads and writes of the route table, and previews of writes.

    ``within`` confines a call to the rows whose target lies under one folder (a conductor's
    own tree, a token confined to a folder): it sees only those rows and may change only them.
    """

    def __init__(
        self, *, store: Store, catalog: Catalog, clock: Clock, trigger: Trigger | None = None
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._trigger = trigger or Trigger()

    async def list_routes(self, *, within: str | None = None) -> list[RouteView]:
        async with self._store.read() as tx:
            records = await tx.list_routes()
        views = annotate(records)
        return [v for v in views if within is None or _target_within(v.target, within)]

    async def add_route(
        self, seq: Any, match: Any, target: Any, *, actor: str, within: str | None = None
    ) -> int:
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            spec = _confined(validate_route(seq, match, target, snapshot.paths), within)
            now = self._clock()
            route_id = await tx.insert_route(spec, created_at=now, created_by=actor)
            await tx.add_route_audit(
                at=now,
                actor=actor,
                action="add",
                route_id=route_id,
                before=None,
                after=_spec_dict(spec, route_id),
            )
            await self._changed(tx)
        return route_id

    async def delete_route(
        self, route_id: int, *, actor: str, within: str | None = None
    ) -> RouteRecord:
        async with self._store.write() as tx:
            record = await _existing(tx, route_id, within)
            await tx.delete_routes([route_id])
            await tx.add_route_audit(
                at=self._clock(),
                actor=actor,
                action="delete",
                route_id=route_id,
                before=_record_dict(record),
                after=None,
            )
            await self._changed(tx)
        return record

    async def set_routes(
        self,
        rows: object,
        *,
        actor: str,
        within: str | None = None,
    ) -> list[RouteView]:
        """Replace the whole table atomically — or, *within* a folder, only the rows whose
        target lies under it (and then every new row must target inside it too)."""
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            specs = validate_rows(rows, snapshot.paths, within)
            before = await tx.list_routes()
            replaced = [r for r in before if within is None or _target_within(r.target, within)]
            await tx.delete_routes(r.id for r in replaced)
            now = self._clock()
            for spec in specs:
                await tx.insert_route(spec, created_at=now, created_by=actor)
            after = await tx.list_routes()
            await tx.add_route_audit(
                at=now,
                actor=actor,
                action="set" if within is None else f"set:{within}",
                route_id=None,
                before=[_record_dict(r) for r in before],
                after=[_record_dict(r) for r in after],
            )
            await self._changed(tx)
        return annotate(after)

    # -- previews: the same validation as the writes, nothing written ---------------------------
    async def preview_routes(
        self, rows: object, *, within: str | None = None, limit: Any = None
    ) -> RoutePreview:
        """What :meth:`set_routes` with *rows* would do to the last *limit* real messages."""
        count = preview_limit(limit)
        async with self._store.read() as tx:
            snapshot = await self._catalog.current(tx)
            specs = validate_rows(rows, snapshot.paths, within)
            return await self._preview(
                tx,
                snapshot,
                keep=lambda r: within is not None and not _target_within(r.target_text, within),
                added=specs,
                within=within,
                limit=count,
            )

    async def preview_add(
        self, seq: Any, match: Any, target: Any, *, within: str | None = None, limit: Any = None
    ) -> RoutePreview:
        """What :meth:`add_route` would do (a dry run)."""
        count = preview_limit(limit)
        async with self._store.read() as tx:
            snapshot = await self._catalog.current(tx)
            spec = _confined(validate_route(seq, match, target, snapshot.paths), within)
            return await self._preview(
                tx, snapshot, keep=lambda _r: True, added=[spec], within=within, limit=count
            )

    async def preview_delete(
        self, route_id: int, *, within: str | None = None, limit: Any = None
    ) -> RoutePreview:
        """What :meth:`delete_route` would do (a dry run)."""
        count = preview_limit(limit)
        async with self._store.read() as tx:
            await _existing(tx, route_id, within)
            snapshot = await self._catalog.current(tx)
            return await self._preview(
                tx, snapshot, keep=lambda r: r.id != route_id, added=[], within=within, limit=count
            )

    async def _preview(
        self,
        tx: StoreTx,
        snapshot: CatalogSnapshot,
        *,
        keep: Callable[[Route], bool],
        added: Sequence[RouteSpec],
        within: str | None,
        limit: int,
    ) -> RoutePreview:
        current = snapshot.index
        kept = [route for route in current.routes if keep(route)]
        # New rows sort after every existing row of the same seq, as inserted rows would.
        next_id = max((route.id for route in current.routes), default=0) + 1
        fresh = [
            Route(next_id + n, spec.seq, parse_match(spec.match), parse_target(spec.target))
            for n, spec in enumerate(added)
        ]
        return await preview_traffic(
            tx,
            current=current,
            proposed=RouteIndex([*kept, *fresh]),
            folders=snapshot.paths,
            trigger=self._trigger,
            now=self._clock(),
            limit=limit,
            visible=None
            if within is None
            else lambda folder: folder is not None and is_within(folder, within),
        )

    async def _changed(self, tx: StoreTx) -> None:
        version = await tx.bump_catalog_version()
        await self._catalog.reload(tx, version)


def validate_rows(rows: object, folders: Iterable[str], within: str | None) -> list[RouteSpec]:
    """A whole proposed table (or the rows *within* a folder), each row validated."""
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
        raise InvalidInput("set_routes takes a list of {seq, match, target} objects.")
    paths = set(folders)
    return [_row_spec(position, row, paths, within) for position, row in enumerate(rows, 1)]


def _confined(spec: RouteSpec, within: str | None) -> RouteSpec:
    if within is not None and not _target_within(spec.target, within):
        raise Forbidden(
            f"Target {spec.target} lies outside {within}; only routes to {within} and the "
            "folders under it may be changed here."
        )
    return spec


async def _existing(tx: StoreTx, route_id: int, within: str | None) -> RouteRecord:
    record = await tx.get_route(route_id)
    if record is None:
        raise NotFound(f"There is no route with id {route_id}.")
    if within is not None and not _target_within(record.target, within):
        raise Forbidden(
            f"Route {route_id} targets {record.target}, outside {within}; only routes to "
            f"{within} and the folders under it may be changed here."
        )
    return record


def _row_spec(position: int, row: object, folders: Iterable[str], within: str | None) -> RouteSpec:
    """One row of a ``set_routes`` table, validated; a refusal names the row by its position
    in the list and by what it says (ids change with every set, so they name nothing)."""
    where = f"Row {position} of the table ({_row_text(row)})"
    if not isinstance(row, Mapping):
        raise InvalidInput(f"{where} is not an object with seq, match, target.")
    unknown = set(row) - {"seq", "match", "target", "id"}
    if unknown:
        raise InvalidInput(
            f"{where} has unknown field(s) {', '.join(sorted(unknown))}; expected seq, match, "
            "target."
        )
    if "seq" not in row or "target" not in row:
        raise InvalidInput(f"{where} needs both seq and target.")
    try:
        spec = validate_route(row["seq"], row.get("match", ""), row["target"], folders)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from exc
    if within is not None and not _target_within(spec.target, within):
        raise Forbidden(f"{where} targets {spec.target}, outside {within}.")
    return spec


def _row_text(row: object, limit: int = 80) -> str:
    if isinstance(row, Mapping):
        parts = [f"{key} {row[key]!r}" for key in ("seq", "match", "target") if key in row]
        text = ", ".join(parts) or "no seq, match or target"
    else:
        text = repr(row)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def route_warnings(views: Sequence[RouteView], route_id: int) -> list[str]:
    """What is suspicious about row *route_id* of the table: an earlier row that matches every
    message it could match (so it never fires), or another row saying the same thing."""
    by_id = {view.id: view for view in views}
    row = by_id.get(route_id)
    if row is None:
        return []
    out: list[str] = []
    same = [v for v in views if v.id != route_id and (v.match, v.target) == (row.match, row.target)]
    for twin in same:
        out.append(f"route {route_id} duplicates row {_described(twin)}")
    shadow = by_id.get(row.shadowed_by) if row.shadowed_by is not None else None
    if shadow is not None and shadow not in same:
        out.append(
            f"route {route_id} never fires: row {_described(shadow)} comes first and matches "
            "every message it would"
        )
    return out


def _described(view: RouteView) -> str:
    return f"{view.id} (seq {view.seq}, {view.match or 'every message'} → {view.target})"


def _target_within(target: str, scope: str) -> bool:
    folder = target.partition("#")[0]
    return is_within(folder, scope)


def annotate(records: Sequence[RouteRecord]) -> list[RouteView]:
    """Stored rows with their ``list_routes`` annotations, in table order."""
    routes: list[Route] = [parse_route(r) for r in records]
    by_id = {r.id: r for r in records}
    views: list[RouteView] = []
    for note in annotate_routes(RouteIndex(routes)):
        record = by_id[note.route.id]
        views.append(
            RouteView(
                id=record.id,
                seq=record.seq,
                match=record.match,
                target=record.target,
                mode=note.mode.value,
                fires_on=note.fires_on,
                shadowed_by=note.shadowed_by,
                created_at=record.created_at,
                created_by=record.created_by,
            )
        )
    return views
