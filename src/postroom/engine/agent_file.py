"""``AGENT.md``: a folder's persona, with optional TOML front matter between ``+++`` lines.

    +++
    provider = "anthropic"
    model = "claude-sonnet-4-5"
    engagement_ttl = "10m"
    +++
    You are Atlas, the team's editor...

The database row is the source of truth for the persona and the settings; the file mirrors it.
Every write rewrites the file (atomically), and an edit a person makes to the file is noticed by
its stamp — modification time and size — and imported like any other write.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from postroom.core.errors import InvalidInput
from postroom.core.folder_settings import SETTING_KEYS
from postroom.engine.files import replace_file

__all__ = [
    "FRONT_MATTER_KEYS",
    "AgentFile",
    "file_stamp",
    "parse_agent_file",
    "render_agent_file",
    "write_agent_file",
]

FRONT_MATTER_KEYS = frozenset(SETTING_KEYS) - {"persona"}
_FENCE = "+++"


@dataclass(frozen=True, slots=True)
class AgentFile:
    persona: str
    settings: dict[str, Any] = field(default_factory=dict)


def render_agent_file(persona: str, settings: dict[str, Any]) -> str:
    """The text of an ``AGENT.md``; front matter only for settings that are set."""
    lines: list[str] = []
    for key in sorted(settings):
        value = settings[key]
        if value is None:
            continue
        if key not in FRONT_MATTER_KEYS:
            raise ValueError(f"{key} is not an AGENT.md setting")
        lines.append(f"{key} = {_toml_value(value)}")
    body = persona.rstrip("\n") + "\n" if persona else ""
    if not lines:
        return body
    return f"{_FENCE}\n" + "\n".join(lines) + f"\n{_FENCE}\n" + body


def parse_agent_file(text: str, *, where: str = "AGENT.md") -> AgentFile:
    """Split front matter from the persona; raise InvalidInput on bad front matter."""
    if not text.startswith(_FENCE + "\n") and text.strip() != _FENCE:
        return AgentFile(text.strip())
    rest = text[len(_FENCE) + 1 :]
    end = rest.find("\n" + _FENCE)
    if rest.startswith(_FENCE):
        front, body = "", rest[len(_FENCE) :]
    elif end < 0:
        raise InvalidInput(f"{where}: the front matter opened by '+++' is never closed.")
    else:
        front, body = rest[:end], rest[end + 1 + len(_FENCE) :]
    try:
        settings = tomllib.loads(front)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: the front matter is not valid TOML ({exc}).") from exc
    unknown = set(settings) - FRONT_MATTER_KEYS
    if unknown:
        raise InvalidInput(
            f"{where}: unknown front matter key(s) {', '.join(sorted(unknown))}; the keys are "
            f"{', '.join(sorted(FRONT_MATTER_KEYS))}."
        )
    return AgentFile(body.strip(), settings)


def file_stamp(file: Path) -> str | None:
    """What changes when the file is edited: its modification time and size (``None`` when
    there is no file). One ``stat``, so it can be checked before every turn."""
    try:
        status = file.stat()
    except OSError:
        return None
    return f"{status.st_mtime_ns}:{status.st_size}"


def write_agent_file(file: Path, text: str) -> str:
    """Replace *file* atomically (a reader never sees half a file); return its new stamp."""
    replace_file(file, text)
    stamp = file_stamp(file)
    assert stamp is not None  # just written
    return stamp


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # A JSON string is a valid TOML basic string (ensure_ascii=False avoids \ud83d surrogates).
    return json.dumps(str(value), ensure_ascii=False)
