"""Properties of the routing domain, checked with Hypothesis."""

from __future__ import annotations

import fnmatch
import random
import re
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from postroom.core import (
    KEYS,
    ChatState,
    Engagement,
    InvalidInput,
    MatchFields,
    Route,
    RouteIndex,
    RoutingMessage,
    Verb,
    compile_pattern,
    fields_of,
    parse_match,
    parse_target,
    resolve,
    sender_slug,
    validate_folder,
)

from routing_helpers import SPEC_FOLDERS, SPEC_TABLE, T0, TRIGGER, route

SLUG = re.compile(r"[a-z0-9_-]+")

# ---------------------------------------------------------------------------------------------
# '*' and '?' never match '/'.

#: Characters of a segment pattern made of literals, '*' and '?' only (no classes, no escapes):
#: within one segment, fnmatch then agrees with the spec, so it serves as the reference.
SEGMENT_CHARS = st.sampled_from(list("ab.:-*?"))
VALUE_CHARS = st.sampled_from(list("ab.:-/"))


@st.composite
def star_patterns(draw: st.DrawFn) -> str:
    segments = draw(
        st.lists(st.text(SEGMENT_CHARS, min_size=1, max_size=5), min_size=1, max_size=3)
    )
    return "/".join(segments)


def reference_holds(pattern: str, value: str) -> bool:
    """The subtree rule, segment by segment, with fnmatch on slash-free segments."""
    if not value:
        return False
    wanted = pattern.split("/")
    have = value.split("/")
    if len(have) < len(wanted):
        return False
    return all(fnmatch.fnmatchcase(v, p) for p, v in zip(wanted, have, strict=False))


@given(star_patterns(), st.text(VALUE_CHARS, max_size=12))
def test_star_and_qmark_never_match_slash(pattern: str, value: str) -> None:
    assert compile_pattern(pattern).holds(value) == reference_holds(pattern, value)


@given(
    st.text(st.sampled_from(list("ab*?")), min_size=1, max_size=6),
    st.text(VALUE_CHARS, min_size=1, max_size=12).filter(lambda v: "/" in v),
)
def test_one_segment_pattern_only_sees_the_first_segment(pattern: str, value: str) -> None:
    head = value.split("/", 1)[0]
    holds = compile_pattern(pattern).holds(value)
    assert holds == fnmatch.fnmatchcase(head, pattern)


@given(st.integers(min_value=1, max_value=5), st.text(VALUE_CHARS, min_size=1, max_size=10))
def test_qmarks_count_characters_of_the_first_segment(n: int, value: str) -> None:
    head = value.split("/", 1)[0]
    assert compile_pattern("?" * n).holds(value) == (len(head) == n)


# ---------------------------------------------------------------------------------------------
# {sender} expansion: empty, or one segment of [a-z0-9_-]+ with no '.'.

PLATFORM_NAMES = ["telegram", "discord", "slack", "email", "matrix", "web", "tui", "hook"]


@st.composite
def jid_like_senders(draw: st.DrawFn) -> str:
    platform = draw(st.one_of(st.sampled_from(PLATFORM_NAMES), st.text(max_size=4)))
    kind = draw(st.sampled_from(["user", "address", "account", "anon", "", ".."]))
    ident = draw(st.text(max_size=60))
    return f"{platform}:{kind}/{ident}"


@given(st.one_of(st.text(), jid_like_senders()))
def test_sender_expansion_is_empty_or_one_safe_segment(sender: str) -> None:
    slug = sender_slug(sender)
    if slug:
        assert SLUG.fullmatch(slug), slug
        assert "." not in slug
        assert "/" not in slug
    expanded = parse_target("atlas/{sender}").expand(sender)
    if slug:
        assert expanded == f"atlas/{slug}"
        assert validate_folder(expanded) == expanded
    else:
        assert expanded == ""


# ---------------------------------------------------------------------------------------------
# The parsers never fail with anything but InvalidInput.

GLOB_TEXT = st.text(st.sampled_from(list("ab09zé/*?[]!^\\-:#= {}._\t")), max_size=20)


@st.composite
def match_like(draw: st.DrawFn) -> str:
    tokens = draw(
        st.lists(
            st.tuples(
                st.sampled_from([*KEYS, "Room", "foo", ""]), st.sampled_from(["=", ""]), GLOB_TEXT
            ),
            max_size=4,
        )
    )
    return " ".join(f"{k}{eq}{p}" for k, eq, p in tokens)


@given(st.one_of(st.text(), GLOB_TEXT, match_like()))
def test_parse_match_returns_or_raises_invalid_input(text: str) -> None:
    try:
        expr = parse_match(text)
    except InvalidInput as exc:
        message = str(exc)
    else:
        message = "parsed"
        # A parsed expression can always be evaluated and re-parsed.
        expr.holds(fields_of("telegram:user/1", "telegram:user/1", "message"))
        assert str(parse_match(str(expr))) == str(expr)
    assert message.strip()


@given(st.one_of(st.text(), GLOB_TEXT, st.text(st.sampled_from(list("ab/#{}senderobv.A ")))))
def test_parse_target_returns_or_raises_invalid_input(text: str) -> None:
    try:
        target = parse_target(text)
    except InvalidInput as exc:
        message = str(exc)
    else:
        message = "parsed"
        assert parse_target(str(target)) == target
    assert message.strip()


# ---------------------------------------------------------------------------------------------
# Generated tables: literal, glob, platform, verb, sender-template and catch-all rows.

PLATFORMS = ["telegram", "discord", "slack", "x"]
SEGMENTS = ["user", "group", "guild", "dm", "channel", "5", "77", "a"]
VERBS = [v.value for v in Verb]
SEGMENT_GLOBS = ["*", "?", "g*", "*5", "[gu]*", "[!a]*", "?m", "[0-9]*", "gu?ld"]


def _path(parts: list[str]) -> str:
    return "/".join(parts)


room_values = st.lists(st.sampled_from([*SEGMENTS, ""]), max_size=4).map(_path)
chat_values = st.builds(lambda p, r: f"{p}:{r}", st.sampled_from(PLATFORMS), room_values)
sender_values = st.one_of(
    st.builds(
        lambda p, k, i: f"{p}:{k}/{i}",
        st.sampled_from(PLATFORMS),
        st.sampled_from(["user", "group"]),
        st.sampled_from(["5", "77", "a", "bob"]),
    ),
    st.sampled_from(["", "x:///", "tui-user"]),
)
message_fields = st.builds(fields_of, chat_values, sender_values, st.sampled_from(VERBS))

literal_paths = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3).map(_path)
glob_paths = st.lists(
    st.one_of(st.sampled_from(SEGMENTS), st.sampled_from(SEGMENT_GLOBS)), min_size=1, max_size=3
).map(_path)
path_patterns = st.one_of(literal_paths, glob_paths)

key_tests = st.one_of(
    st.builds(lambda p: f"platform={p}", st.sampled_from([*PLATFORMS, "d*", "*", "tele?ram", ""])),
    st.builds(lambda r: f"room={r}", st.one_of(path_patterns, st.just(""))),
    st.builds(lambda p, r: f"chat_jid={p}:{r}", st.sampled_from(PLATFORMS), path_patterns),
    st.builds(lambda p, r: f"chat_jid={p}:{r}", st.sampled_from(["*", "d*", "?"]), path_patterns),
    st.builds(lambda c: f"chat_jid={c}", chat_values.filter(lambda c: not c.endswith("/"))),
    st.builds(lambda s: f"sender={s}", sender_values.filter(lambda s: not s.endswith("/"))),
    st.builds(lambda s: f"sender={s}", st.sampled_from(["*:user/*", "discord:user", "*"])),
    st.builds(lambda v: f"verb={v}", st.sampled_from([*VERBS, "m*", "", "*"])),
)
match_texts = st.lists(key_tests, max_size=3).map(" ".join)
targets = st.sampled_from(["a", "b", "a/x", "c#observe", "a/{sender}", "{sender}", "b#t"])


@st.composite
def route_tables(draw: st.DrawFn) -> list[Route]:
    specs = draw(
        st.lists(
            st.tuples(st.integers(min_value=-2, max_value=3), match_texts, targets), max_size=12
        )
    )
    ids = draw(st.permutations(range(1, len(specs) + 1)))
    return [
        route(rid, seq, match, target) for rid, (seq, match, target) in zip(ids, specs, strict=True)
    ]


def naive_first_match(
    routes: list[Route], fields: MatchFields
) -> tuple[int | None, str, list[int]]:
    skipped: list[int] = []
    for row in sorted(routes, key=lambda r: (r.seq, r.id)):
        if not row.match.holds(fields):
            continue
        folder = row.target.expand(fields.sender)
        if folder:
            return row.id, folder, skipped
        skipped.append(row.id)
    return None, "", skipped


@given(route_tables(), st.lists(message_fields, min_size=1, max_size=8))
def test_index_first_match_equals_linear_scan(routes: list[Route], many: list[MatchFields]) -> None:
    index = RouteIndex(routes)
    for fields in many:
        hit = index.first_match(fields)
        expected_id, expected_folder, expected_skipped = naive_first_match(routes, fields)
        assert (hit.route.id if hit.route else None) == expected_id, fields
        assert hit.folder == expected_folder
        assert list(hit.skipped) == expected_skipped


#: Concrete segments to instantiate patterns with (chat heads carry the platform).
SEGMENT_POOL = [
    *SEGMENTS,
    "gild",
    "5x",
    "m",
    "bob",
    *(f"{p}:{s}" for p in PLATFORMS for s in SEGMENTS),
]
EXTRA_SEGMENTS: list[list[str]] = [[], ["5"], ["channel", "3"], ["a", "b", "c"]]


def instantiate(source: str, pool: list[str], data: st.DataObject) -> str:
    """A value the pattern is likely to hold for: each segment replaced by a pool value that
    matches it, then maybe deeper segments (the subtree rule)."""
    if not source:
        return ""
    parts: list[str] = []
    for segment in source.split("/"):
        compiled = compile_pattern(segment)
        fits = [c for c in pool if compiled.holds(c)]
        parts.append(data.draw(st.sampled_from(fits or pool)))
    if pool is SEGMENT_POOL:
        parts += data.draw(st.sampled_from(EXTRA_SEGMENTS))
    return "/".join(parts)


def fields_near(row: Route, data: st.DataObject) -> MatchFields:
    """Message fields built from a row's own patterns, so that rows of every kind get hit."""
    platform = data.draw(st.sampled_from(PLATFORMS))
    room = data.draw(room_values)
    chat: str | None = None
    sender = data.draw(sender_values)
    verb = data.draw(st.sampled_from(VERBS))
    for test in row.match.tests:
        source = test.pattern.source
        if test.key == "platform":
            platform = instantiate(source, [*PLATFORMS, "dx"], data)
        elif test.key == "verb":
            verb = instantiate(source, VERBS, data)
        elif test.key == "room":
            room = instantiate(source, SEGMENT_POOL, data)
        elif test.key == "chat_jid":
            chat = instantiate(source, SEGMENT_POOL, data)
        else:
            sender = instantiate(source, SEGMENT_POOL, data)
    if chat is None or data.draw(st.booleans()):
        chat = f"{platform}:{room}"
    return fields_of(chat, sender, verb)


@given(route_tables(), st.data())
def test_index_first_match_equals_linear_scan_for_messages_aimed_at_rows(
    routes: list[Route], data: st.DataObject
) -> None:
    index = RouteIndex(routes)
    for row in routes:
        fields = fields_near(row, data)
        hit = index.first_match(fields)
        expected_id, expected_folder, expected_skipped = naive_first_match(routes, fields)
        assert (hit.route.id if hit.route else None) == expected_id, fields
        assert hit.folder == expected_folder
        assert list(hit.skipped) == expected_skipped


# ---------------------------------------------------------------------------------------------
# resolve is deterministic, and only the (seq, id) order of the table matters.

FOLDER_POOL = ["a", "a/x", "a/x/y", "b", "c", "main", "a/tg-5", "a/dc-bob"]
CONTENTS = [
    "hi",
    "@",
    "@x",
    "@a/x",
    "@b",
    "@x do it",
    "#",
    "#t",
    "#t now",
    "/new",
    "/chatid",
    "@Postroom hi",
    "  ",
]


@st.composite
def chat_states(draw: st.DrawFn) -> ChatState:
    engagements: dict[str, Engagement] = {}
    for topic in draw(st.lists(st.sampled_from(["", "t", "u"]), max_size=2, unique=True)):
        minutes = draw(st.integers(min_value=-5, max_value=5))
        engagements[topic] = Engagement(
            draw(st.sampled_from(FOLDER_POOL)), T0 + timedelta(minutes=minutes)
        )
    return ChatState(
        sticky_group=draw(st.one_of(st.none(), st.sampled_from(FOLDER_POOL))),
        sticky_topic=draw(st.one_of(st.none(), st.sampled_from(["t", "u"]))),
        engagements=engagements,
    )


@st.composite
def routing_messages(draw: st.DrawFn) -> RoutingMessage:
    fields = draw(message_fields)
    chat = draw(st.one_of(st.just(fields.chat_jid), st.sampled_from(["tui:a", "tui:nosuch"])))
    return RoutingMessage(
        chat_jid=chat,
        sender=fields.sender,
        content=draw(st.sampled_from(CONTENTS)),
        verb=fields.verb,
        mentioned=draw(st.booleans()),
        native_topic=draw(st.sampled_from(["", "t", "1712345678.123456"])),
    )


@given(
    route_tables(),
    routing_messages(),
    chat_states(),
    st.sets(st.sampled_from(FOLDER_POOL)),
    st.randoms(use_true_random=False),
)
def test_resolve_is_deterministic_and_independent_of_row_order(
    routes: list[Route],
    message: RoutingMessage,
    state: ChatState,
    folders: set[str],
    rng: random.Random,
) -> None:
    index = RouteIndex(routes)
    first = resolve(message, index, state, folders, now=T0, trigger=TRIGGER)
    again = resolve(message, index, state, frozenset(folders), now=T0, trigger=TRIGGER)
    assert again == first
    shuffled = list(routes)
    rng.shuffle(shuffled)
    other = resolve(message, RouteIndex(shuffled), state, folders, now=T0, trigger=TRIGGER)
    assert other == first
    assert other.to_dict() == first.to_dict()


@given(
    st.one_of(chat_values, st.text(max_size=30)),
    st.text(max_size=20),
    st.text(max_size=40),
    st.text(max_size=20),
    st.sampled_from([*VERBS, ""]),
)
def test_resolve_never_raises_on_arbitrary_text(
    chat_jid: str, sender: str, content: str, native_topic: str, verb: str
) -> None:
    message = RoutingMessage(
        chat_jid=chat_jid, sender=sender, content=content, verb=verb, native_topic=native_topic
    )
    decision = resolve(message, SPEC_TABLE, ChatState(), SPEC_FOLDERS, now=T0, trigger=TRIGGER)
    assert decision.verb
    assert set(decision.to_dict()) >= {"action", "layer", "reason"}
    if decision.topic:
        assert re.fullmatch(r"[a-z0-9_-]+", decision.topic)
