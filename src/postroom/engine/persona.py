"""Where a folder's persona comes from: its ``AGENT.md``, so that editing the file changes the
agent on its next turn; a ``{sender}`` folder without a file of its own uses its template
parent's. The database row's persona is the fallback when there is no file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from postroom.core.errors import PostroomError
from postroom.core.folders import Folder
from postroom.engine.agent_file import parse_agent_file
from postroom.engine.folders import AGENT_FILE

__all__ = ["PersonaSource"]


class PersonaSource:
    """Reads ``AGENT.md`` files, re-reading one only when it changed on disk."""

    def __init__(self, folders_dir: Path) -> None:
        self._folders_dir = folders_dir
        self._cache: dict[Path, tuple[float, str]] = {}

    def persona(self, path: str, folders: Mapping[str, Folder], fallback: str) -> str:
        current: str | None = path
        while current is not None:
            text = self._read(self._folders_dir.joinpath(*current.split("/")) / AGENT_FILE)
            if text is not None:
                return text
            folder = folders.get(current)
            if folder is None or not folder.inherits:
                break
            current = folder.parent
        return fallback

    def _read(self, file: Path) -> str | None:
        try:
            mtime = file.stat().st_mtime
        except OSError:
            return None
        cached = self._cache.get(file)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            persona = parse_agent_file(file.read_text("utf-8"), where=str(file)).persona
        except (OSError, UnicodeDecodeError, PostroomError):
            return None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[file] = (mtime, persona)
        return persona
