"""``AGENT.md``: a folder's persona, with optional TOML front matter between ``+++`` lines.

    +++
    provider = "anthropic"
    model = "claude-sonnet-4-5"
    engagement_ttl = "10m"
    +++
    You are Atlas, the team's editor...

The database row is the source of truth for settings; the file is what a person reads and edits
in the folder, and ``folders add`` picks its front matter up when the file is already there.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from typing import Any

from postroom.core.errors import InvalidInput

__all__ = ["FRONT_MATTER_KEYS", "AgentFile", "parse_agent_file", "render_agent_file"]

FRONT_MATTER_KEYS = frozenset(
    {"provider", "model", "engagement_ttl", "busy_policy", "session", "role", "tools", "mirror"}
)
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


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # A JSON string is a valid TOML basic string (ensure_ascii=False avoids \ud83d surrogates).
    return json.dumps(str(value), ensure_ascii=False)
