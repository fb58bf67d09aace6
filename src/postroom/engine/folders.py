"""Folder writes: the one place folders are created, changed and removed.

A folder is an agent: a database row — the source of truth for its persona and settings — and a
directory ``DIR/folders/<path>/`` whose ``AGENT.md`` mirrors the row. Every write is validated
(:func:`postroom.core.folder_settings.parse_settings`), audited, bumps the catalog version (so
every process sees it before it routes or runs anything) and rewrites ``AGENT.md``.

An edit a person makes to ``AGENT.md`` is noticed by the file's stamp (one ``stat``): before
the folder's next turn, when the server starts, and before any other write to the folder. It is
validated like any write and imported; an invalid edit is logged once, reported by ``postroom
doctor``, and not applied (a write through another surface is refused until it is fixed, so
the edit is never silently overwritten).

Adding ``a/b`` creates a missing ``a``. Removing is refused while a route targets the folder,
while it is a template parent, or while it has sub-folders; the directory is moved to
``DIR/removed/`` rather than deleted, so nothing a person wrote there is lost.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import structlog

from postroom.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from postroom.core.folder_settings import (
    BUILTIN_PROVIDERS,
    SETTING_KEYS,
    parse_settings,
    settings_of,
)
from postroom.core.folders import Folder, ancestors, is_within, validate_folder
from postroom.core.target import parse_target
from postroom.engine.agent_file import (
    FRONT_MATTER_KEYS,
    file_stamp,
    parse_agent_file,
    render_agent_file,
    write_agent_file,
)
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.files import make_private_dir
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import FolderAuditRecord

__all__ = [
    "AGENT_FILE",
    "FILE_ACTOR",
    "FileProblem",
    "FolderService",
    "FolderSpec",
    "folder_to_dict",
]

log = structlog.get_logger(__name__)

AGENT_FILE = "AGENT.md"
#: The actor of an edit imported from ``AGENT.md``.
FILE_ACTOR = "file:AGENT.md"


@dataclass(frozen=True, slots=True)
class FolderSpec:
    """Settings given when adding a folder, as written by a person (``None`` = not given)."""

    persona: str | None = None
    provider: str | None = None
    model: str | None = None
    engagement_ttl: str | None = None
    busy_policy: str | None = None
    session: str | None = None
    role: str | None = None
    tools: tuple[str, ...] | None = None
    mirror: tuple[str, ...] | None = None
    budget_per_day: float | str | None = None

    def changes(self) -> dict[str, Any]:
        """The settings given, under their public keys."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass(frozen=True, slots=True)
class FileProblem:
    """An ``AGENT.md`` that does not agree with its row: invalid, or edited and not yet read."""

    folder: str
    detail: str
    #: Only waiting to be imported (valid); otherwise invalid and not applied.
    pending: bool


def folder_to_dict(folder: Folder) -> dict[str, Any]:
    """The public folder object (INTERFACES §4)."""
    return {
        "path": folder.path,
        **settings_of(folder),
        "inherits": folder.inherits,
        "parent": folder.parent,
        "created_at": folder.created_at.isoformat() if folder.created_at else None,
        "updated_at": folder.updated_at.isoformat() if folder.updated_at else None,
    }


class FolderService:
    """Creates, changes, lists and removes folders, and keeps ``AGENT.md`` in step."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        folders_dir: Path,
        providers: Collection[str] = BUILTIN_PROVIDERS,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._folders_dir = folders_dir
        self._providers = frozenset(providers)
        #: The stamp of each invalid ``AGENT.md`` already logged: one log line per bad edit.
        self._reported: dict[str, str] = {}

    def directory(self, path: str) -> Path:
        return self._folders_dir.joinpath(*path.split("/"))

    def agent_file(self, path: str) -> Path:
        return self.directory(path) / AGENT_FILE

    async def list_folders(self, *, within: str | None = None) -> list[Folder]:
        """Every folder, or those *within* one folder's tree."""
        async with self._store.read() as tx:
            folders = await tx.list_folders()
        return [f for f in folders if within is None or is_within(f.path, within)]

    async def get_folder(self, path: str, *, within: str | None = None) -> Folder:
        _confined(path, within)
        async with self._store.read() as tx:
            folder = await tx.get_folder(path)
        if folder is None:
            raise NotFound(f"There is no folder {path}.")
        return folder

    async def show(self, path: str, *, within: str | None = None) -> Folder:
        """One folder as it is now: an edit of its ``AGENT.md`` is imported first."""
        validate_folder(path)
        _confined(path, within)
        await self.import_edits(path)
        return await self.get_folder(path)

    async def history(self, path: str | None = None, *, limit: int = 20) -> list[FolderAuditRecord]:
        """Who changed folders (or one folder), newest first."""
        async with self._store.read() as tx:
            return await tx.list_folder_audit(folder=path, limit=limit)

    async def add_folder(
        self, path: str, spec: FolderSpec, *, actor: str, within: str | None = None
    ) -> Folder:
        """Create *path* (and its missing parents) with the given settings; an ``AGENT.md``
        already in its directory gives what *spec* leaves out."""
        validate_folder(path)
        _confined(path, within)
        given = parse_settings(spec.changes(), providers=self._providers)
        async with self._store.write() as tx:
            if await tx.get_folder(path) is not None:
                raise Conflict(f"Folder {path} already exists.")
            for parent in ancestors(path):
                if await tx.get_folder(parent) is None:
                    await self._insert(tx, parent, {}, actor=actor)
            folder = await self._insert(tx, path, given, actor=actor)
            await self._changed(tx)
        log.info("folder.added", folder=path, actor=actor)
        return folder

    async def update(
        self, path: str, changes: Mapping[str, Any], *, actor: str, within: str | None = None
    ) -> Folder:
        """Change the settings in *changes* (public keys; ``None`` unsets one); the change
        takes effect on the folder's next turn.

        Validated like every write, audited, and mirrored to ``AGENT.md``. An edit of the file
        not yet imported is imported first; an invalid one refuses the write.
        """
        validate_folder(path)
        _confined(path, within)
        values = parse_settings(changes, providers=self._providers)
        if not values:
            raise InvalidInput(
                f"Nothing to change in folder {path}; give one of {', '.join(SETTING_KEYS)}."
            )
        async with self._store.write() as tx:
            current = await tx.get_folder(path)
            if current is None:
                raise NotFound(f"There is no folder {path}.")
            current = await self._absorb_edit(tx, current)
            updated = await self._apply(tx, current, values, actor=actor, action="update")
        log.info("folder.updated", folder=path, actor=actor, changed=sorted(changes))
        return updated

    async def import_edits(self, path: str | None = None) -> list[str]:
        """Import edited ``AGENT.md`` files: of *path* and the folders whose settings it
        inherits, or of every folder. One ``stat`` per folder when nothing changed; returns
        the folders whose rows changed. Reads the catalog version first, so the caller's
        snapshot also has every write another process made."""
        async with self._store.read() as tx:
            snapshot = await self._catalog.current(tx)
        paths = sorted(snapshot.folders) if path is None else _chain(path, snapshot.folders)
        imported: list[str] = []
        for candidate in paths:
            folder = snapshot.folders[candidate]
            stamp = file_stamp(self.agent_file(candidate))
            if stamp is not None and stamp != folder.file_stamp and await self._import(candidate):
                imported.append(candidate)
        return imported

    async def file_problems(self) -> list[FileProblem]:
        """Every ``AGENT.md`` that is invalid, or edited and not yet imported (for ``postroom
        doctor``); reads nothing but the files that changed."""
        problems: list[FileProblem] = []
        for folder in await self.list_folders():
            file = self.agent_file(folder.path)
            stamp = file_stamp(file)
            if stamp is None or stamp == folder.file_stamp:
                continue
            try:
                self._read_file(folder.path)
            except InvalidInput as exc:
                problems.append(FileProblem(folder.path, f"{exc} It is not applied.", False))
                continue
            problems.append(
                FileProblem(
                    folder.path,
                    f"{self._shown(folder.path)} was edited; the server imports it before the "
                    "folder's next turn.",
                    True,
                )
            )
        return problems

    async def remove_folder(self, path: str, *, actor: str, within: str | None = None) -> Folder:
        """Remove a folder no route and no sub-folder depends on."""
        validate_folder(path)
        _confined(path, within)
        async with self._store.write() as tx:
            folder = await tx.get_folder(path)
            if folder is None:
                raise NotFound(f"There is no folder {path}.")
            blocking: list[str] = []
            for record in await tx.list_routes():
                target = parse_target(record.target)
                if target.folder == path:
                    blocking.append(f"{record.id} (targets it)")
                elif target.template_parent == path:
                    blocking.append(f"{record.id} (uses it as the {{sender}} template parent)")
            if blocking:
                raise Conflict(
                    f"Folder {path} is used by route(s) {', '.join(blocking)}; remove or change "
                    "them first."
                )
            children = [f.path for f in await tx.list_folders() if f.parent == path]
            if children:
                raise Conflict(
                    f"Folder {path} has sub-folder(s) {', '.join(children)}; remove them first."
                )
            await tx.delete_folder(path)
            await self._audit(tx, actor, "remove", path, folder, None)
            await self._changed(tx)
        self._archive_directory(path)
        log.info("folder.removed", folder=path, actor=actor)
        return folder

    async def create_from_template(self, tx: StoreTx, path: str, template_parent: str) -> None:
        """Create a ``{sender}`` folder (and missing folders between it and its template parent)
        inside the caller's transaction; they inherit the parent's settings live."""
        now = self._clock()
        for candidate in [*ancestors(path), path]:
            if template_parent and not is_within(candidate, template_parent):
                continue
            if candidate == template_parent:
                continue
            if await tx.get_folder(candidate) is None:
                folder = Folder(
                    candidate, inherits=True, created_at=now, created_by="template", updated_at=now
                )
                await tx.insert_folder(folder)
                await self._audit(tx, "template", "add", candidate, None, folder)
        await self._changed(tx)

    # -- inside a write ---------------------------------------------------------------------
    async def _insert(self, tx: StoreTx, path: str, given: dict[str, Any], *, actor: str) -> Folder:
        """A new row, its settings over those of an ``AGENT.md`` already in its directory; the
        file is rewritten to mirror the row."""
        from_file = self._read_file(path) if self.agent_file(path).is_file() else {}
        now = self._clock()
        folder = Folder(
            path, **{**from_file, **given}, created_at=now, created_by=actor, updated_at=now
        )
        # The file is written inside the transaction: if that fails, no row is committed.
        folder = replace(folder, file_stamp=self._write_file(folder))
        await tx.insert_folder(folder)
        await self._audit(tx, actor, "add", path, None, folder)
        return folder

    async def _apply(
        self,
        tx: StoreTx,
        current: Folder,
        values: Mapping[str, Any],
        *,
        actor: str,
        action: str,
        stamp: str | None = None,
    ) -> Folder:
        """Write *values* over *current*. Without *stamp* (a write through a surface) the file
        is rewritten; with it (an import) the person's file is left as they wrote it."""
        updated = replace(current, **values, updated_at=self._clock())
        updated = replace(updated, file_stamp=stamp or self._write_file(updated))
        await tx.update_folder(updated)
        await self._audit(tx, actor, action, current.path, current, updated)
        await self._changed(tx)
        return updated

    async def _absorb_edit(self, tx: StoreTx, current: Folder) -> Folder:
        """Before a write: import an edit of the folder's file, or refuse if it is invalid."""
        stamp = file_stamp(self.agent_file(current.path))
        if stamp is None or stamp == current.file_stamp:
            return current
        try:
            values = self._read_file(current.path)
        except InvalidInput as exc:
            raise InvalidInput(f"{exc} Fix or undo that edit first; nothing was changed.") from None
        return await self._apply(
            tx, current, values, actor=FILE_ACTOR, action="import", stamp=stamp
        )

    async def _import(self, path: str) -> bool:
        # The stamp is taken before the file is read: an edit landing in between is then seen
        # as a newer stamp next time, never lost.
        stamp = file_stamp(self.agent_file(path))
        if stamp is None:
            return False
        try:
            values = self._read_file(path)
        except InvalidInput as exc:
            if self._reported.get(path) != stamp:
                self._reported[path] = stamp
                log.error("folder.agent_file_invalid", folder=path, error=str(exc))
            return False
        self._reported.pop(path, None)
        async with self._store.write() as tx:
            current = await tx.get_folder(path)
            if current is None or current.file_stamp == stamp:
                return False  # removed, or another process imported it first
            await self._apply(tx, current, values, actor=FILE_ACTOR, action="import", stamp=stamp)
        log.info("folder.imported", folder=path, file=self._shown(path))
        return True

    async def _audit(
        self,
        tx: StoreTx,
        actor: str,
        action: str,
        path: str,
        before: Folder | None,
        after: Folder | None,
    ) -> None:
        await tx.add_folder_audit(
            at=self._clock(),
            actor=actor,
            action=action,
            folder=path,
            before=None if before is None else settings_of(before),
            after=None if after is None else settings_of(after),
        )

    async def _changed(self, tx: StoreTx) -> None:
        version = await tx.bump_catalog_version()
        await self._catalog.reload(tx, version)

    # -- the file ---------------------------------------------------------------------------
    def _read_file(self, path: str) -> dict[str, Any]:
        """Every setting ``AGENT.md`` holds, as :class:`Folder` fields: a key it leaves out is
        unset. Raises InvalidInput naming the file and the key."""
        where = self._shown(path)
        try:
            text = self.agent_file(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"Cannot read {where}: {exc}.") from None
        parsed = parse_agent_file(text, where=where)
        public: dict[str, Any] = {key: parsed.settings.get(key) for key in FRONT_MATTER_KEYS}
        public["persona"] = parsed.persona or None
        try:
            return parse_settings(public, providers=self._providers)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None

    def _write_file(self, folder: Folder) -> str:
        settings = settings_of(folder)
        persona = settings.pop("persona") or ""
        return write_agent_file(self.agent_file(folder.path), render_agent_file(persona, settings))

    def _shown(self, path: str) -> str:
        return f"folders/{path}/{AGENT_FILE}"

    def _archive_directory(self, path: str) -> None:
        directory = self.directory(path)
        if not directory.exists():
            return
        stamp = self._clock().strftime("%Y%m%dT%H%M%SZ")
        archive = self._folders_dir.parent / "removed" / f"{path.replace('/', '__')}.{stamp}"
        make_private_dir(archive.parent)
        shutil.move(str(directory), str(archive))


def _confined(path: str, within: str | None) -> None:
    if within is not None and not is_within(path, within):
        raise Forbidden(
            f"Folder {path} lies outside {within}; only {within} and the folders under it are "
            "reachable here."
        )


def _chain(path: str, folders: Mapping[str, Folder]) -> list[str]:
    """*path* and the folders it takes unset settings from (``{sender}`` folders inherit)."""
    chain: list[str] = []
    current = folders.get(path)
    while current is not None:
        chain.append(current.path)
        if not current.inherits or current.parent is None:
            break
        current = folders.get(current.parent)
    return chain
