"""Folder paths: an agent's address inside the folder tree.

A path is one or more segments of ``[a-z0-9_-]+`` joined by ``/``: no leading or trailing ``/``,
no empty segment, no ``..``. Those rules keep every folder inside ``DIR/folders``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from postroom.core.errors import FolderNameError

__all__ = [
    "MAX_FOLDER_DEPTH",
    "MAX_FOLDER_LENGTH",
    "BusyPolicy",
    "Folder",
    "FolderDefaults",
    "FolderSettings",
    "Role",
    "Session",
    "ancestors",
    "check_segment",
    "effective_settings",
    "is_within",
    "parent_of",
    "validate_folder",
]

MAX_FOLDER_LENGTH = 255
MAX_FOLDER_DEPTH = 16
_SEGMENT = re.compile(r"[a-z0-9_-]+")


def validate_folder(path: str, *, what: str = "Folder") -> str:
    """Return *path* if it is a valid folder path, else raise :class:`FolderNameError`."""
    if not isinstance(path, str) or not path:
        raise FolderNameError(f"{what} path is empty; use segments like atlas/content.")
    if len(path) > MAX_FOLDER_LENGTH:
        raise FolderNameError(f"{what} path is longer than {MAX_FOLDER_LENGTH} characters.")
    if path.startswith("/") or path.endswith("/"):
        raise FolderNameError(f"{what} path {path!r} must not start or end with '/'.")
    segments = path.split("/")
    if len(segments) > MAX_FOLDER_DEPTH:
        raise FolderNameError(f"{what} path {path!r} is deeper than {MAX_FOLDER_DEPTH} levels.")
    for segment in segments:
        check_segment(segment, path, what=what)
    return path


def check_segment(segment: str, path: str, *, what: str = "Folder") -> None:
    """Raise :class:`FolderNameError` unless *segment* is one valid path segment."""
    if _SEGMENT.fullmatch(segment):
        return
    if segment == "":
        raise FolderNameError(f"{what} path {path!r} has an empty segment ('//').")
    if segment in {".", ".."}:
        raise FolderNameError(
            f"{what} path {path!r} contains {segment!r}; folders cannot leave the folder tree."
        )
    if segment.lower() != segment and _SEGMENT.fullmatch(segment.lower()):
        raise FolderNameError(
            f"{what} path {path!r} has uppercase letters; folder names are lowercase."
        )
    bad = next(ch for ch in segment if not _SEGMENT.fullmatch(ch))
    raise FolderNameError(
        f"{what} path {path!r} contains {bad!r}; folder segments use only a-z, 0-9, '_' and '-'."
    )


def parent_of(path: str) -> str | None:
    """The parent folder, or ``None`` for a top-level folder."""
    head, sep, _ = path.rpartition("/")
    return head if sep else None


def ancestors(path: str) -> list[str]:
    """Every proper ancestor, outermost first: ``a/b/c`` → ``["a", "a/b"]``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def is_within(path: str, root: str) -> bool:
    """True when *path* is *root* itself or inside its subtree."""
    return path == root or path.startswith(root + "/")


class Session(StrEnum):
    """Whose history a turn sees (MESSAGES §4)."""

    PER_CHAT = "per-chat"
    SHARED = "shared"


class BusyPolicy(StrEnum):
    """What a message arriving while a turn runs does (PIPELINE §2)."""

    FOLLOWUP = "followup"
    INTERRUPT = "interrupt"
    STEER = "steer"


class Role(StrEnum):
    AGENT = "agent"
    CONDUCTOR = "conductor"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Folder:
    """An agent: its path and the settings stored on its row. ``None`` means "not set here"."""

    path: str
    persona: str | None = None
    provider: str | None = None
    model: str | None = None
    engagement_ttl_s: int | None = None
    busy_policy: BusyPolicy | None = None
    session: Session | None = None
    role: Role | None = None
    tools: tuple[str, ...] | None = None
    mirror: tuple[str, ...] | None = None
    #: USD a day the folder's runs may cost (recorded; ``None`` = no budget).
    budget_per_day: float | None = None
    #: Created from a ``{sender}`` template: unset settings come from the parent, live.
    inherits: bool = False
    created_at: datetime | None = None
    created_by: str = ""
    updated_at: datetime | None = None
    #: ``AGENT.md``'s modification time and size when the row and the file last agreed.
    file_stamp: str | None = None

    @property
    def parent(self) -> str | None:
        return parent_of(self.path)


@dataclass(frozen=True, slots=True)
class FolderDefaults:
    """Settings for folders that set none (``[defaults]`` of the configuration)."""

    provider: str = "echo"
    model: str | None = None
    engagement_ttl_s: int = 30 * 60
    busy_policy: BusyPolicy = BusyPolicy.FOLLOWUP
    session: Session = Session.PER_CHAT


@dataclass(frozen=True, slots=True)
class FolderSettings:
    """The settings a folder runs with after inheritance and defaults."""

    path: str
    persona: str
    provider: str
    model: str | None
    engagement_ttl_s: int
    busy_policy: BusyPolicy
    session: Session
    role: Role
    tools: tuple[str, ...]
    mirror: tuple[str, ...]
    budget_per_day: float | None = None


_SETTING_NAMES = (
    "persona",
    "provider",
    "model",
    "engagement_ttl_s",
    "busy_policy",
    "session",
    "role",
    "tools",
    "mirror",
    "budget_per_day",
)


def effective_settings(
    path: str, folders: Mapping[str, Folder], defaults: FolderDefaults
) -> FolderSettings:
    """Resolve a folder's settings: its own, then (for template-created folders) its parent's,
    live, then the defaults."""
    chain: list[Folder] = []
    current = folders.get(path)
    while current is not None:
        chain.append(current)
        if not current.inherits or current.parent is None:
            break
        current = folders.get(current.parent)
    values: dict[str, object] = {}
    for name in _SETTING_NAMES:
        for folder in chain:
            value = getattr(folder, name)
            if value is not None:
                values[name] = value
                break
    return FolderSettings(
        path=path,
        persona=str(values.get("persona", "")),
        provider=str(values.get("provider", defaults.provider)),
        model=_opt_str(values.get("model", defaults.model)),
        engagement_ttl_s=_int(values.get("engagement_ttl_s", defaults.engagement_ttl_s)),
        busy_policy=BusyPolicy(str(values.get("busy_policy", defaults.busy_policy))),
        session=Session(str(values.get("session", defaults.session))),
        role=Role(str(values.get("role", Role.AGENT))),
        tools=_tuple(values.get("tools", ())),
        mirror=_tuple(values.get("mirror", ())),
        budget_per_day=_opt_float(values.get("budget_per_day")),
    )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_float(value: object) -> float | None:
    return value if isinstance(value, float) else None if value is None else float(str(value))


def _int(value: object) -> int:
    return value if isinstance(value, int) else int(str(value))


def _tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(str(v) for v in value)
    return ()
