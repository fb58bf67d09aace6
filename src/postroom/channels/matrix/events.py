"""Reading ``m.room.message`` events: relations, reply fallbacks, mentions (pure functions).

Matrix puts a reply's quoted original at the top of its ``body`` (the *reply fallback*,
``> <@alice:example.org> original``); postroom keeps only what the person wrote, since the
replied-to message is referenced by ``reply_to`` anyway. A message in a thread carries
``m.relates_to: {rel_type: m.thread, event_id: <root>}``; the root is the message's native
topic. Inside a thread, clients add an ``m.in_reply_to`` that only points at the thread's latest
event (``is_falling_back: true``): that is not a reply, so postroom treats the message as a
reply to the thread's root — a thread started on the bot's answer follows the reply chain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

__all__ = [
    "Relations",
    "event_time",
    "localpart",
    "mentions_bot",
    "parse_mxc",
    "relations",
    "strip_reply_fallback",
]

_MXC = re.compile(r"mxc://([^/\s]+)/([^/\s?#]+)")
_MATRIX_TO = re.compile(r"https://matrix\.to/#/([^\"'<>\s?]+)")


@dataclass(frozen=True, slots=True)
class Relations:
    #: The event this one answers (``m.in_reply_to``), or the thread's root for a plain
    #: message inside a thread.
    reply_to: str | None = None
    #: The thread's root event id (``rel_type: m.thread``).
    thread_root: str | None = None
    #: An edit of another event (``rel_type: m.replace``).
    is_edit: bool = False
    #: Whether ``reply_to`` came from a real ``m.in_reply_to`` (so the body may hold a fallback).
    quoted: bool = False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def relations(content: Mapping[str, Any]) -> Relations:
    """The reply and thread an event's ``m.relates_to`` names."""
    relates = _mapping(content.get("m.relates_to"))
    rel_type = relates.get("rel_type")
    if rel_type == "m.replace":
        return Relations(is_edit=True)
    in_reply_to = _text(_mapping(relates.get("m.in_reply_to")).get("event_id"))
    if rel_type == "m.thread":
        root = _text(relates.get("event_id"))
        if root is None:
            return Relations(reply_to=in_reply_to, quoted=in_reply_to is not None)
        if relates.get("is_falling_back") is True or in_reply_to is None:
            return Relations(reply_to=root, thread_root=root)
        return Relations(reply_to=in_reply_to, thread_root=root, quoted=True)
    return Relations(reply_to=in_reply_to, quoted=in_reply_to is not None)


def strip_reply_fallback(body: str) -> str:
    """*body* without the quoted original a client put on top of a reply.

    The fallback is a run of ``>`` lines starting with ``> <@sender>`` (or ``> * <@sender>``
    for an emote), then one blank line.
    """
    lines = body.split("\n")
    if not lines or not re.match(r"> (\* )?<[@!]", lines[0]):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    if index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


def mentions_bot(
    content: Mapping[str, Any], text: str, *, user_id: str, names: Iterable[str]
) -> bool:
    """Whether the event mentions the bot: ``m.mentions.user_ids`` (intentional mentions), a
    ``matrix.to`` pill in the HTML, or a body starting with the bot's name or Matrix id."""
    user_ids = _mapping(content.get("m.mentions")).get("user_ids")
    if isinstance(user_ids, list) and user_id in user_ids:
        return True
    formatted = content.get("formatted_body")
    if isinstance(formatted, str) and any(
        unquote(target) == user_id for target in _MATRIX_TO.findall(formatted)
    ):
        return True
    for name in {user_id, *names}:
        if not name:
            continue
        if re.match(rf"\s*@?{re.escape(name)}(?![\w-])", text, re.IGNORECASE):
            return True
    return False


def localpart(mxid: str) -> str:
    """``@alice:example.org`` → ``alice``."""
    return mxid.removeprefix("@").partition(":")[0] or mxid


def event_time(event: Mapping[str, Any], fallback: datetime) -> datetime:
    """The event's ``origin_server_ts`` (milliseconds since the epoch) as a UTC time."""
    millis = event.get("origin_server_ts")
    if isinstance(millis, int) and not isinstance(millis, bool) and millis > 0:
        try:
            return datetime.fromtimestamp(millis / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return fallback
    return fallback


def parse_mxc(uri: str) -> tuple[str, str] | None:
    """``mxc://server/media_id`` → ``(server, media_id)``; ``None`` for anything else."""
    match = _MXC.fullmatch(uri)
    return (match.group(1), match.group(2)) if match else None
