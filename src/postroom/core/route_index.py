"""The route table and its in-memory index.

Rows are evaluated in order ``seq ASC, id ASC``; the first row whose match holds and whose
target expands to a non-empty folder wins. Scanning every row per message would make a table of
10,000 rows a thousand times slower than one of ten, so each row is filed under the most
selective literal it requires, and a message only looks at the buckets its own values can reach:

* ``chat_jid`` — the leading literal segments of a ``chat_jid`` pattern, or ``platform:room``
  built from a literal ``platform`` and the leading literal segments of a ``room`` pattern;
* ``room``, ``sender`` — leading literal segments of those patterns;
* ``platform`` — a literal platform (also the literal platform prefix of a ``chat_jid`` glob);
* ``verb`` — a literal verb;
* everything else is checked for every message.

A pattern whose first *k* segments are literal can only hold for values whose first *k*
segments are exactly those (:mod:`postroom.core.glob`), so looking a value's segment prefixes up
in a bucket finds every row that could match it. Candidates are then tested in table order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from postroom.core.match import Fields, MatchExpr
from postroom.core.target import Target, sender_slug

__all__ = ["Hit", "Route", "RouteIndex"]

_LITERAL_PLATFORM = re.compile(r"[a-z0-9_-]+")
#: Up to this many always-checked rows are copied into every bucket (see __init__).
_MERGE_ALWAYS_MAX = 8
#: Chats whose candidate buckets are remembered; the memo starts over when full, so memory
#: stays bounded however many chats there are.
_CHAT_MEMO_MAX = 65_536


@dataclass(frozen=True, slots=True)
class Route:
    """One parsed row of the route table."""

    id: int
    seq: int
    match: MatchExpr
    target: Target
    created_at: datetime | None = None
    created_by: str = ""

    @property
    def match_text(self) -> str:
        return str(self.match)

    @property
    def target_text(self) -> str:
        return str(self.target)

    def describe(self) -> str:
        """``row 2 (seq 0) matched platform=telegram → atlas`` (the start of a reason)."""
        what = self.match_text or "every message"
        return f"row {self.id} (seq {self.seq}) matched {what} → {self.target_text}"


@dataclass(slots=True)  # built per message: not frozen, see Decision
class Hit:
    """The row that gave the home folder (``None`` on a miss), the folder it expanded to, and
    the rows skipped on the way because ``{sender}`` expanded to nothing."""

    route: Route | None
    folder: str = ""
    skipped: tuple[int, ...] = ()
    description: str = ""


class RouteIndex:
    """An immutable, indexed route table. Build a new one on every route write."""

    __slots__ = (
        "_always",
        "_always_merged",
        "_by_chat",
        "_by_platform",
        "_by_room",
        "_by_sender",
        "_by_verb",
        "_chat_lookups",
        "_chat_memo",
        "_depth_chat",
        "_depth_room",
        "_depth_sender",
        "_tests",
        "descriptions",
        "routes",
    )

    def __init__(self, routes: Iterable[Route]) -> None:
        ordered = sorted(routes, key=lambda r: (r.seq, r.id))
        self.routes: tuple[Route, ...] = tuple(ordered)
        #: ``route.describe()`` per rank, computed once per table rather than per message.
        self.descriptions: tuple[str, ...] = tuple(route.describe() for route in ordered)
        self._tests = tuple(_test_of(route.match) for route in ordered)
        by_chat: dict[str, list[int]] = {}
        by_room: dict[str, list[int]] = {}
        by_sender: dict[str, list[int]] = {}
        by_platform: dict[str, list[int]] = {}
        by_verb: dict[str, list[int]] = {}
        always: list[int] = []
        for rank, route in enumerate(ordered):
            bucket, key = index_key(route.match)
            target = {
                "chat_jid": by_chat,
                "room": by_room,
                "sender": by_sender,
                "platform": by_platform,
                "verb": by_verb,
            }.get(bucket)
            if target is None:
                always.append(rank)
            else:
                target.setdefault(key, []).append(rank)
        # Each bucket also holds the always-checked rows (when there are few, as with the usual
        # single catch-all), so a message that reaches one bucket needs no merge and no sort.
        extra = always if len(always) <= _MERGE_ALWAYS_MAX else []

        def freeze(buckets: dict[str, list[int]]) -> dict[str, tuple[int, ...]]:
            return {k: tuple(sorted({*v, *extra})) for k, v in buckets.items()}

        self._by_chat = freeze(by_chat)
        self._by_room = freeze(by_room)
        self._by_sender = freeze(by_sender)
        self._by_platform = freeze(by_platform)
        self._by_verb = freeze(by_verb)
        self._always = tuple(always)
        self._depth_chat = _max_depth(by_chat)
        self._depth_room = _max_depth(by_room)
        self._depth_sender = _max_depth(by_sender)
        self._always_merged = len(always) <= _MERGE_ALWAYS_MAX
        # Only the kinds of bucket this table uses are looked up, with positions in Fields.
        self._chat_lookups = tuple(
            (buckets, position, depth)
            for buckets, position, depth in (
                (self._by_chat, 2, self._depth_chat),
                (self._by_room, 1, self._depth_room),
            )
            if buckets
        )
        self._chat_memo: dict[str, tuple[tuple[int, ...], ...]] = {}

    def __len__(self) -> int:
        return len(self.routes)

    def first_match(self, fields: Fields) -> Hit:
        """The first row (table order) whose match holds and whose target expands non-empty."""
        rank, folder, skipped = self.lookup(fields)
        if rank < 0:
            return Hit(None, "", skipped)
        return Hit(self.routes[rank], folder, skipped, self.descriptions[rank])

    def lookup(self, fields: Fields) -> tuple[int, str, tuple[int, ...]]:
        """:meth:`first_match` as a bare tuple for the routing hot path: ``(rank, folder,
        skipped ids)``, rank ``-1`` on a miss; ``routes[rank]`` and ``descriptions[rank]``
        give the row and its description.

        Written as one function on purpose: a Python call costs about as much as everything
        else here, so gathering candidates and testing them happen inline.
        """
        # 1. The buckets this message's values can reach. Those reached through the chat JID
        # (chat_jid, room and platform buckets) are remembered per chat: chats recur, and the
        # prefix walk is the costliest part of a lookup.
        chat_jid = fields[2]
        by_chat = self._chat_memo.get(chat_jid)
        if by_chat is None:
            by_chat = self._chat_buckets(fields)
            if len(self._chat_memo) >= _CHAT_MEMO_MAX:
                self._chat_memo.clear()
            self._chat_memo[chat_jid] = by_chat
        found = list(by_chat)
        if self._by_sender:
            _collect(self._by_sender, fields[3], self._depth_sender, found)
        if self._by_verb:
            bucket = self._by_verb.get(fields[4])
            if bucket:
                found.append(bucket)
        candidates: Sequence[int]
        if not found:
            candidates = self._always
        elif len(found) == 1 and self._always_merged:
            candidates = found[0]
        else:
            merged: set[int] = set(self._always)
            for bucket in found:
                merged.update(bucket)
            candidates = sorted(merged)
        # 2. The first candidate, in table order, that matches and expands.
        routes = self.routes
        tests = self._tests
        skipped: tuple[int, ...] = ()
        slug: str | None = None
        for rank in candidates:
            position, literal, below, match = tests[rank]
            if match is None:
                if position >= 0:  # one literal test: a string comparison
                    value = fields[position]
                    if value != literal and not value.startswith(below):
                        continue
            elif not match.holds(fields):
                continue
            target = routes[rank].target
            if target.template_index is None:
                return rank, target.folder, skipped
            if slug is None:
                slug = sender_slug(fields[3])
            if not slug:
                skipped += (routes[rank].id,)
                continue
            return rank, target.expand(fields[3]), skipped
        return -1, "", skipped

    def _chat_buckets(self, fields: Fields) -> tuple[tuple[int, ...], ...]:
        """The buckets reachable from the chat JID alone (its prefixes, its room's, its
        platform)."""
        found: list[tuple[int, ...]] = []
        for buckets, position, depth in self._chat_lookups:
            _collect(buckets, fields[position], depth, found)
        if self._by_platform:
            bucket = self._by_platform.get(fields[0])
            if bucket:
                found.append(bucket)
        return tuple(found)

    def ranks_for(self, values: Mapping[str, Iterable[str]]) -> list[int]:
        """Ranks of rows that could match any message whose fields are among *values*.

        Used to find the rows that could shadow a given row without comparing every pair.
        """
        found: list[tuple[int, ...]] = [self._always]
        for value in values.get("chat_jid", ()):
            _collect(self._by_chat, value, self._depth_chat, found)
        for value in values.get("room", ()):
            _collect(self._by_room, value, self._depth_room, found)
        for value in values.get("sender", ()):
            _collect(self._by_sender, value, self._depth_sender, found)
        for value in values.get("platform", ()):
            found.append(self._by_platform.get(value, ()))
        for value in values.get("verb", ()):
            found.append(self._by_verb.get(value, ()))
        return sorted({rank for bucket in found for rank in bucket})


def index_key(match: MatchExpr) -> tuple[str, str]:
    """The bucket a row is filed under: ``(kind, key)``, or ``("always", "")``."""
    chat_best: str | None = None
    room_best: str | None = None
    sender_best: str | None = None
    platform: str | None = None
    verb: str | None = None
    for test in match.tests:
        pattern = test.pattern
        if test.key == "chat_jid":
            lead = pattern.leading_literal()
            if lead is not None and (chat_best is None or len(lead) > len(chat_best)):
                chat_best = lead
            elif lead is None and pattern.segments:
                head, colon, _ = pattern.segments[0].source.partition(":")
                if colon and _LITERAL_PLATFORM.fullmatch(head):
                    platform = platform or head
        elif test.key == "room":
            lead = pattern.leading_literal()
            if lead is not None and (room_best is None or len(lead) > len(room_best)):
                room_best = lead
        elif test.key == "sender":
            lead = pattern.leading_literal()
            if lead is not None and (sender_best is None or len(lead) > len(sender_best)):
                sender_best = lead
        elif test.key == "platform":
            if pattern.literal:
                platform = pattern.literal
        elif test.key == "verb" and pattern.literal:
            verb = pattern.literal
    if chat_best is not None:
        return "chat_jid", chat_best
    if platform is not None and room_best is not None:
        return "chat_jid", f"{platform}:{room_best}"
    if room_best is not None:
        return "room", room_best
    if sender_best is not None:
        return "sender", sender_best
    if platform is not None:
        return "platform", platform
    if verb is not None:
        return "verb", verb
    return "always", ""


def _max_depth(buckets: dict[str, list[int]]) -> int:
    return max((key.count("/") + 1 for key in buckets), default=0)


def _collect(
    buckets: dict[str, tuple[int, ...]], value: str, depth: int, out: list[tuple[int, ...]]
) -> None:
    """Add the buckets filed under *value* and each of its segment prefixes (up to *depth*)."""
    if not value:
        return
    found = buckets.get(value)
    if found:
        out.append(found)
    start = 0
    for _ in range(depth):
        cut = value.find("/", start)
        if cut < 0:
            break
        found = buckets.get(value[:cut])
        if found:
            out.append(found)
        start = cut + 1


_Test = tuple[int, str, str, MatchExpr | None]


def _test_of(match: MatchExpr) -> _Test:
    """How the hot loop tests a row: ``(position, literal, literal + "/", None)`` for a row of
    one non-empty literal test (most of a large table), ``(-1, "", "", None)`` for the empty
    match, else ``(-1, "", "", match)`` to call :meth:`MatchExpr.holds`."""
    tests = match.tests
    if not tests:
        return (-1, "", "", None)
    if len(tests) == 1 and tests[0].pattern.literal:
        literal = tests[0].pattern.literal
        return (tests[0].index, literal, literal + "/", None)
    return (-1, "", "", match)
