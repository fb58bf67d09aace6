"""Folder writes: the one place folders are created and removed.

A folder is a database row (the source of truth for settings) and a directory
``DIR/folders/<path>/`` holding ``AGENT.md`` and, later, its memory. Adding ``a/b`` creates a
missing ``a``. Removing is refused while a route targets the folder, while it is a template
parent, or while it has sub-folders; the directory is moved to ``DIR/removed/`` rather than
deleted, so nothing a person wrote there is lost.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from postroom.core.durations import format_duration, parse_duration
from postroom.core.errors import Conflict, InvalidInput, NotFound
from postroom.core.folders import (
    BusyPolicy,
    Folder,
    Role,
    Session,
    ancestors,
    is_within,
    validate_folder,
)
from postroom.core.jid import parse_jid
from postroom.core.target import parse_target
from postroom.engine.agent_file import parse_agent_file, render_agent_file
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.store.protocol import Store, StoreTx

__all__ = ["AGENT_FILE", "FolderService", "FolderSpec", "folder_to_dict"]

log = structlog.get_logger(__name__)

AGENT_FILE = "AGENT.md"


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

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> FolderSpec:
        def text(key: str) -> str | None:
            value = data.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise InvalidInput(f"{key} must be text.")
            return str(value)

        def texts(key: str) -> tuple[str, ...] | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise InvalidInput(f"{key} must be a list of strings.")
            return tuple(value)

        return cls(
            persona=text("persona"),
            provider=text("provider"),
            model=text("model"),
            engagement_ttl=text("engagement_ttl"),
            busy_policy=text("busy_policy"),
            session=text("session"),
            role=text("role"),
            tools=texts("tools"),
            mirror=texts("mirror"),
        )


def _choice(enum: type[Any], value: str | None, key: str) -> Any:
    if value is None:
        return None
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(member.value for member in enum)
        raise InvalidInput(f"{key} must be one of {choices}, not {value!r}.") from None


def _ttl(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_duration(value))
    except ValueError as exc:
        raise InvalidInput(f"engagement_ttl {exc}.") from exc


def folder_to_dict(folder: Folder) -> dict[str, Any]:
    """The public folder object (INTERFACES §4)."""
    return {
        "path": folder.path,
        "persona": folder.persona,
        "provider": folder.provider,
        "model": folder.model,
        "engagement_ttl": folder.engagement_ttl_s,
        "session": folder.session.value if folder.session else None,
        "busy_policy": folder.busy_policy.value if folder.busy_policy else None,
        "role": folder.role.value if folder.role else None,
        "mirror": list(folder.mirror) if folder.mirror is not None else None,
        "inherits": folder.inherits,
        "parent": folder.parent,
        "created_at": folder.created_at.isoformat() if folder.created_at else None,
    }


class FolderService:
    """Creates, lists and removes folders."""

    def __init__(self, *, store: Store, catalog: Catalog, clock: Clock, folders_dir: Path) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._folders_dir = folders_dir

    def directory(self, path: str) -> Path:
        return self._folders_dir.joinpath(*path.split("/"))

    async def list_folders(self) -> list[Folder]:
        async with self._store.read() as tx:
            return await tx.list_folders()

    async def get_folder(self, path: str) -> Folder:
        async with self._store.read() as tx:
            folder = await tx.get_folder(path)
        if folder is None:
            raise NotFound(f"There is no folder {path}.")
        return folder

    async def add_folder(self, path: str, spec: FolderSpec, *, actor: str) -> Folder:
        """Create *path* (and its missing parents) with the given settings."""
        validate_folder(path)
        directory = self.directory(path)
        existing_file = directory / AGENT_FILE
        from_file = (
            parse_agent_file(existing_file.read_text("utf-8"), where=str(existing_file))
            if existing_file.is_file()
            else None
        )
        file_settings = from_file.settings if from_file else {}

        def pick(key: str, given: Any) -> Any:
            return given if given is not None else file_settings.get(key)

        persona = (
            spec.persona
            if spec.persona is not None
            else (from_file.persona if from_file and from_file.persona else None)
        )
        ttl_text = pick("engagement_ttl", spec.engagement_ttl)
        folder = Folder(
            path=path,
            persona=persona,
            provider=pick("provider", spec.provider),
            model=pick("model", spec.model),
            engagement_ttl_s=_ttl(None if ttl_text is None else str(ttl_text)),
            busy_policy=_choice(BusyPolicy, pick("busy_policy", spec.busy_policy), "busy_policy"),
            session=_choice(Session, pick("session", spec.session), "session"),
            role=_choice(Role, pick("role", spec.role), "role"),
            tools=_tuple(pick("tools", spec.tools), "tools"),
            mirror=_mirror(_tuple(pick("mirror", spec.mirror), "mirror")),
            created_at=self._clock(),
            created_by=actor,
        )
        async with self._store.write() as tx:
            if await tx.get_folder(path) is not None:
                raise Conflict(f"Folder {path} already exists.")
            for parent in ancestors(path):
                if await tx.get_folder(parent) is None:
                    await tx.insert_folder(
                        Folder(parent, created_at=folder.created_at, created_by=actor)
                    )
                    self._write_agent_file(parent, None, {})
            await tx.insert_folder(folder)
            # Files are written inside the transaction: if that fails, no row is committed.
            self._write_agent_file(path, folder.persona, _front_matter(folder, ttl_text))
            await self._changed(tx)
        return folder

    async def update_folder(self, path: str, spec: FolderSpec, *, actor: str) -> Folder:
        """Change the settings given in *spec* (``None`` leaves one as it is)."""
        validate_folder(path)
        changes: dict[str, Any] = {}
        if spec.persona is not None:
            changes["persona"] = spec.persona
        if spec.provider is not None:
            changes["provider"] = spec.provider
        if spec.model is not None:
            changes["model"] = spec.model
        if spec.engagement_ttl is not None:
            changes["engagement_ttl_s"] = _ttl(spec.engagement_ttl)
        if spec.busy_policy is not None:
            changes["busy_policy"] = _choice(BusyPolicy, spec.busy_policy, "busy_policy")
        if spec.session is not None:
            changes["session"] = _choice(Session, spec.session, "session")
        if spec.role is not None:
            changes["role"] = _choice(Role, spec.role, "role")
        if spec.tools is not None:
            changes["tools"] = _tuple(spec.tools, "tools")
        if spec.mirror is not None:
            changes["mirror"] = _mirror(_tuple(spec.mirror, "mirror"))
        if not changes:
            raise InvalidInput(f"Nothing to change in folder {path}.")
        async with self._store.write() as tx:
            current = await tx.get_folder(path)
            if current is None:
                raise NotFound(f"There is no folder {path}.")
            updated = replace(current, **changes)
            await tx.update_folder(updated)
            self._write_agent_file(
                path,
                updated.persona,
                _front_matter(updated, _ttl_text(updated.engagement_ttl_s)),
                overwrite=True,
            )
            await self._changed(tx)
        log.info("folder.updated", folder=path, actor=actor, changed=sorted(changes))
        return updated

    async def remove_folder(self, path: str, *, actor: str) -> Folder:
        """Remove a folder no route and no sub-folder depends on."""
        validate_folder(path)
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
                await tx.insert_folder(
                    Folder(candidate, inherits=True, created_at=now, created_by="template")
                )
        await self._changed(tx)

    async def _changed(self, tx: StoreTx) -> None:
        version = await tx.bump_catalog_version()
        await self._catalog.reload(tx, version)

    def _write_agent_file(
        self, path: str, persona: str | None, settings: dict[str, Any], *, overwrite: bool = False
    ) -> None:
        directory = self.directory(path)
        directory.mkdir(parents=True, exist_ok=True)
        file = directory / AGENT_FILE
        if file.exists() and not overwrite:
            return
        text = render_agent_file(persona or "", settings)
        file.write_text(text, "utf-8")

    def _archive_directory(self, path: str) -> None:
        directory = self.directory(path)
        if not directory.exists():
            return
        stamp = self._clock().strftime("%Y%m%dT%H%M%SZ")
        archive = self._folders_dir.parent / "removed" / f"{path.replace('/', '__')}.{stamp}"
        archive.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(directory), str(archive))


def _tuple(value: Any, key: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InvalidInput(f"{key} must be a list of strings.")


def _ttl_text(seconds: int | None) -> str | None:
    return None if seconds is None else format_duration(seconds)


def _mirror(chats: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if chats is None:
        return None
    for chat in chats:
        parse_jid(chat, what="mirror chat")
    return chats


def _front_matter(folder: Folder, ttl_text: Any) -> dict[str, Any]:
    return {
        "provider": folder.provider,
        "model": folder.model,
        "engagement_ttl": None if ttl_text is None else str(ttl_text),
        "busy_policy": folder.busy_policy.value if folder.busy_policy else None,
        "session": folder.session.value if folder.session else None,
        "role": folder.role.value if folder.role else None,
        "tools": list(folder.tools) if folder.tools is not None else None,
        "mirror": list(folder.mirror) if folder.mirror is not None else None,
    }
