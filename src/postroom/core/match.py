"""Route match expressions: whitespace-separated ``key=pattern`` tests, all of which must hold.

Exactly five keys exist: ``platform`` (text before the first ``:`` of the chat JID), ``room``
(text after it), ``chat_jid``, ``sender`` and ``verb``. An empty expression matches every
message. Validation happens here, when a route is written, never at match time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from postroom.core.errors import MatchSyntaxError
from postroom.core.glob import GlobError, Pattern, compile_pattern
from postroom.core.jid import split_jid
from postroom.core.messages import Verb

__all__ = [
    "KEYS",
    "MAX_MATCH_LENGTH",
    "Fields",
    "MatchExpr",
    "MatchFields",
    "MatchTest",
    "fields_of",
    "parse_match",
]

KEYS: tuple[str, ...] = ("platform", "room", "chat_jid", "sender", "verb")
_KEY_INDEX = {key: i for i, key in enumerate(KEYS)}
MAX_MATCH_LENGTH = 4096
_VERBS = frozenset(v.value for v in Verb)
_PLATFORM = re.compile(r"[a-z0-9_-]+")


#: The five values a match expression tests, in the order of :data:`KEYS`. Routing builds a
#: plain tuple per message (a NamedTuple costs eight times as much to construct);
#: :class:`MatchFields` is the same shape with names, for code that is not on the hot path.
Fields = tuple[str, str, str, str, str]


class MatchFields(NamedTuple):
    """The five values a match expression tests, in the order of :data:`KEYS`."""

    platform: str
    room: str
    chat_jid: str
    sender: str
    verb: str


def fields_of(chat_jid: str, sender: str, verb: str) -> MatchFields:
    """The match fields of a message (platform and room derive from the chat JID)."""
    platform, room = split_jid(chat_jid)
    return MatchFields(platform, room, chat_jid, sender, verb)


@dataclass(frozen=True, slots=True)
class MatchTest:
    """One ``key=pattern`` test."""

    key: str
    #: Position of the key in :class:`MatchFields`.
    index: int
    pattern: Pattern

    def __str__(self) -> str:
        return f"{self.key}={self.pattern.source}"


@dataclass(frozen=True, slots=True)
class MatchExpr:
    """A parsed match expression; ``str()`` gives its normalized text."""

    tests: tuple[MatchTest, ...]

    def __str__(self) -> str:
        return " ".join(str(t) for t in self.tests)

    def holds(self, fields: Fields) -> bool:
        """Whether every test holds for the message's fields."""
        # A plain loop: all() over a generator costs a frame per row on the routing hot path.
        for test in self.tests:  # noqa: SIM110
            if not test.pattern.holds(fields[test.index]):
                return False
        return True

    def patterns_for(self, key: str) -> tuple[Pattern, ...]:
        return tuple(t.pattern for t in self.tests if t.key == key)


def parse_match(text: str) -> MatchExpr:
    """Parse a match expression or raise :class:`MatchSyntaxError` with a precise reason."""
    if not isinstance(text, str):
        raise MatchSyntaxError("The match expression must be text.")
    if len(text) > MAX_MATCH_LENGTH:
        raise MatchSyntaxError(
            f"The match expression is {len(text)} characters long; the limit is {MAX_MATCH_LENGTH}."
        )
    tests: list[MatchTest] = []
    for token in text.split():
        key, eq, source = token.partition("=")
        if not eq:
            raise MatchSyntaxError(
                f"Match token {token!r} has no '='; write key=pattern with a key of "
                f"{', '.join(KEYS)}."
            )
        if key not in _KEY_INDEX:
            hint = " (keys are lowercase)" if key.lower() in _KEY_INDEX else ""
            raise MatchSyntaxError(
                f"Unknown match key {key!r}{hint}; the keys are {', '.join(KEYS)}."
            )
        try:
            pattern = compile_pattern(source)
        except GlobError as exc:
            raise MatchSyntaxError(f"Bad pattern for {key}: {exc}.") from exc
        _check_literal(key, pattern)
        tests.append(MatchTest(key, _KEY_INDEX[key], pattern))
    return MatchExpr(tuple(tests))


def _check_literal(key: str, pattern: Pattern) -> None:
    """Catch typos that could never match: an unknown verb, an impossible platform name."""
    literal = pattern.literal
    if literal is None or literal == "":
        return
    if key == "verb" and literal not in _VERBS:
        raise MatchSyntaxError(
            f"Unknown verb {literal!r}; the verbs are {', '.join(sorted(_VERBS))}."
        )
    if key == "platform" and not _PLATFORM.fullmatch(literal):
        raise MatchSyntaxError(
            f"Platform {literal!r} can never match: platform names are lowercase letters, "
            "digits, '_' and '-'."
        )
