"""The in-memory catalog: the indexed route table, the folder registry and the principals.

Routing never re-reads the table from disk per message. Every route, folder or principal write
bumps a
counter in the database; before routing, the engine compares that counter with the one its
snapshot was built from (one indexed read inside the message's own transaction) and rebuilds
only when another writer — this process or the CLI in another — changed something.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from postroom.core.access import Principal, PrincipalTable, Role, escape_glob
from postroom.core.errors import InvalidInput
from postroom.core.folders import Folder, FolderDefaults, FolderSettings, effective_settings
from postroom.core.match import parse_match
from postroom.core.route_index import Route, RouteIndex
from postroom.core.target import parse_target
from postroom.store.protocol import StoreTx
from postroom.store.records import RouteRecord

__all__ = ["Catalog", "CatalogSnapshot", "parse_route"]

log = structlog.get_logger(__name__)


def parse_route(record: RouteRecord) -> Route:
    """A stored row as a domain route (raises InvalidInput if the stored text is bad)."""
    return Route(
        id=record.id,
        seq=record.seq,
        match=parse_match(record.match),
        target=parse_target(record.target),
        created_at=record.created_at,
        created_by=record.created_by,
    )


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """Routes and folders as of one catalog version."""

    version: int
    index: RouteIndex
    folders: Mapping[str, Folder]
    paths: frozenset[str] = field(default_factory=frozenset)
    #: Stored principals and ``[owners] senders`` (ROUTING §8).
    principals: PrincipalTable = field(default_factory=PrincipalTable)

    def settings(self, path: str, defaults: FolderDefaults) -> FolderSettings:
        return effective_settings(path, self.folders, defaults)


_EMPTY = CatalogSnapshot(-1, RouteIndex(()), {}, frozenset())


class Catalog:
    """Holds the current snapshot and refreshes it when the stored version moves."""

    def __init__(self, *, owners: Iterable[str] = ()) -> None:
        self._snapshot = _EMPTY
        #: ``[owners] senders``: owner principals that live in the configuration.
        self._owners = tuple(
            Principal(None, escape_glob(sender), Role.OWNER) for sender in owners if sender
        )

    @property
    def snapshot(self) -> CatalogSnapshot:
        return self._snapshot

    async def current(self, tx: StoreTx) -> CatalogSnapshot:
        """The snapshot for this transaction, rebuilt first if the catalog changed."""
        version = await tx.catalog_version()
        if version != self._snapshot.version:
            await self.reload(tx, version)
        return self._snapshot

    async def reload(self, tx: StoreTx, version: int | None = None) -> CatalogSnapshot:
        if version is None:
            version = await tx.catalog_version()
        routes: list[Route] = []
        for record in await tx.list_routes():
            try:
                routes.append(parse_route(record))
            except InvalidInput as exc:
                # Only possible if someone edited the database by hand: skip the row loudly
                # rather than refuse to route anything.
                log.error("route.unreadable", route_id=record.id, error=str(exc))
        folders = {folder.path: folder for folder in await tx.list_folders()}
        principals = PrincipalTable([*await tx.list_principals(), *self._owners])
        self._snapshot = CatalogSnapshot(
            version, RouteIndex(routes), folders, frozenset(folders), principals
        )
        return self._snapshot
