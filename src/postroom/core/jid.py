"""Addresses of chats and senders (JIDs): ``platform ":" room``.

The platform is the text before the first ``:``; the room is everything after it. Rooms are
paths: ``/`` separates segments, so a ``/`` or ``%`` inside one id part is percent-encoded
(``%2F``, ``%25``) by the adapter that builds the address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postroom.core.errors import JidError

__all__ = [
    "MAX_JID_LENGTH",
    "Jid",
    "decode_id_part",
    "encode_id_part",
    "make_jid",
    "parse_jid",
    "split_jid",
]

MAX_JID_LENGTH = 512

_PLATFORM = re.compile(r"[a-z0-9_-]+")
# Control characters (C0, DEL, C1) have no business in an address and would break logs and
# terminals; refusing them here keeps every stored JID printable.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class Jid:
    """A parsed address. ``str(jid)`` gives back the canonical text."""

    platform: str
    room: str

    def __str__(self) -> str:
        return f"{self.platform}:{self.room}"


def split_jid(jid: str) -> tuple[str, str]:
    """Split an address into ``(platform, room)`` without validating it.

    A string with no ``:`` is a bare folder address: its platform is empty.
    """
    platform, sep, room = jid.partition(":")
    if not sep:
        return "", jid
    return platform, room


def parse_jid(text: str, *, what: str = "address") -> Jid:
    """Parse and validate ``platform:room``; raise :class:`JidError` with a clear reason."""
    if not isinstance(text, str):
        raise JidError(f"The {what} must be a string of the form platform:room.")
    if not text:
        raise JidError(f"The {what} is empty; expected platform:room, e.g. telegram:user/42.")
    if len(text) > MAX_JID_LENGTH:
        raise JidError(f"The {what} is longer than {MAX_JID_LENGTH} characters.")
    if _CONTROL.search(text):
        raise JidError(f"The {what} {text!r} contains a control character.")
    platform, sep, room = text.partition(":")
    if not sep:
        raise JidError(f"The {what} {text!r} has no ':'; expected platform:room.")
    if not _PLATFORM.fullmatch(platform):
        raise JidError(
            f"The {what} {text!r} has an invalid platform {platform!r}; "
            "platforms are lowercase letters, digits, '_' and '-'."
        )
    if not room:
        raise JidError(f"The {what} {text!r} has an empty room after ':'.")
    return Jid(platform, room)


def encode_id_part(part: str) -> str:
    """Percent-encode ``%`` and ``/`` so a platform id stays one path segment."""
    return part.replace("%", "%25").replace("/", "%2F")


def decode_id_part(part: str) -> str:
    """Undo :func:`encode_id_part`."""
    return part.replace("%2F", "/").replace("%2f", "/").replace("%25", "%")


def make_jid(platform: str, *parts: str) -> str:
    """Build a canonical address from a platform and raw (unencoded) id parts.

    ``make_jid("discord", "guild", "77", "channel", "5")`` → ``discord:guild/77/channel/5``.
    """
    return f"{platform}:" + "/".join(encode_id_part(p) for p in parts)
