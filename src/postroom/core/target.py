"""Route targets (``folder[#fragment]``) and ``{sender}`` expansion (ROUTING §2.2, §2.3).

The mode is a fragment of the target: none or empty fires a turn, ``#observe`` stores the
message for context without a turn, any other ``#topic`` fires with that topic pinned.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum

from postroom.core.errors import FolderNameError, TargetSyntaxError
from postroom.core.folders import MAX_FOLDER_DEPTH, MAX_FOLDER_LENGTH, check_segment

__all__ = [
    "SENDER_SLUG_MAX",
    "SENDER_TEMPLATE",
    "SHORT_CODES",
    "Mode",
    "Target",
    "parse_target",
    "sender_slug",
]

SENDER_TEMPLATE = "{sender}"
SENDER_SLUG_MAX = 48
#: A lossy id keeps this many characters before its ``-<fingerprint>`` (48 in all).
_LOSSY_KEEP = 39
_FINGERPRINT_HEX = 8
SHORT_CODES: dict[str, str] = {
    "telegram": "tg",
    "whatsapp": "wa",
    "discord": "dc",
    "slack": "sl",
    "email": "em",
    "matrix": "mx",
    "mastodon": "ma",
    "web": "web",
    "tui": "tui",
    "hook": "hk",
}
_PERSON_KINDS = frozenset({"user", "address", "account"})
_NOT_SLUG = re.compile(r"[^a-z0-9_]+")
_TOPIC = re.compile(r"[a-z0-9_-]+")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


class Mode(StrEnum):
    """What a route does with the messages it catches."""

    FIRE = "fire"
    OBSERVE = "observe"
    TOPIC = "topic"


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed target. ``folder`` may hold one ``{sender}`` segment."""

    folder: str
    mode: Mode
    #: The pinned topic of a ``#topic`` target, else ``""``.
    topic: str = ""
    #: Index of the ``{sender}`` segment, or ``None`` for a plain folder.
    template_index: int | None = None
    #: The path before ``{sender}`` (``""`` when it is the first segment); ``None`` if plain.
    template_parent: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.template_index is not None:
            parent = "/".join(self.folder.split("/")[: self.template_index])
            object.__setattr__(self, "template_parent", parent)

    def __str__(self) -> str:
        if self.mode is Mode.OBSERVE:
            return f"{self.folder}#observe"
        if self.mode is Mode.TOPIC:
            return f"{self.folder}#{self.topic}"
        return self.folder

    @property
    def is_template(self) -> bool:
        return self.template_index is not None

    def expand(self, sender: str) -> str:
        """The folder for *sender*; ``""`` when the sender yields an empty id (row skipped)."""
        if self.template_index is None:
            return self.folder
        slug = sender_slug(sender)
        if not slug:
            return ""
        return self.folder.replace(SENDER_TEMPLATE, slug)


def parse_target(text: str) -> Target:
    """Parse ``folder[#fragment]`` or raise :class:`TargetSyntaxError` with a precise reason."""
    if not isinstance(text, str):
        raise TargetSyntaxError("The target must be text like atlas or main#observe.")
    if not text:
        raise TargetSyntaxError("The target is empty; write a folder such as main or atlas/dm.")
    if any(ch.isspace() for ch in text):
        raise TargetSyntaxError(f"Target {text!r} contains whitespace.")
    folder, _, fragment = text.partition("#")
    if "#" in fragment:
        raise TargetSyntaxError(f"Target {text!r} has more than one '#'.")
    if not folder:
        raise TargetSyntaxError(f"Target {text!r} names no folder before '#'.")
    if len(folder) > MAX_FOLDER_LENGTH:
        raise TargetSyntaxError(f"Target folder is longer than {MAX_FOLDER_LENGTH} characters.")
    segments = folder.split("/")
    if len(segments) > MAX_FOLDER_DEPTH:
        raise TargetSyntaxError(f"Target folder {folder!r} is deeper than {MAX_FOLDER_DEPTH}.")
    template_index: int | None = None
    for i, segment in enumerate(segments):
        if segment == SENDER_TEMPLATE:
            if template_index is not None:
                raise TargetSyntaxError(f"Target {text!r} uses {{sender}} more than once.")
            template_index = i
            continue
        if "{" in segment or "}" in segment:
            raise TargetSyntaxError(
                f"Target {text!r}: the only template is a whole segment {{sender}}, "
                f"not {segment!r}."
            )
        try:
            check_segment(segment, folder, what="Target folder")
        except FolderNameError as exc:
            raise TargetSyntaxError(str(exc)) from exc
    if fragment == "":
        return Target(folder, Mode.FIRE, "", template_index)
    if fragment == "observe":
        return Target(folder, Mode.OBSERVE, "", template_index)
    if not _TOPIC.fullmatch(fragment):
        raise TargetSyntaxError(
            f"Target {text!r} has fragment {fragment!r}; use #observe or a topic of "
            "a-z, 0-9, '_' and '-'."
        )
    return Target(folder, Mode.TOPIC, fragment, template_index)


def _slug(text: str) -> str:
    return _NOT_SLUG.sub("-", text.lower())


def sender_slug(sender: str) -> str:
    """``{sender}`` as one folder segment: ``<short>-<id>``, or ``""`` when the id is empty.

    The id is the sender's room without a leading person kind (``user``, ``address``,
    ``account``), lowercased, every run of characters outside ``[a-z0-9_]`` turned into one
    ``-``, cut to 48 characters and trimmed of ``-``. The result is always ``[a-z0-9_-]*`` and
    can never hold ``/`` or ``.``: a sender cannot steer a message out of the folder tree.

    A lossy id — the room holds a character outside printable ASCII, or the cut dropped
    characters — keeps 39 characters and gets ``-`` and 8 hex digits of the room's sha256:
    ``alice`` with a zero-width space, a Cyrillic a (U+0430), or two long addresses sharing their
    first 48 characters would otherwise share one folder (and its memory).
    """
    platform, sep, room = sender.partition(":")
    if sep:
        short = SHORT_CODES.get(platform)
        if short is None:
            short = _slug(platform[:2]).strip("-")
    else:
        short, room = "", sender
    kind, _, rest = room.partition("/")
    if kind in _PERSON_KINDS:
        room = rest
    slugged = _slug(room)
    ident = slugged[:SENDER_SLUG_MAX].strip("-")
    lossy = len(slugged) > SENDER_SLUG_MAX or not _PRINTABLE_ASCII.fullmatch(room)
    if lossy and room:
        digest = hashlib.sha256(room.encode("utf-8", "surrogatepass")).hexdigest()
        kept = ident[:_LOSSY_KEEP].strip("-")
        ident = f"{kept}-{digest[:_FINGERPRINT_HEX]}" if kept else digest[:_FINGERPRINT_HEX]
    if not ident:
        return ""
    return f"{short}-{ident}" if short else ident
