"""Match expressions (ROUTING §2.1): parsing, the five keys, AND semantics, validation."""

from __future__ import annotations

import pytest

from postroom.core import (
    KEYS,
    InvalidInput,
    MatchFields,
    MatchSyntaxError,
    fields_of,
    parse_match,
)

from routing_helpers import msg, run, table


def fields(
    chat_jid: str = "discord:guild/77/channel/3",
    sender: str = "discord:user/alice",
    verb: str = "message",
) -> MatchFields:
    return fields_of(chat_jid, sender, verb)


def test_exactly_five_keys() -> None:
    assert set(KEYS) == {"platform", "room", "chat_jid", "sender", "verb"}


def test_fields_of_splits_the_chat_jid_at_the_first_colon() -> None:
    f = fields_of("matrix:room/!abc:example.org", "matrix:user/@bob:example.org", "reply")
    assert f.platform == "matrix"
    assert f.room == "room/!abc:example.org"
    assert f.chat_jid == "matrix:room/!abc:example.org"
    assert f.sender == "matrix:user/@bob:example.org"
    assert f.verb == "reply"


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_empty_match_matches_every_message(text: str) -> None:
    expr = parse_match(text)
    assert expr.tests == ()
    assert expr.holds(fields())
    assert expr.holds(fields_of("x:y", "", "post"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("platform=discord", True, id="platform"),
        pytest.param("platform=disc", False, id="platform-no-prefix-match"),
        pytest.param("platform=discord?", False, id="platform-longer"),
        pytest.param("room=guild/77", True, id="room-subtree"),
        pytest.param("room=guild/*/channel/3", True, id="room-glob"),
        pytest.param("room=discord:guild", False, id="room-excludes-platform"),
        pytest.param("chat_jid=discord:guild/77/channel/3", True, id="chat-jid-exact"),
        pytest.param("chat_jid=discord:guild", True, id="chat-jid-subtree"),
        pytest.param("chat_jid=discord:*", True, id="chat-jid-platform-glob"),
        pytest.param("sender=discord:user/alice", True, id="sender"),
        pytest.param("sender=discord:user/bob", False, id="sender-other"),
        pytest.param("sender=discord:user", True, id="sender-subtree"),
        pytest.param("verb=message", True, id="verb"),
        pytest.param("verb=mention", False, id="verb-other"),
        pytest.param("platform=discord room=guild/*", True, id="and-both-hold"),
        pytest.param("platform=discord room=dm/*", False, id="and-one-fails"),
        pytest.param("room=guild/* room=*/77", True, id="repeated-key-both-hold"),
        pytest.param("room=guild/* room=*/78", False, id="repeated-key-one-fails"),
        pytest.param("platform=discord verb=message sender=*", True, id="three-keys"),
    ],
)
def test_match_holds(text: str, expected: bool) -> None:
    assert parse_match(text).holds(fields()) is expected


def test_empty_pattern_holds_only_on_an_empty_field() -> None:
    expr = parse_match("sender=")
    assert expr.holds(fields(sender=""))
    assert not expr.holds(fields(sender="discord:user/alice"))


def test_empty_room_pattern_does_not_hold_for_a_room_starting_with_slash() -> None:
    # ROUTING §2.1: "`key=` (empty pattern) holds iff the field is empty."
    expr = parse_match("room=")
    assert expr.holds(fields(chat_jid="web:"))
    assert not expr.holds(fields(chat_jid="web:/x"))


def test_empty_room_row_does_not_catch_a_non_empty_room_in_resolve() -> None:
    routes = table([(1, 0, "room=", "atlas"), (2, 1, "", "main")])
    assert run(msg("web:", "hi"), routes).route_id == 1
    assert run(msg("web:/x", "hi"), routes).route_id == 2


def test_non_empty_pattern_never_holds_on_an_empty_field() -> None:
    assert not parse_match("sender=*").holds(fields(sender=""))
    assert not parse_match("room=*").holds(fields(chat_jid="web:"))
    assert not parse_match("platform=*").holds(fields(chat_jid="bare-folder-address"))


def test_pattern_may_contain_equals_signs() -> None:
    expr = parse_match("sender=email:address/a=b@x.org")
    assert expr.holds(fields(sender="email:address/a=b@x.org"))


def test_str_gives_the_normalized_text() -> None:
    assert (
        str(parse_match("  platform=discord \t room=guild/*  ")) == "platform=discord room=guild/*"
    )
    assert str(parse_match("")) == ""


def assert_clear_sentence(error: InvalidInput, *pieces: str) -> None:
    message = str(error)
    assert message
    assert message[0].isupper(), message
    assert message.rstrip().endswith("."), message
    for piece in pieces:
        assert piece in message, (piece, message)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        pytest.param("foo=bar", ["'foo'"], id="unknown-key"),
        pytest.param("platform=telegram channel=x", ["'channel'"], id="unknown-second-key"),
        pytest.param("Platform=telegram", ["'Platform'"], id="uppercase-key"),
        pytest.param("=telegram", ["''"], id="empty-key"),
        pytest.param("platform", ["'platform'", "="], id="no-equals"),
        pytest.param("platform=telegram room", ["'room'", "="], id="second-token-no-equals"),
        pytest.param("room=[ab", ["room", "[ab", "["], id="unclosed-class"),
        pytest.param("room=a[!b", ["room", "a[!b"], id="unclosed-negated-class"),
        pytest.param("sender=ab\\", ["sender", "\\"], id="trailing-backslash"),
        pytest.param("room=guild/", ["room", "guild/", "/"], id="ends-with-slash"),
        pytest.param(
            "chat_jid=slack:acme/", ["chat_jid", "slack:acme/"], id="chat-ends-with-slash"
        ),
    ],
)
def test_invalid_match_expressions_are_rejected(text: str, pieces: list[str]) -> None:
    with pytest.raises(MatchSyntaxError) as info:
        parse_match(text)
    assert isinstance(info.value, InvalidInput)
    assert_clear_sentence(info.value, *pieces)
