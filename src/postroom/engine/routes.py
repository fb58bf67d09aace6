"""The route tools (ROUTING §6): the one place the route table is written.

CLI, HTTP API, MCP server and dashboard all call these functions, so every write is validated
the same way (§2.1), audited (who, when, before, after) and seen by routing on the next message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postroom.core.annotate import annotate_routes
from postroom.core.errors import InvalidInput, NotFound
from postroom.core.folders import is_within
from postroom.core.match import parse_match
from postroom.core.route_index import Route, RouteIndex
from postroom.core.target import parse_target
from postroom.engine.catalog import Catalog, parse_route
from postroom.engine.clock import Clock
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import RouteRecord, RouteSpec

__all__ = ["RouteService", "RouteView", "parse_seq", "validate_route"]

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
    """Reads and writes of the route table."""

    def __init__(self, *, store: Store, catalog: Catalog, clock: Clock) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock

    async def list_routes(self) -> list[RouteView]:
        async with self._store.read() as tx:
            records = await tx.list_routes()
        return annotate(records)

    async def add_route(self, seq: Any, match: Any, target: Any, *, actor: str) -> int:
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            spec = validate_route(seq, match, target, snapshot.paths)
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

    async def delete_route(self, route_id: int, *, actor: str) -> RouteRecord:
        async with self._store.write() as tx:
            record = await tx.get_route(route_id)
            if record is None:
                raise NotFound(f"There is no route with id {route_id}.")
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
        scope: str | None = None,
    ) -> list[RouteView]:
        """Replace the whole table atomically — or, with *scope*, only the rows whose target
        lies under that folder (and then every new row must target inside it too)."""
        if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
            raise InvalidInput("set_routes takes a list of {seq, match, target} objects.")
        async with self._store.write() as tx:
            snapshot = await self._catalog.current(tx)
            specs: list[RouteSpec] = []
            for position, row in enumerate(rows, start=1):
                if not isinstance(row, Mapping):
                    raise InvalidInput(
                        f"Route {position} is not an object with seq, match, target."
                    )
                unknown = set(row) - {"seq", "match", "target", "id"}
                if unknown:
                    raise InvalidInput(
                        f"Route {position} has unknown field(s) {', '.join(sorted(unknown))}; "
                        "expected seq, match, target."
                    )
                if "seq" not in row or "target" not in row:
                    raise InvalidInput(f"Route {position} needs both seq and target.")
                try:
                    spec = validate_route(
                        row["seq"], row.get("match", ""), row["target"], snapshot.paths
                    )
                except InvalidInput as exc:
                    raise InvalidInput(f"Route {position}: {exc}") from exc
                if scope is not None and not _target_within(spec.target, scope):
                    raise InvalidInput(f"Route {position} targets {spec.target}, outside {scope}.")
                specs.append(spec)
            before = await tx.list_routes()
            replaced = [r for r in before if scope is None or _target_within(r.target, scope)]
            await tx.delete_routes(r.id for r in replaced)
            now = self._clock()
            for spec in specs:
                await tx.insert_route(spec, created_at=now, created_by=actor)
            after = await tx.list_routes()
            await tx.add_route_audit(
                at=now,
                actor=actor,
                action="set" if scope is None else f"set:{scope}",
                route_id=None,
                before=[_record_dict(r) for r in before],
                after=[_record_dict(r) for r in after],
            )
            await self._changed(tx)
        return annotate(after)

    async def _changed(self, tx: StoreTx) -> None:
        version = await tx.bump_catalog_version()
        await self._catalog.reload(tx, version)


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
