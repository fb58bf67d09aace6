"""Statements on folder skills (MESSAGES §4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from postroom.core.skills import Skill
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import dump_json, from_iso, load_json, to_iso

__all__ = ["SkillStatements"]

_COLUMNS = "folder, name, description, keywords, body, created_at, updated_at, file_stamp"


class SkillStatements(Statements):
    async def list_skills(self, folders: Iterable[str] | None = None) -> list[Skill]:
        if folders is None:
            rows = await self._all(f"SELECT {_COLUMNS} FROM skills ORDER BY folder, name")
        else:
            wanted = sorted(set(folders))
            if not wanted:
                return []
            marks = ", ".join("?" * len(wanted))
            rows = await self._all(
                f"SELECT {_COLUMNS} FROM skills WHERE folder IN ({marks}) ORDER BY folder, name",
                wanted,
            )
        return [_skill(row) for row in rows]

    async def get_skill(self, folder: str, name: str) -> Skill | None:
        row = await self._one(
            f"SELECT {_COLUMNS} FROM skills WHERE folder = ? AND name = ?", (folder, name)
        )
        return None if row is None else _skill(row)

    async def put_skill(self, skill: Skill) -> None:
        assert skill.created_at is not None
        assert skill.updated_at is not None
        await self._run(
            f"INSERT INTO skills ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (folder, name) DO UPDATE SET description = excluded.description, "
            "keywords = excluded.keywords, body = excluded.body, "
            "updated_at = excluded.updated_at, file_stamp = excluded.file_stamp",
            (
                skill.folder,
                skill.name,
                skill.description,
                dump_json(list(skill.keywords)),
                skill.body,
                to_iso(skill.created_at),
                to_iso(skill.updated_at),
                skill.file_stamp,
            ),
        )

    async def delete_skill(self, folder: str, name: str) -> bool:
        deleted = await self._run(
            "DELETE FROM skills WHERE folder = ? AND name = ?", (folder, name)
        )
        return deleted == 1


def _skill(row: Any) -> Skill:
    return Skill(
        folder=row[0],
        name=row[1],
        description=row[2],
        keywords=tuple(str(k) for k in load_json(row[3]) or ()),
        body=row[4],
        created_at=from_iso(row[5]),
        updated_at=from_iso(row[6]),
        file_stamp=row[7],
    )
