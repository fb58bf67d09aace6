"""Reading one RFC 5322 message (``postroom.channels.email.parse``): pure, no servers."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

from postroom.channels.email.parse import parse_email, strip_quoted, thread_jid

from fake_email import BOT, mail

NOW = datetime(2026, 1, 6, 9, 30, tzinfo=UTC)


def test_quoted_history_is_cut_at_an_attribution_or_an_original_message_line() -> None:
    assert strip_quoted("Yes.\nOn Mon, 5 Jan 2026, Alice wrote:\n> no?") == "Yes."
    assert strip_quoted("Fine\n\n-----Original Message-----\nFrom: a") == "Fine"
    assert strip_quoted("Only >this< stays\n> quoted") == "Only >this< stays"


def test_the_date_header_is_the_timestamp_else_the_time_of_reading() -> None:
    dated = mail(headers={})
    message, _ = parse_email(
        bytes(dated), bot_address=BOT, allowed_senders=(), image_bytes=0, now=NOW
    )
    assert message.timestamp == datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

    undated = mail()
    del undated["Date"]
    message, _ = parse_email(
        bytes(undated), bot_address=BOT, allowed_senders=(), image_bytes=0, now=NOW
    )
    assert message.timestamp == NOW

    garbled = mail()
    garbled.replace_header("Date", "the day before yesterday")
    message, _ = parse_email(
        bytes(garbled), bot_address=BOT, allowed_senders=(), image_bytes=0, now=NOW
    )
    assert message.timestamp == NOW

    # "-0000" means "zone unknown" (RFC 5322 §3.3): read in the reader's zone.
    local = NOW.astimezone(timezone(timedelta(hours=2)))
    unknown = mail()
    unknown.replace_header("Date", "Mon, 05 Jan 2026 12:00:00 -0000")
    message, _ = parse_email(
        bytes(unknown), bot_address=BOT, allowed_senders=(), image_bytes=0, now=local
    )
    assert message.timestamp.utcoffset() == timedelta(hours=2)


def test_a_very_long_message_id_is_stored_under_its_hash_but_still_roots_the_thread() -> None:
    long_id = "<" + "x" * 300 + "@example.org>"
    message, point = parse_email(
        bytes(mail(message_id=long_id)),
        bot_address=BOT,
        allowed_senders=(),
        image_bytes=0,
        now=NOW,
    )
    assert len(message.id) < 255 and message.id.endswith("@postroom>")
    assert message.chat_jid == thread_jid(long_id)
    assert point.message_id == long_id  # the answer's In-Reply-To is the real one


def test_a_mail_without_message_id_gets_one_from_its_bytes() -> None:
    nameless = mail()
    del nameless["Message-ID"]
    raw = bytes(nameless)
    message, _ = parse_email(raw, bot_address=BOT, allowed_senders=(), image_bytes=0, now=NOW)
    assert message.id == "<" + hashlib.sha256(raw).hexdigest()[:32] + "@postroom>"
    assert message.chat_jid == thread_jid(message.id)


def test_a_body_in_an_unknown_charset_is_read_as_well_as_it_can_be() -> None:
    raw = (
        b"From: alice@example.org\r\nTo: bot@example.org\r\nMessage-ID: <c@x>\r\n"
        b'Content-Type: text/plain; charset="x-no-such-charset"\r\n\r\nplain words\r\n'
    )
    message, _ = parse_email(raw, bot_address=BOT, allowed_senders=(), image_bytes=0, now=NOW)
    assert message.content == "plain words"


def test_an_address_entry_trusts_only_that_address_and_each_failure_is_named_once() -> None:
    failing = mail(
        sender="bob@example.org",
        headers={"Authentication-Results": "mx; spf=fail; spf=fail smtp.mailfrom=example.org"},
    )
    message, _ = parse_email(
        bytes(failing),
        bot_address=BOT,
        allowed_senders=("alice@example.org",),
        image_bytes=0,
        now=NOW,
    )
    assert message.verb == "untrusted"
    assert message.metadata["untrusted"] == [
        "bob@example.org is not in allowed_senders",
        "spf=fail",
    ]
