"""Annotations of ``list_routes`` (ROUTING §6): each row's mode, what it fires on (``never``
for an observe row), and the earlier row that shadows it.

Row *E* shadows a later row *R* when *E* matches every message *R* could match and always wins
when it matches (its target has no ``{sender}``, which could expand to nothing and be skipped).
Inclusion is decided test by test: every test of *E* must be implied by some test of *R* on the
same key. ``platform`` and ``room`` are also read off a ``chat_jid`` pattern with a literal
platform, and the other way round, so ``platform=telegram`` is seen to shadow a later
``chat_jid=telegram:user/5``. Where inclusion cannot be shown, no shadow is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postroom.core.glob import GlobError, Pattern, compile_pattern
from postroom.core.match import MatchExpr
from postroom.core.messages import Verb
from postroom.core.route_index import Route, RouteIndex
from postroom.core.target import Mode

__all__ = ["RouteAnnotation", "annotate_routes", "fires_on"]

_LITERAL_PLATFORM = re.compile(r"[a-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class RouteAnnotation:
    route: Route
    mode: Mode
    fires_on: str
    shadowed_by: int | None


def fires_on(match: MatchExpr) -> str:
    """``every message``, ``mentions only`` or ``verb <v>``."""
    verbs = match.patterns_for("verb")
    if not verbs:
        return "every message"
    pattern = verbs[0]
    if pattern.literal == Verb.MENTION.value:
        return "mentions only"
    return f"verb {pattern.source or '(empty)'}"


def annotate_routes(index: RouteIndex) -> list[RouteAnnotation]:
    """Annotate every row of *index*, in table order."""
    implied = [_implied(route.match) for route in index.routes]
    out: list[RouteAnnotation] = []
    for rank, route in enumerate(index.routes):
        shadow: int | None = None
        mine = implied[rank]
        for earlier in _earlier_candidates(index, rank, mine):
            if earlier.target.is_template:
                continue
            if _covers(earlier.match, mine):
                shadow = earlier.id
                break
        mode = route.target.mode
        # An observe row stores what it matches but never starts a turn (ROUTING §6).
        fires = "never" if mode is Mode.OBSERVE else fires_on(route.match)
        out.append(RouteAnnotation(route, mode, fires, shadow))
    return out


_Implied = dict[str, list[Pattern]]


def _implied(match: MatchExpr) -> _Implied:
    """Patterns a row's match implies, per key, including ones derived across keys."""
    implied: _Implied = {}
    for test in match.tests:
        implied.setdefault(test.key, []).append(test.pattern)
    for pattern in list(implied.get("chat_jid", ())):
        if not pattern.segments:
            continue
        head, colon, tail = pattern.source.partition(":")
        if colon and _LITERAL_PLATFORM.fullmatch(head) and tail:
            implied.setdefault("platform", []).append(compile_pattern(head))
            _add(implied, "room", tail)
    for platform in implied.get("platform", ()):
        if platform.literal:
            for room in list(implied.get("room", ())):
                if room.source:
                    _add(implied, "chat_jid", f"{platform.literal}:{room.source}")
    return implied


def _add(implied: _Implied, key: str, source: str) -> None:
    try:
        implied.setdefault(key, []).append(compile_pattern(source))
    except GlobError:
        return


def _covers(earlier: MatchExpr, later: _Implied) -> bool:
    for test in earlier.tests:
        candidates = later.get(test.key, ())
        if not any(test.pattern.includes(p) for p in candidates):
            return False
    return True


def _earlier_candidates(index: RouteIndex, rank: int, implied: _Implied) -> list[Route]:
    """Earlier rows that could cover this one: those its own literal values would look up."""
    if rank == 0:
        return []
    values: dict[str, list[str]] = {}
    for key, patterns in implied.items():
        values[key] = [lead for p in patterns if (lead := p.leading_literal()) is not None]
    return [index.routes[r] for r in index.ranks_for(values) if r < rank]
