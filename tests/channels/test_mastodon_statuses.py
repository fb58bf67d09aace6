"""The pure parts of the Mastodon adapter: its configuration, addresses, the text of a status
and how an answer is cut into statuses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from postroom.channels.mastodon import build
from postroom.channels.mastodon.statuses import (
    BotAccount,
    account_id_of_chat,
    account_jid,
    html_to_text,
    inbound_of,
    status_length,
    status_texts,
    strip_bot_mention,
)
from postroom.core.errors import ConfigError
from postroom.core.messages import Attachment

BOT = BotAccount.of(
    {
        "id": "100",
        "acct": "postroom",
        "username": "postroom",
        "url": "https://social.example/@postroom",
    },
    "https://api.social.example",
)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"base_url": "https://social.example"}, "access_token"),
        ({"access_token": "t"}, "base_url"),
        ({"access_token": "", "base_url": "https://social.example"}, "access_token"),
        ({"access_token": "t", "base_url": "social.example"}, "base_url"),
        (
            {"access_token": "t", "base_url": "https://s.example", "poll_interval_s": 0},
            "poll_interval_s",
        ),
        ({"access_token": "t", "base_url": "https://s.example", "catch_up_s": -1}, "catch_up_s"),
        ({"access_token": "t", "base_url": "https://s.example", "token": "x"}, "token"),
    ],
)
def test_bad_configuration_is_one_sentence_naming_the_key(
    section: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build(section)
    message = str(raised.value)
    assert key in message and message.endswith(".") and "\n" not in message


def test_defaults_and_the_api_url() -> None:
    channel = build({"access_token": "t", "base_url": "https://social.example/"})
    assert (channel.config.poll_interval_s, channel.config.catch_up_s) == (15.0, 600.0)
    assert channel.config.api_base_url == "https://social.example"
    assert channel.platforms == ("mastodon",) and channel.routes() == []


def test_addresses_round_trip_and_strangers_are_refused() -> None:
    assert account_jid("109876543210") == "mastodon:account/109876543210"
    assert account_id_of_chat("mastodon:account/109876543210") == "109876543210"
    assert account_jid("odd/id%") == "mastodon:account/odd%2Fid%25"
    assert account_id_of_chat(account_jid("odd/id%")) == "odd/id%"
    for stranger in (
        "slack:T/channel/C",
        "mastodon:status/1",
        "mastodon:account/",
        "mastodon:account/a/b",
    ):
        assert account_id_of_chat(stranger) is None


def test_html_becomes_text() -> None:
    assert html_to_text("<p>a &amp; b</p><p>c<br/>d</p>") == "a & b\n\nc\nd"
    assert html_to_text("<ul><li>one</li><li>two</li></ul>") == "- one\n- two"
    assert html_to_text("") == ""


def test_only_the_bots_own_leading_mention_is_stripped() -> None:
    assert strip_bot_mention("@postroom hi", BOT) == "hi"
    assert strip_bot_mention("@PostRoom@social.example hi", BOT) == "hi"
    assert strip_bot_mention("@postroom@api.social.example hi", BOT) == "hi"
    assert (
        strip_bot_mention("@postroom@elsewhere.example hi", BOT) == "@postroom@elsewhere.example hi"
    )
    assert strip_bot_mention("@alice @postroom what now", BOT) == "@alice what now"
    assert strip_bot_mention("hi @postroom", BOT) == "hi @postroom"
    assert strip_bot_mention("@postroom", BOT) == ""
    assert strip_bot_mention("@alice", BOT) == "@alice"


def test_statuses_are_counted_as_mastodon_counts_them() -> None:
    assert status_length("@bob@far.example hi") == len("@bob hi")
    assert status_length("see http://a.co") == len("see ") + 23
    assert status_length("see https://example.org/" + "x" * 100) == len("see ") + 23


def test_an_answer_is_cut_so_every_status_fits_with_its_mention() -> None:
    (short,) = status_texts("hello", "bob@far.example")
    assert short == "@bob@far.example hello"
    assert status_texts("", "bob") == ["@bob"]
    links = " ".join(["http://a.co"] * 60)  # 11 characters each, 23 as Mastodon counts them
    parts = status_texts(links, "bob")
    assert len(parts) > 1 and all(status_length(p) <= 500 for p in parts)
    assert " ".join(p.removeprefix("@bob ") for p in parts).split() == links.split()


def _notification(**status: Any) -> dict[str, Any]:
    account = {"id": "7", "acct": "alice", "username": "alice", "display_name": ""}
    base = {
        "id": "55",
        "content": "<p>@postroom hi</p>",
        "visibility": "public",
        "created_at": datetime(2026, 1, 5, 12, tzinfo=UTC),
        "account": account,
    }
    return {"id": "9", "type": "mention", "status": base | status}


def test_a_notification_becomes_a_message() -> None:
    message = inbound_of(_notification(created_at="2026-01-05T12:00:00.000Z"), BOT)
    assert message is not None
    # The account's id addresses it; its name is only shown.
    assert (message.id, message.chat_jid, message.sender, message.sender_name) == (
        "55",
        "mastodon:account/7",
        "mastodon:account/7",
        "alice",
    )
    assert message.metadata["mastodon"]["acct"] == "alice"
    assert message.timestamp == datetime(2026, 1, 5, 12, tzinfo=UTC)
    naive = inbound_of(_notification(created_at=datetime(2026, 1, 5, 12)), BOT)
    assert naive is not None and naive.timestamp.tzinfo is not None
    odd = inbound_of(_notification(created_at="yesterday"), BOT)
    assert odd is not None and odd.timestamp.tzinfo is not None
    only_media = inbound_of(
        _notification(content="<p>@postroom</p>"), BOT, (Attachment(kind="video", url="u"),)
    )
    assert only_media is not None and only_media.content == "[Media]"
    assert inbound_of({"id": "1", "type": "mention", "status": None}, BOT) is None
    assert inbound_of(_notification(id=""), BOT) is None
    no_id = {"id": "", "acct": "alice", "username": "alice"}
    assert inbound_of(_notification(account=no_id), BOT) is None
