"""Addresses (ROUTING §1) and folder paths (ROUTING §2.2)."""

from __future__ import annotations

import pytest

from postroom.core import (
    FolderNameError,
    InvalidInput,
    JidError,
    ancestors,
    is_within,
    make_jid,
    parent_of,
    parse_jid,
    split_jid,
    validate_folder,
)
from postroom.core.jid import decode_id_part, encode_id_part


@pytest.mark.parametrize(
    ("jid", "platform", "room"),
    [
        ("telegram:user/42", "telegram", "user/42"),
        ("matrix:room/!a:example.org", "matrix", "room/!a:example.org"),
        ("atlas/content", "", "atlas/content"),
        ("x:", "x", ""),
    ],
)
def test_split_jid(jid: str, platform: str, room: str) -> None:
    assert split_jid(jid) == (platform, room)


def test_parse_jid() -> None:
    jid = parse_jid("discord:guild/1/channel/2")
    assert (jid.platform, jid.room) == ("discord", "guild/1/channel/2")
    assert str(jid) == "discord:guild/1/channel/2"


@pytest.mark.parametrize(
    "text", ["", "no-colon", "Telegram:user/1", "tele gram:x", ":room", "telegram:", "a:b\x00c"]
)
def test_parse_jid_rejects(text: str) -> None:
    with pytest.raises(JidError) as info:
        parse_jid(text)
    assert isinstance(info.value, InvalidInput)
    assert str(info.value)


def test_make_jid_percent_encodes_id_parts() -> None:
    assert make_jid("discord", "guild", "77", "channel", "5") == "discord:guild/77/channel/5"
    assert make_jid("web", "main", "a/b%c") == "web:main/a%2Fb%25c"
    assert decode_id_part(encode_id_part("a/b%2Fc")) == "a/b%2Fc"


@pytest.mark.parametrize("path", ["atlas", "atlas/content", "a_b-c/0/z9", "x"])
def test_validate_folder_accepts(path: str) -> None:
    assert validate_folder(path) == path


@pytest.mark.parametrize(
    ("path", "piece"),
    [
        ("", "empty"),
        ("..", "'..'"),
        ("atlas/..", "'..'"),
        ("atlas/../etc", "'..'"),
        (".", "'.'"),
        ("/atlas", "'/atlas'"),
        ("atlas/", "'atlas/'"),
        ("atlas//x", "empty segment"),
        ("Atlas", "uppercase"),
        ("atlas/Content", "uppercase"),
        ("at las", "' '"),
        ("at.las", "'.'"),
        ("atlas/{sender}", "'{'"),
        ("été", "'é'"),
    ],
)
def test_validate_folder_rejects(path: str, piece: str) -> None:
    with pytest.raises(FolderNameError) as info:
        validate_folder(path)
    assert isinstance(info.value, InvalidInput)
    message = str(info.value)
    assert message[0].isupper()
    assert message.endswith(".")
    assert piece in message


def test_folder_tree_helpers() -> None:
    assert is_within("atlas", "atlas")
    assert is_within("atlas/content", "atlas")
    assert is_within("atlas/content/x", "atlas")
    assert not is_within("atlas-old", "atlas")
    assert not is_within("atlas", "atlas/content")
    assert not is_within("main", "atlas")
    assert parent_of("atlas/content") == "atlas"
    assert parent_of("atlas") is None
    assert ancestors("a/b/c") == ["a", "a/b"]
    assert ancestors("a") == []
