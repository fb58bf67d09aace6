"""The Slack adapter through slack-sdk against a fake Slack (Events API mode).

Inbound events are POSTed, signed as Slack signs them, to the adapter's own route; the adapter
calls the fake's Web API (``auth.test``, ``users.info``, ``conversations.info``, files,
``chat.postMessage``) through the real ``AsyncWebClient``. Ingest and the delivery loop are the
real engine over SQLite, driven by hand with a fake clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from postroom.channels.slack import EVENTS_PATH, SlackChannel, build
from postroom.core import Action, Layer
from postroom.core.chunking import limit_for

from fake_engine_slack_whatsapp import Engine, open_engine, serve
from fake_slack import (
    BOT_ID,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    event_callback,
    message_event,
    signed,
)
from fakeclock import FakeClock

CHANNEL = f"slack:{TEAM}/channel/C1GENERAL"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


@pytest.fixture
async def engine(tmp_path: Any, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


def config(fake: FakeSlack, **extra: Any) -> dict[str, Any]:
    return {
        "bot_token": BOT_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "base_url": f"{fake.base_url}/api/",
        **extra,
    }


@pytest.fixture
async def slack(fake: FakeSlack, engine: Engine) -> AsyncIterator[SlackChannel]:
    channel = build(config(fake))
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def post(
    channel: SlackChannel,
    payload: dict[str, Any],
    clock: FakeClock,
    *,
    headers: dict[str, str] | None = None,
    age_s: int = 0,
    secret: str = SIGNING_SECRET,
) -> httpx.Response:
    body, signed_headers = signed(
        payload, timestamp=int(clock().timestamp()) - age_s, secret=secret
    )
    transport = httpx.ASGITransport(app=Starlette(routes=channel.routes()))
    async with httpx.AsyncClient(transport=transport, base_url="http://postroom.test") as client:
        return await client.post(
            EVENTS_PATH, content=body, headers={**signed_headers, **(headers or {})}
        )


async def event(
    channel: SlackChannel, clock: FakeClock, inner: dict[str, Any], **kw: Any
) -> httpx.Response:
    response = await post(channel, event_callback(inner), clock, **kw)
    assert response.status_code == 200, response.text
    return response


# ----------------------------------------------------------------------------- inbound


async def test_channel_dm_group_and_thread_messages_get_the_canonical_addresses(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    assert slack.status().state == "connected"
    assert slack.bot is not None and (slack.bot.user_id, slack.bot.bot_id) == (BOT_USER, BOT_ID)
    await event(slack, clock, message_event("hello &lt;all&gt;", ts="1712345678.000100"))
    threaded = message_event(
        "in the thread", ts="1712345699.000200", thread_ts="1712345678.123456", user="U2BOB"
    )
    await event(slack, clock, threaded)
    await event(
        slack,
        clock,
        message_event("psst", ts="1712345700.000300", channel="D1DM", channel_type="im"),
    )
    await event(
        slack,
        clock,
        message_event("secret", ts="1712345701.000400", channel="C9PRIV", channel_type="group"),
    )
    await event(
        slack,
        clock,
        message_event("trio", ts="1712345702.000500", channel="G1MPIM", channel_type="mpim"),
    )

    top, in_thread = await engine.user_messages(CHANNEL)
    assert (top.id, top.sender, top.sender_name, top.content) == (
        "1712345678.000100",
        "slack:user/U1ALICE",
        "Alice",
        "hello <all>",
    )
    assert (top.topic, top.reply_to) == ("", None)
    assert (in_thread.sender, in_thread.sender_name) == ("slack:user/U2BOB", "Bob")
    # The native topic is normalized by postroom; the raw thread_ts is kept for replies.
    assert in_thread.topic == "1712345678-123456"
    assert in_thread.reply_to == "1712345678.123456"
    assert in_thread.metadata["slack"]["thread_ts"] == "1712345678.123456"

    (dm,) = await engine.user_messages(f"slack:{TEAM}/dm/D1DM")
    assert dm.content == "psst" and dm.metadata.get("is_dm") is True
    private = await engine.user_messages(f"slack:{TEAM}/group/C9PRIV")
    mpim = await engine.user_messages(f"slack:{TEAM}/group/G1MPIM")
    assert [m.content for m in private + mpim] == ["secret", "trio"]
    assert not private[0].metadata.get("is_dm")
    # users.info is asked once per person, then remembered.
    assert [c["user"] for c in fake.calls["users.info"]] == ["U1ALICE", "U2BOB"]


async def test_a_mention_is_a_mention_and_its_twin_event_is_not_stored_twice(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    await engine.mention_routes("slack")
    fake.conversations["C7NEW"] = {"is_channel": True, "is_private": True}
    chat = f"slack:{TEAM}/group/C7NEW"
    # app_mention carries no channel_type: the adapter asks conversations.info once.
    mention = {
        "type": "app_mention",
        "user": "U1ALICE",
        "text": f"<@{BOT_USER}> what is <https://x.org|this>?",
        "ts": "1712345800.000100",
        "channel": "C7NEW",
        "event_ts": "1712345800.000100",
    }
    await event(slack, clock, mention)
    result = engine.result_for("1712345800.000100")
    assert result.chat_jid == chat
    assert (result.decision.verb, result.decision.action) == ("mention", Action.FIRE)
    (stored,) = await engine.user_messages(chat)
    assert stored.content == "@Postroom what is this (https://x.org)?"
    assert stored.metadata.get("mentioned") is True

    # Slack also sends the same message as a `message` event: same ts, one stored message.
    twin = message_event(
        mention["text"], ts="1712345800.000100", channel="C7NEW", channel_type="group"
    )
    await event(slack, clock, twin)
    assert len(await engine.user_messages(chat)) == 1
    assert [c["channel"] for c in fake.calls["conversations.info"]] == ["C7NEW"]

    # A mention in the middle of a message event is a platform mention too.
    await event(
        slack,
        clock,
        message_event(
            f"hey <@{BOT_USER}>", ts="1712345801.000100", channel="C7NEW", channel_type="group"
        ),
    )
    assert engine.result_for("1712345801.000100").decision.verb == "mention"
    # Without one, the message is only observed.
    await event(
        slack,
        clock,
        message_event("chatter", ts="1712345802.000100", channel="C7NEW", channel_type="group"),
    )
    chatter = engine.result_for("1712345802.000100").decision
    assert (chatter.verb, chatter.action) == ("message", Action.OBSERVE)


async def test_a_reply_in_the_thread_of_a_bot_message_follows_the_reply_chain(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    answer_id = await engine.put_answer(CHANNEL, "I am the answer")
    assert await engine.delivery().deliver_due()
    (sent,) = fake.posted
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent" and row.platform_message_id
    bot_ts = row.platform_message_id
    assert sent["channel"] == "C1GENERAL" and "thread_ts" not in sent

    reply = message_event("and then?", ts="1800000999.000001", thread_ts=bot_ts)
    await event(slack, clock, reply)
    decision = engine.result_for("1800000999.000001").decision
    assert (decision.layer, decision.folder, decision.action) == (
        Layer.REPLY_CHAIN,
        "main",
        Action.FIRE,
    )


async def test_the_bots_own_messages_edits_and_deletions_are_not_ingested(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    await event(slack, clock, message_event("my echo", ts="1712345900.000001", user=BOT_USER))
    await event(
        slack,
        clock,
        message_event("via bot id", ts="1712345900.000002", user="", bot_id=BOT_ID),
    )
    other_bot = message_event(
        "an integration", ts="1712345900.000003", user="", subtype="bot_message", bot_id="B9"
    )
    await event(slack, clock, other_bot)
    edited = message_event("", ts="1712345900.000004", subtype="message_changed")
    await event(slack, clock, edited)
    await event(slack, clock, message_event("", ts="1712345900.000005", subtype="message_deleted"))
    await event(slack, clock, message_event("a person", ts="1712345900.000006"))
    assert [m.content for m in await engine.stored(CHANNEL)] == ["a person"]
    assert [r.id for r in engine.results] == ["1712345900.000006"]


async def test_images_and_audio_clips_are_fetched_with_the_bot_token_within_the_cap(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    clip = b"webm-audio-bytes"
    fake.files["cat.png"] = (png, "image/png")
    fake.files["clip.webm"] = (clip, "audio/webm")
    fake.files["notes.csv"] = (b"day,amount\nmon,3\n", "text/csv")
    files = [
        {
            "id": "F1",
            "name": "cat.png",
            "mimetype": "image/png",
            "size": len(png),
            "url_private": fake.file_url("cat.png"),
        },
        {
            "id": "F2",
            "name": "clip.webm",
            "mimetype": "audio/webm",
            "subtype": "slack_audio",
            "size": len(clip),
            "url_private_download": fake.file_url("clip.webm"),
        },
        # Too large for the cap: kept as a reference, never downloaded.
        {
            "id": "F3",
            "name": "huge.png",
            "mimetype": "image/png",
            "size": 10**9,
            "url_private": fake.file_url("huge.png"),
        },
        # The bot token never goes to a host that is not Slack's.
        {
            "id": "F4",
            "name": "evil.png",
            "mimetype": "image/png",
            "size": 10,
            "url_private": "https://evil.example/steal.png",
        },
        # A file that is not an image: within the file cap, fetched all the same.
        {
            "id": "F5",
            "name": "notes.csv",
            "mimetype": "text/csv",
            "size": 17,
            "url_private": fake.file_url("notes.csv"),
        },
    ]
    await event(
        slack,
        clock,
        message_event("", ts="1712346000.000001", subtype="file_share", files=files),
    )
    (stored,) = await engine.user_messages(CHANNEL)
    assert stored.content == "[Voice message]"
    image, voice, huge, evil, notes = stored.metadata["attachments"]
    # The bytes are stored once, as blobs; the row keeps their hashes.
    assert (image["kind"], image["mime"], image["sha256"]) == (
        "image",
        "image/png",
        hashlib.sha256(png).hexdigest(),
    )
    assert (voice["kind"], voice["mime"], voice["sha256"]) == (
        "voice",
        "audio/webm",
        hashlib.sha256(clip).hexdigest(),
    )
    assert "sha256" not in huge and "url" not in huge
    assert "sha256" not in evil
    # A file that is not a picture or a clip waits for after the acknowledgement (the 3 s
    # budget of the request is not spent on it): the turn's enrichment fetches it.
    assert (notes["kind"], notes["fetch_url"]) == ("file", fake.file_url("notes.csv"))
    assert "sha256" not in notes
    assert fake.file_requests == [f"Bearer {BOT_TOKEN}"] * 2
    late = await slack.fetch_attachment(fake.file_url("notes.csv"), cap_bytes=1000)
    assert late == b"day,amount\nmon,3\n"
    assert fake.file_requests[-1] == f"Bearer {BOT_TOKEN}"
    assert await slack.fetch_attachment(fake.file_url("notes.csv"), cap_bytes=5) is None
    assert await slack.fetch_attachment("https://evil.example/notes.csv", cap_bytes=1000) is None


# ----------------------------------------------------------------------------- the webhook


async def test_forged_stale_or_unsigned_requests_are_refused_and_nothing_is_stored(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    payload = event_callback(message_event("forged", ts="1712346100.000001"))
    wrong = await post(slack, payload, clock, secret="not-the-secret")
    stale = await post(slack, payload, clock, age_s=6 * 60)
    unsigned = await post(slack, payload, clock, headers={"x-slack-signature": ""})
    garbage_ts = await post(slack, payload, clock, headers={"x-slack-request-timestamp": "soon"})
    assert [r.status_code for r in (wrong, stale, unsigned, garbage_ts)] == [401] * 4
    assert await engine.stored(CHANNEL) == [] and engine.results == []

    # A request four minutes old is still inside Slack's five-minute window.
    assert (await post(slack, payload, clock, age_s=4 * 60)).status_code == 200
    assert len(await engine.stored(CHANNEL)) == 1


async def test_url_verification_and_retries(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    challenge = {
        "token": "t",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    response = await post(slack, challenge, clock)
    assert response.status_code == 200
    assert response.json() == {"challenge": challenge["challenge"]}

    payload = event_callback(message_event("once", ts="1712346200.000001"), event_id="Ev1")
    first = await post(slack, payload, clock)
    retry = await post(
        slack,
        payload,
        clock,
        headers={"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"},
    )
    assert (first.status_code, retry.status_code) == (200, 200)
    assert [m.content for m in await engine.stored(CHANNEL)] == ["once"]


# ----------------------------------------------------------------------------- outbound


async def test_an_answer_is_chunked_formatted_and_threaded_under_what_it_answers(
    slack: SlackChannel, fake: FakeSlack, engine: Engine
) -> None:
    paragraph = "**Bold** and _it_ with a [link](https://example.org) & more words. " * 20
    text = "\n\n".join([paragraph] * 5)
    assert len(text) > 2 * limit_for("slack")
    answer_id = await engine.put_answer(CHANNEL, text, reply_to="1712345678.000100")
    loop = engine.delivery()
    while await loop.deliver_due():
        pass
    rows = await engine.deliveries(answer_id)
    assert len(rows) >= 3 and {r.status for r in rows} == {"sent"}
    assert len(fake.posted) == len(rows)
    for call in fake.posted:
        assert call["channel"] == "C1GENERAL"
        # Every chunk goes to the thread of the message the answer replies to.
        assert call["thread_ts"] == "1712345678.000100"
        assert call["mrkdwn"] is True
        assert len(call["text"]) <= limit_for("slack")
    first = fake.posted[0]["text"]
    assert first.startswith("*Bold* and _it_ with a <https://example.org|link> &amp; more")
    assert (await engine.deliveries(answer_id))[0].platform_message_id == "1800000001.000001"


async def test_a_topic_thread_wins_and_dms_are_answered_inline(
    slack: SlackChannel, fake: FakeSlack, engine: Engine
) -> None:
    await engine.put_answer(CHANNEL, "in topic", topic="1712345678-123456", reply_to="1712345699.1")
    await engine.put_answer(f"slack:{TEAM}/dm/D1DM", "inline", reply_to="1712345700.000300")
    await engine.put_answer(CHANNEL, "pinned topic", topic="research", reply_to="web-123")
    loop = engine.delivery()
    while await loop.deliver_due():
        pass
    by_text = {c["text"]: c for c in fake.posted}
    assert by_text["in topic"]["thread_ts"] == "1712345678.123456"
    assert "thread_ts" not in by_text["inline"] and by_text["inline"]["channel"] == "D1DM"
    assert "thread_ts" not in by_text["pinned topic"]


async def test_rejected_markup_falls_back_to_plain_text(
    slack: SlackChannel, fake: FakeSlack, engine: Engine
) -> None:
    fake.reject_markup = True
    answer_id = await engine.put_answer(CHANNEL, "**bold** [docs](https://d.example)")
    assert await engine.delivery().deliver_due()
    refused, plain = fake.posted
    assert refused["text"] == "*bold* <https://d.example|docs>"
    assert (plain["text"], plain["mrkdwn"]) == ("bold docs (https://d.example)", False)
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_a_rate_limit_delays_the_delivery_by_retry_after_then_it_goes_out(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    fake.post_failures.append((429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "7"}))
    answer_id = await engine.put_answer(CHANNEL, "patience")
    loop = engine.delivery()
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and row.attempts == 1
    assert (row.next_try - clock()).total_seconds() == pytest.approx(7)
    assert "rate limit" in (row.last_error or "")
    assert not await loop.deliver_due()  # not due yet
    clock.advance(seconds=7)
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert [c["text"] for c in fake.posted] == ["patience", "patience"]


@pytest.mark.parametrize("error", ["channel_not_found", "not_in_channel", "is_archived"])
async def test_a_gone_chat_abandons_the_delivery_at_once(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, error: str
) -> None:
    fake.post_failures.append((200, {"ok": False, "error": error}, {}))
    answer_id = await engine.put_answer(CHANNEL, "anyone?")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "abandoned" and error in (row.last_error or "")
    assert len(fake.posted) == 1


async def test_typing_is_a_no_op_on_slack(slack: SlackChannel, fake: FakeSlack) -> None:
    before = {method: len(calls) for method, calls in fake.calls.items()}
    await slack.typing(CHANNEL, True)
    await slack.typing(CHANNEL, False)
    assert {method: len(calls) for method, calls in fake.calls.items()} == before


async def test_check_calls_auth_test(slack: SlackChannel, fake: FakeSlack) -> None:
    assert await slack.check() == f"Slack workspace {TEAM} as bot user {BOT_USER}"
    assert len(fake.calls["auth.test"]) == 2  # start, then check
