"""Route targets (ROUTING §2.2) and ``{sender}`` expansion (ROUTING §2.3)."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from postroom.core import InvalidInput, Mode, TargetSyntaxError, parse_target, sender_slug


def _fingerprint(room: str) -> str:
    return hashlib.sha256(room.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("text", "folder", "mode", "topic"),
    [
        pytest.param("atlas", "atlas", Mode.FIRE, "", id="fire"),
        pytest.param("atlas/content", "atlas/content", Mode.FIRE, "", id="fire-nested"),
        pytest.param("atlas#", "atlas", Mode.FIRE, "", id="empty-fragment-fires"),
        pytest.param("main#observe", "main", Mode.OBSERVE, "", id="observe"),
        pytest.param("acme/eng#deploy", "acme/eng", Mode.TOPIC, "deploy", id="topic-pin"),
        pytest.param("a_b-c/d9#t_1-x", "a_b-c/d9", Mode.TOPIC, "t_1-x", id="full-alphabet"),
        pytest.param("atlas/{sender}", "atlas/{sender}", Mode.FIRE, "", id="template"),
        pytest.param("{sender}", "{sender}", Mode.FIRE, "", id="template-top-level"),
        pytest.param(
            "atlas/{sender}#observe", "atlas/{sender}", Mode.OBSERVE, "", id="template-observe"
        ),
        pytest.param(
            "atlas/{sender}#support", "atlas/{sender}", Mode.TOPIC, "support", id="template-topic"
        ),
    ],
)
def test_parse_target(text: str, folder: str, mode: Mode, topic: str) -> None:
    target = parse_target(text)
    assert target.folder == folder
    assert target.mode is mode
    assert target.topic == topic


@pytest.mark.parametrize("text", ["atlas", "main#observe", "acme/eng#deploy", "atlas/{sender}"])
def test_str_round_trips(text: str) -> None:
    assert str(parse_target(text)) == text


def test_empty_fragment_normalizes_to_plain_folder() -> None:
    assert str(parse_target("atlas#")) == "atlas"


def test_template_parent() -> None:
    assert parse_target("atlas").template_parent is None
    assert not parse_target("atlas").is_template
    assert parse_target("atlas/{sender}").template_parent == "atlas"
    assert parse_target("acme/eng/{sender}#observe").template_parent == "acme/eng"
    assert parse_target("{sender}").template_parent == ""


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
        pytest.param("", ["empty"], id="empty"),
        pytest.param("Atlas", ["'Atlas'", "lowercase"], id="uppercase"),
        pytest.param("atlas/Content", ["atlas/Content", "lowercase"], id="uppercase-segment"),
        pytest.param("..", ["'..'"], id="dotdot"),
        pytest.param("atlas/../etc", ["'..'"], id="dotdot-inside"),
        pytest.param("atlas/./x", ["'.'"], id="dot-segment"),
        pytest.param("atlas//x", ["atlas//x", "empty segment"], id="empty-segment"),
        pytest.param("/atlas", ["/atlas"], id="leading-slash"),
        pytest.param("atlas/", ["atlas/"], id="trailing-slash"),
        pytest.param("atl.as", ["'.'"], id="dot-in-name"),
        pytest.param("atlas content", ["whitespace"], id="whitespace"),
        pytest.param("#observe", ["no folder"], id="no-folder"),
        pytest.param("atlas#Deploy", ["'Deploy'"], id="uppercase-fragment"),
        pytest.param("atlas#de.ploy", ["'de.ploy'"], id="bad-fragment"),
        pytest.param("atlas#a#b", ["'#'"], id="two-fragments"),
        pytest.param("atlas/{sender}/{sender}", ["{sender}", "more than once"], id="two-templates"),
        pytest.param("atlas/{sender}x", ["{sender}x"], id="template-not-whole-segment"),
        pytest.param("atlas/{user}", ["{user}"], id="unknown-template"),
    ],
)
def test_invalid_targets_are_rejected(text: str, pieces: list[str]) -> None:
    with pytest.raises(TargetSyntaxError) as info:
        parse_target(text)
    assert isinstance(info.value, InvalidInput)
    assert_clear_sentence(info.value, *pieces)


# ---------------------------------------------------------------------------------------------
# §2.3: {sender} expansion; the spec's table first.


SPEC_EXPANSIONS = [
    ("discord:user/alice", "atlas/dc-alice"),
    ("telegram:user/12345", "atlas/tg-12345"),
    ("email:address/Bob.Smith@x.org", "atlas/em-bob-smith-x-org"),
    ("matrix:user/@bob:example.org", "atlas/mx-bob-example-org"),
    ("web:anon/7", "atlas/web-anon-7"),
    ("web:user/7", "atlas/web-7"),
    ("evil:../../etc/passwd", "atlas/ev-etc-passwd"),
    ("tui-user", "atlas/tui-user"),
    ("telegram:user/Ålice", "atlas/tg-lice-" + _fingerprint("Ålice")),
    ("", ""),
    ("x:///", ""),
]


@pytest.mark.parametrize(
    ("sender", "expected"), SPEC_EXPANSIONS, ids=[s or "empty" for s, _ in SPEC_EXPANSIONS]
)
def test_spec_sender_expansion_table(sender: str, expected: str) -> None:
    assert parse_target("atlas/{sender}").expand(sender) == expected


@pytest.mark.parametrize(
    ("sender", "slug"),
    [
        pytest.param("telegram:user/1", "tg-1", id="telegram"),
        pytest.param("whatsapp:user/4915", "wa-4915", id="whatsapp"),
        pytest.param("discord:user/9", "dc-9", id="discord"),
        pytest.param("slack:user/U123", "sl-u123", id="slack"),
        pytest.param("email:address/a@b.c", "em-a-b-c", id="email"),
        pytest.param("matrix:user/@a:b", "mx-a-b", id="matrix"),
        pytest.param("mastodon:account/77", "ma-77", id="mastodon"),
        pytest.param("web:anon/x", "web-anon-x", id="web"),
        pytest.param("tui:op", "tui-op", id="tui"),
        pytest.param("hook:github", "hk-github", id="hook"),
        pytest.param("reddit:user/spez", "re-spez", id="other-platform-first-two"),
        pytest.param("x:user/a", "x-a", id="one-letter-platform"),
        pytest.param("Bob Smith", "bob-smith", id="no-colon-no-short-code"),
        pytest.param("discord:user/a_b", "dc-a_b", id="underscore-kept"),
        pytest.param("discord:user/A--B", "dc-a-b", id="dash-run-collapsed"),
        pytest.param("discord:user/a!!??b", "dc-a-b", id="punctuation-run-one-dash"),
        pytest.param("discord:user/-a-", "dc-a", id="dashes-trimmed"),
        pytest.param("discord:guild/user/x", "dc-guild-user-x", id="person-kind-only-first"),
        pytest.param("discord:user/user/x", "dc-user-x", id="person-kind-dropped-once"),
        pytest.param("email:address/x", "em-x", id="address-kind"),
        pytest.param("mastodon:account/x", "ma-x", id="account-kind"),
        pytest.param("web:anon/7", "web-anon-7", id="non-person-kind-kept"),
        pytest.param(
            "discord:user/ÄBC", "dc-bc-" + _fingerprint("ÄBC"), id="non-ascii-fingerprinted"
        ),
    ],
)
def test_sender_slug(sender: str, slug: str) -> None:
    assert sender_slug(sender) == slug


@pytest.mark.parametrize("sender", ["telegram:user", "discord:user/", "email:address"])
def test_person_kind_alone_leaves_an_empty_id(sender: str) -> None:
    # "if its first /-segment is a person kind ... that segment is dropped": nothing is left.
    assert sender_slug(sender) == ""
    assert parse_target("atlas/{sender}").expand(sender) == ""


def test_an_id_of_48_characters_is_kept_whole() -> None:
    assert sender_slug("discord:user/" + "a" * 48) == "dc-" + "a" * 48


def test_a_cut_id_is_fingerprinted() -> None:
    room = "a" * 60
    assert sender_slug("discord:user/" + room) == "dc-" + "a" * 39 + "-" + _fingerprint(room)


def test_dash_at_the_cut_is_trimmed_before_the_fingerprint() -> None:
    # lowercased + slugged: 38 a's, '-', 'b'… → cut to 39 → trailing '-' trimmed.
    room = "a" * 38 + ".b" + "c" * 20
    assert sender_slug("discord:user/" + room) == "dc-" + "a" * 38 + "-" + _fingerprint(room)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        pytest.param("discord:user/alice", "discord:user/alice\u200b", id="zero-width-space"),
        pytest.param("discord:user/alice", "discord:user/\u0430lice", id="cyrillic-a"),
        pytest.param("discord:user/Ålice", "discord:user/\u0430lice", id="a-ring-vs-cyrillic"),
        pytest.param("discord:user/Ålice", "discord:user/Alice", id="a-ring-vs-latin"),
        pytest.param(
            "email:address/" + "x" * 48 + "@one.org",
            "email:address/" + "x" * 48 + "@two.org",
            id="long-addresses-sharing-48",
        ),
    ],
)
def test_lossy_ids_never_share_a_folder(one: str, other: str) -> None:
    assert sender_slug(one) != sender_slug(other)


def test_a_wholly_non_ascii_id_is_its_fingerprint() -> None:
    # Nothing survives the slug, but the room is not empty: the person still gets a folder.
    assert sender_slug("telegram:user/Ωμέγα") == "tg-" + _fingerprint("Ωμέγα")


_LOSSY_ROOMS = st.one_of(
    st.text(min_size=1, max_size=80).filter(lambda t: not t.isascii() or not t.isprintable()),
    st.text(alphabet="abc.-_", min_size=49, max_size=90),
)


@given(one=_LOSSY_ROOMS, other=_LOSSY_ROOMS)
def test_distinct_lossy_rooms_land_in_distinct_folders(one: str, other: str) -> None:
    assume(one != other)
    first, second = sender_slug("discord:user/" + one), sender_slug("discord:user/" + other)
    assert first != second
    for slug in (first, second):
        assert re.fullmatch(r"dc-[a-z0-9_-]+", slug)
        assert len(slug) <= len("dc-") + 48


def test_accepted_collisions() -> None:
    assert sender_slug("email:address/Bob.Smith@x.org") == sender_slug(
        "email:address/bob-smith@x.org"
    )
    assert sender_slug("reddit:user/x") == sender_slug("redis:user/x")


@pytest.mark.parametrize(
    "sender", ["evil:../../etc/passwd", "x:..", "x:user/..", "x:a/./b", "../..", "x:user/a.b"]
)
def test_expansion_never_leaves_the_folder_tree(sender: str) -> None:
    slug = sender_slug(sender)
    assert "/" not in slug
    assert "." not in slug


def test_plain_target_ignores_sender() -> None:
    assert parse_target("atlas").expand("discord:user/x") == "atlas"
