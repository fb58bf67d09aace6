"""Skill writes and the ``skills/*.md`` mirror (MESSAGES §4): the one place skills change.

A skill is a database row — the source of truth, so every node sees it — mirrored to
``DIR/folders/<path>/skills/<name>.md`` the way a folder's row is mirrored to ``AGENT.md``:
every write through the CLI or the API rewrites (or removes) the file, and a person's edit of
the files is noticed by their stamps — a new file adds a skill, a changed one updates it, a
deleted one removes it — before the folder's next run, when the server starts and before a
write to the folder's skills. An invalid file is logged once, reported by ``postroom doctor``
and not applied; a write to that skill through another surface is refused until it is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from postroom.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from postroom.core.folders import ancestors, is_within, validate_folder
from postroom.core.skills import (
    ChosenSkill,
    Skill,
    SkillText,
    check_skill_name,
    choose_skills,
    parse_skill_file,
    render_skill_file,
    skill_text,
    visible_skills,
)
from postroom.engine.agent_file import file_stamp, write_agent_file
from postroom.engine.clock import Clock
from postroom.store.protocol import Store, StoreTx

__all__ = ["SKILLS_DIR", "SkillLimits", "SkillProblem", "SkillService", "skill_to_dict"]

log = structlog.get_logger(__name__)

SKILLS_DIR = "skills"
FILE_ACTOR = "file:skills"


@dataclass(frozen=True, slots=True)
class SkillLimits:
    """``skills.max_per_run`` and ``skills.max_chars`` (INTERFACES §1)."""

    max_per_run: int = 3
    max_chars: int = 8000


@dataclass(frozen=True, slots=True)
class SkillProblem:
    """A skill file that is invalid (and so not applied)."""

    folder: str
    detail: str


def skill_to_dict(skill: Skill, inherited_from: str | None = None) -> dict[str, Any]:
    """The public skill object (INTERFACES §4)."""
    return {
        "name": skill.name,
        "description": skill.description,
        "keywords": list(skill.keywords),
        "body": skill.body,
        "inherited_from": inherited_from,
        "folder": skill.folder,
        "updated_at": skill.updated_at.isoformat() if skill.updated_at else None,
    }


class SkillService:
    """Adds, changes, lists and removes skills, keeps their files in step, and chooses the
    skills of a run."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        folders_dir: Path,
        limits: SkillLimits | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._folders_dir = folders_dir
        self.limits = limits or SkillLimits()
        #: Per folder, the stamps of its skill files when they last agreed with the rows: a
        #: run whose folders' files are unchanged reads no row to find that out.
        self._known: dict[str, dict[str, str]] = {}
        #: The stamp of each invalid file already logged: one log line per bad edit.
        self._reported: dict[tuple[str, str], str] = {}

    def directory(self, folder: str) -> Path:
        return self._folders_dir.joinpath(*folder.split("/"), SKILLS_DIR)

    def file(self, folder: str, name: str) -> Path:
        return self.directory(folder) / f"{name}.md"

    # -- reading ----------------------------------------------------------------------------
    async def visible(
        self, folder: str, *, within: str | None = None
    ) -> list[tuple[Skill, str | None]]:
        """The skills *folder* sees — its own and its ancestors' — each with the folder it is
        inherited from (``None`` for its own)."""
        chain = await self._chain(folder, within)
        await self.import_edits(folder)
        async with self._store.read() as tx:
            skills = await tx.list_skills(chain)
        return visible_skills(skills, folder)

    async def every(self, *, within: str | None = None) -> list[Skill]:
        """Every folder's own skills (of one tree, for a confined caller)."""
        await self.import_edits()
        async with self._store.read() as tx:
            skills = await tx.list_skills()
        return [s for s in skills if within is None or is_within(s.folder, within)]

    async def show(
        self, folder: str, name: str, *, within: str | None = None
    ) -> tuple[Skill, str | None]:
        """One skill *folder* sees (its own, or inherited)."""
        check_skill_name(name)
        for skill, origin in await self.visible(folder, within=within):
            if skill.name == name:
                return skill, origin
        raise NotFound(f"Folder {folder} has no skill {name}.")

    async def for_run(self, folder: str, text: str) -> list[ChosenSkill]:
        """The skills of a run of *folder* whose new messages are *text* (MESSAGES §4): an
        edit of the skill files is imported first."""
        await self.import_edits(folder)
        chain = [*ancestors(folder), folder]
        async with self._store.read() as tx:
            skills = await tx.list_skills(chain)
        if not skills:
            return []
        return choose_skills(
            visible_skills(skills, folder),
            text,
            max_count=self.limits.max_per_run,
            max_chars=self.limits.max_chars,
        )

    # -- writing ----------------------------------------------------------------------------
    async def add(
        self, folder: str, values: Mapping[str, Any], *, actor: str, within: str | None = None
    ) -> Skill:
        """A new skill of *folder* (a name it already has is a conflict)."""
        await self._chain(folder, within)
        text = skill_text(values)
        await self.import_edits(folder)
        async with self._store.write() as tx:
            await self._folder_exists(tx, folder)
            if await tx.get_skill(folder, text.name) is not None:
                raise Conflict(f"Folder {folder} already has a skill {text.name}.")
            self._refuse_bad_file(folder, text.name)
            now = self._clock()
            skill = self._stored(folder, text, created_at=now)
            await tx.put_skill(skill)
        self._forget(folder)
        log.info("skill.added", folder=folder, skill=text.name, actor=actor)
        return skill

    async def update(
        self,
        folder: str,
        name: str,
        changes: Mapping[str, Any],
        *,
        actor: str,
        within: str | None = None,
    ) -> Skill:
        """Change a skill's ``description``, ``keywords`` or ``body`` (the fields given)."""
        await self._chain(folder, within)
        check_skill_name(name)
        unknown = sorted(set(changes) - {"description", "keywords", "body"})
        if unknown or not changes:
            raise InvalidInput(
                f"Give one or more of description, keywords and body to change skill {name}"
                + (f" ({', '.join(unknown)} cannot be changed)." if unknown else ".")
            )
        self._refuse_bad_file(folder, name)
        await self.import_edits(folder)
        async with self._store.write() as tx:
            current = await tx.get_skill(folder, name)
            if current is None:
                raise NotFound(f"Folder {folder} has no skill {name} of its own.")
            merged = {
                "name": name,
                "description": current.description,
                "keywords": list(current.keywords),
                "body": current.body,
                **changes,
            }
            skill = self._stored(folder, skill_text(merged), created_at=current.created_at)
            await tx.put_skill(skill)
        self._forget(folder)
        log.info("skill.updated", folder=folder, skill=name, actor=actor, changed=sorted(changes))
        return skill

    async def remove(
        self, folder: str, name: str, *, actor: str, within: str | None = None
    ) -> Skill:
        """Remove one of *folder*'s own skills, and its file."""
        await self._chain(folder, within)
        check_skill_name(name)
        await self.import_edits(folder)
        async with self._store.write() as tx:
            current = await tx.get_skill(folder, name)
            if current is None:
                raise NotFound(f"Folder {folder} has no skill {name} of its own.")
            await tx.delete_skill(folder, name)
            self.file(folder, name).unlink(missing_ok=True)
        self._forget(folder)
        log.info("skill.removed", folder=folder, skill=name, actor=actor)
        return current

    # -- the files --------------------------------------------------------------------------
    async def import_edits(self, folder: str | None = None) -> list[tuple[str, str]]:
        """Bring the rows in step with edited skill files: of *folder* and its ancestors, or
        of every folder. Returns the ``(folder, name)`` of each skill added, changed or
        removed. One directory listing and a ``stat`` per file when nothing changed."""
        if folder is None:
            async with self._store.read() as tx:
                paths = sorted(f.path for f in await tx.list_folders())
        else:
            paths = [*ancestors(folder), folder]
        changed: list[tuple[str, str]] = []
        for path in paths:
            changed.extend(await self._import_folder(path))
        return changed

    async def file_problems(self) -> list[SkillProblem]:
        """Every invalid skill file (for ``postroom doctor``)."""
        problems: list[SkillProblem] = []
        async with self._store.read() as tx:
            paths = sorted(f.path for f in await tx.list_folders())
        for path in paths:
            for name in self._stamps(path):
                try:
                    self._read(path, name)
                except InvalidInput as exc:
                    problems.append(SkillProblem(path, f"{exc} It is not applied."))
        return problems

    async def _import_folder(self, folder: str) -> list[tuple[str, str]]:
        stamps = self._stamps(folder)
        if self._known.get(folder) == stamps:
            return []
        async with self._store.read() as tx:
            rows = {s.name: s for s in await tx.list_skills([folder])}
        edited = [n for n, stamp in stamps.items() if n not in rows or rows[n].file_stamp != stamp]
        # A row whose file was written and is gone now: the person deleted it.
        deleted = [n for n, s in rows.items() if n not in stamps and s.file_stamp is not None]
        texts: dict[str, tuple[SkillText, str]] = {}
        clean = True
        for name in edited:
            try:
                texts[name] = (self._read(folder, name), stamps[name])
            except InvalidInput as exc:
                clean = False
                if self._reported.get((folder, name)) != stamps[name]:
                    self._reported[(folder, name)] = stamps[name]
                    log.error("skill.file_invalid", folder=folder, skill=name, error=str(exc))
        changed: list[tuple[str, str]] = []
        if texts or deleted:
            async with self._store.write() as tx:
                if await tx.get_folder(folder) is None:
                    return []
                now = self._clock()
                for name, (text, stamp) in texts.items():
                    current = await tx.get_skill(folder, name)
                    if current is not None and current.file_stamp == stamp:
                        continue  # another process imported it first
                    created = current.created_at if current is not None else now
                    skill = replace(self._skill(folder, text, created_at=created), file_stamp=stamp)
                    await tx.put_skill(skill)
                    changed.append((folder, name))
                for name in deleted:
                    if await tx.delete_skill(folder, name):
                        changed.append((folder, name))
            for item in changed:
                log.info("skill.imported", folder=item[0], skill=item[1], actor=FILE_ACTOR)
        if clean:
            self._known[folder] = stamps
        return changed

    def _stamps(self, folder: str) -> dict[str, str]:
        """The stamp of each ``skills/*.md`` of *folder*, by skill name."""
        directory = self.directory(folder)
        try:
            entries = list(directory.iterdir())
        except OSError:
            return {}
        stamps: dict[str, str] = {}
        for entry in entries:
            if entry.suffix != ".md" or entry.name.startswith("."):
                continue
            stamp = file_stamp(entry)
            if stamp is not None:
                stamps[entry.stem] = stamp
        return stamps

    def _read(self, folder: str, name: str) -> SkillText:
        where = f"folders/{folder}/{SKILLS_DIR}/{name}.md"
        try:
            text = self.file(folder, name).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"Cannot read {where}: {exc}.") from None
        return parse_skill_file(text, default_name=name, where=where)

    def _refuse_bad_file(self, folder: str, name: str) -> None:
        """A write through a surface never overwrites a person's edit it could not import."""
        if not self.file(folder, name).is_file():
            return
        try:
            self._read(folder, name)
        except InvalidInput as exc:
            raise InvalidInput(f"{exc} Fix or undo that edit first; nothing was changed.") from None

    def _stored(self, folder: str, text: SkillText, *, created_at: Any) -> Skill:
        """The row of a write through a surface, with its file rewritten to mirror it (inside
        the caller's transaction: if writing fails, nothing is committed)."""
        skill = self._skill(folder, text, created_at=created_at)
        self.directory(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = write_agent_file(self.file(folder, text.name), render_skill_file(skill))
        return replace(skill, file_stamp=stamp)

    def _skill(self, folder: str, text: SkillText, *, created_at: Any) -> Skill:
        return Skill(
            folder=folder,
            name=text.name,
            description=text.description,
            keywords=text.keywords,
            body=text.body,
            created_at=created_at,
            updated_at=self._clock(),
        )

    def _forget(self, folder: str) -> None:
        self._known.pop(folder, None)

    async def _chain(self, folder: str, within: str | None) -> list[str]:
        validate_folder(folder)
        if within is not None and not is_within(folder, within):
            raise Forbidden(
                f"Folder {folder} lies outside {within}; only {within} and the folders under it "
                "are reachable here."
            )
        async with self._store.read() as tx:
            await self._folder_exists(tx, folder)
        return [*ancestors(folder), folder]

    async def _folder_exists(self, tx: StoreTx, folder: str) -> None:
        if await tx.get_folder(folder) is None:
            raise NotFound(f"There is no folder {folder}.")
