"""A folder's settings as people and programs write them (INTERFACES §1): the one validation
behind every surface — ``folders add/set``, the API, a conductor's tags and ``AGENT.md``.

Each value is checked where it is written and refused with a sentence naming the key and what
is allowed. ``None`` unsets a setting (the folder then uses its parent's or the defaults).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any

from postroom.core.bounds import MAX_COUNT
from postroom.core.durations import format_duration, parse_duration
from postroom.core.errors import InvalidInput
from postroom.core.folders import BusyPolicy, Folder, Role, Session
from postroom.core.jid import parse_jid

__all__ = [
    "BUILTIN_PROVIDERS",
    "MAX_BUDGET_PER_DAY",
    "MAX_PERSONA_CHARS",
    "SETTING_KEYS",
    "parse_settings",
    "settings_of",
]

#: Providers postroom knows by name; ``[providers.<name>]`` sections add more.
BUILTIN_PROVIDERS = ("anthropic", "openai", "gemini", "ollama", "local", "echo")
#: The public keys, in the order they are shown.
SETTING_KEYS = (
    "persona",
    "provider",
    "model",
    "engagement_ttl",
    "session",
    "busy_policy",
    "role",
    "tools",
    "mirror",
    "budget_per_day",
)
MAX_PERSONA_CHARS = 65_536
MAX_BUDGET_PER_DAY = float(MAX_COUNT)
MAX_NAME_CHARS = 255
MAX_LIST_ITEMS = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_settings(changes: Mapping[str, Any], *, providers: Collection[str]) -> dict[str, Any]:
    """Validate public settings; return them as :class:`Folder` field values.

    *providers* are the names a folder may use (the built-in ones and the configured ones).
    Raises :class:`InvalidInput` naming the first bad key.
    """
    unknown = sorted(set(changes) - set(SETTING_KEYS))
    if unknown:
        raise InvalidInput(
            f"Unknown folder setting(s) {', '.join(unknown)}; the settings are "
            f"{', '.join(SETTING_KEYS)}."
        )
    out: dict[str, Any] = {}
    for key in SETTING_KEYS:
        if key not in changes:
            continue
        value = changes[key]
        field = "engagement_ttl_s" if key == "engagement_ttl" else key
        out[field] = None if value is None else _PARSERS[key](value, providers)
    return out


def settings_of(folder: Folder) -> dict[str, Any]:
    """A folder's own settings under their public keys (``None`` = not set here)."""
    ttl = folder.engagement_ttl_s
    return {
        "persona": folder.persona,
        "provider": folder.provider,
        "model": folder.model,
        "engagement_ttl": None if ttl is None else format_duration(ttl),
        "session": _value(folder.session),
        "busy_policy": _value(folder.busy_policy),
        "role": _value(folder.role),
        "tools": None if folder.tools is None else list(folder.tools),
        "mirror": None if folder.mirror is None else list(folder.mirror),
        "budget_per_day": folder.budget_per_day,
    }


def _value(member: StrEnum | None) -> str | None:
    return None if member is None else member.value


def _persona(value: Any, _: Collection[str]) -> str | None:
    text = _text("persona", value).strip()
    if len(text) > MAX_PERSONA_CHARS:
        raise InvalidInput(
            f"persona is {len(text)} characters long; the most is {MAX_PERSONA_CHARS}."
        )
    return text or None


def _provider(value: Any, providers: Collection[str]) -> str:
    name = _name("provider", value)
    if name not in providers:
        raise InvalidInput(
            f"provider {name!r} is not configured; the providers are "
            f"{', '.join(sorted(providers))} (another needs a [providers.{name}] section in "
            "postroom.toml)."
        )
    return name


def _model(value: Any, _: Collection[str]) -> str:
    return _name("model", value)


def _ttl(value: Any, _: Collection[str]) -> int:
    # parse_duration holds the 30-day ceiling of every stored duration (core.bounds).
    try:
        return int(parse_duration(value))
    except ValueError as exc:
        raise InvalidInput(f"engagement_ttl {exc}.") from None


def _choice(enum: type[StrEnum], key: str) -> Any:
    def parse(value: Any, _: Collection[str]) -> StrEnum:
        try:
            return enum(value)
        except ValueError:
            choices = ", ".join(member.value for member in enum)
            raise InvalidInput(f"{key} must be one of {choices}, not {value!r}.") from None

    return parse


def _tools(value: Any, _: Collection[str]) -> tuple[str, ...]:
    return tuple(_name("tools", item) for item in _list("tools", value))


def _mirror(value: Any, _: Collection[str]) -> tuple[str, ...]:
    chats = tuple(_text("mirror", chat) for chat in _list("mirror", value))
    for chat in chats:
        parse_jid(chat, what="mirror chat")
    return chats


def _budget(value: Any, _: Collection[str]) -> float:
    if isinstance(value, bool):
        raise InvalidInput("budget_per_day must be a number of USD, such as 5 or 2.50.")
    try:
        amount = float(value.strip().removeprefix("$") if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise InvalidInput(
            f"budget_per_day must be a number of USD, such as 5 or 2.50, not {value!r}."
        ) from None
    if not math.isfinite(amount) or not 0 <= amount < MAX_BUDGET_PER_DAY:
        raise InvalidInput(
            f"budget_per_day must be between 0 and {MAX_BUDGET_PER_DAY:.0f} USD, not {value!r}."
        )
    return amount


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be text, not {type(value).__name__}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{key} is not valid text: it holds a lone surrogate.") from None
    return value


def _name(key: str, value: Any) -> str:
    text = _text(key, value).strip()
    if not text:
        raise InvalidInput(f"{key} is empty; leave it out (or null) to use the default.")
    if len(text) > MAX_NAME_CHARS or _CONTROL.search(text):
        raise InvalidInput(
            f"{key} must be 1 to {MAX_NAME_CHARS} printable characters, not {text[:40]!r}."
        )
    return text


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise InvalidInput(f"{key} must be a list of strings.")
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidInput(f"{key} has {len(value)} entries; the most is {MAX_LIST_ITEMS}.")
    return list(value)


_PARSERS = {
    "persona": _persona,
    "provider": _provider,
    "model": _model,
    "engagement_ttl": _ttl,
    "session": _choice(Session, "session"),
    "busy_policy": _choice(BusyPolicy, "busy_policy"),
    "role": _choice(Role, "role"),
    "tools": _tools,
    "mirror": _mirror,
    "budget_per_day": _budget,
}
