"""The Discord adapter through discord.py against a fake Discord (REST and gateway WebSocket).

Inbound events are dispatched on the fake's gateway connection as ``MESSAGE_CREATE``; the adapter
calls the fake's REST API through discord.py's own HTTP client. Ingest and the delivery loop are
the real engine over SQLite, driven by hand with a fake clock.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.discord import DiscordChannel, build
from postroom.channels.discord._sdk import discord
from postroom.core import Action, InboundMessage, Layer
from postroom.core.chunking import limit_for
from postroom.core.errors import InvalidInput
from postroom.engine.ingest import IngestResult

from fake_discord import (
    ALICE,
    ALICE_ID,
    BOB,
    BOT_ID,
    BOT_ROLE_ID,
    BOT_USER,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    LATE_THREAD_ID,
    OTHER_BOT,
    THREAD_ID,
    FakeDiscord,
    message_payload,
    reply_payload,
    snowflake,
)
from fake_engine_slack_whatsapp import Engine, eventually, open_engine, serve
from fakeclock import FakeClock

CHAT = f"discord:guild/{GUILD_ID}/channel/{CHANNEL_ID}"
DM_CHAT = f"discord:dm/{DM_CHANNEL_ID}"
#: What Discord's edge adds to a real API 429 (discord.py treats a 429 without it as Cloudflare).
VIA = {"Via": "1.1 google"}


class Recorder:
    """The adapter's inbound sink: keeps each normalized message, then ingests it for real."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.messages: list[InboundMessage] = []

    async def __call__(self, message: InboundMessage) -> IngestResult:
        self.messages.append(message)
        return await self.engine.inbound(message)

    def by_id(self, message_id: str) -> InboundMessage:
        found = [m for m in self.messages if m.id == message_id]
        assert found, f"{message_id} never reached ingest; got {[m.id for m in self.messages]}"
        return found[-1]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


@pytest.fixture
def recorder(engine: Engine) -> Recorder:
    return Recorder(engine)


async def started(
    fake: FakeDiscord, engine: Engine, recorder: Recorder, **section: Any
) -> DiscordChannel:
    channel = build(fake.section(**section))
    engine.attach(channel)
    context = ChannelContext(inbound=recorder, clock=engine.clock, image_bytes=64 * 1024)
    await channel.start(context)
    async with asyncio.timeout(10):
        await fake.ready.wait()
    return channel


@pytest.fixture
async def dc(
    fake: FakeDiscord, engine: Engine, recorder: Recorder
) -> AsyncIterator[DiscordChannel]:
    channel = await started(fake, engine, recorder)
    yield channel
    await channel.stop()


async def arrive(fake: FakeDiscord, recorder: Recorder, data: dict[str, Any]) -> InboundMessage:
    """Dispatch a MESSAGE_CREATE and wait until ingest has committed it."""
    fake.dispatch("MESSAGE_CREATE", data)
    await eventually(lambda: any(r.id == data["id"] for r in recorder.engine.results))
    return recorder.by_id(data["id"])


async def deliver_all(engine: Engine) -> None:
    loop = engine.delivery()
    while await loop.deliver_due():
        pass


# ----------------------------------------------------------------------------- inbound


async def test_guild_thread_and_dm_messages_get_the_canonical_addresses(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder, engine: Engine
) -> None:
    assert dc.status().state == "connected"
    assert "postroom" in dc.status().detail
    top = await arrive(fake, recorder, message_payload(snowflake(100), "hello all"))
    assert (top.chat_jid, top.sender, top.sender_name, top.content) == (
        CHAT,
        f"discord:user/{ALICE_ID}",
        "Alice",
        "hello all",
    )
    assert (top.topic, top.reply_to, top.is_dm, top.mentioned, top.is_from_me) == (
        "",
        None,
        False,
        False,
        False,
    )
    assert top.timestamp == discord.utils.snowflake_time(int(snowflake(100)))
    assert top.metadata["discord"] == {"channel_id": CHANNEL_ID, "guild_id": GUILD_ID}

    # A thread the gateway announced: the chat is its parent channel, the thread the topic.
    threaded = await arrive(
        fake,
        recorder,
        message_payload(snowflake(101), "in a thread", channel_id=THREAD_ID, author=BOB),
    )
    assert (threaded.chat_jid, threaded.sender, threaded.topic) == (
        CHAT,
        f"discord:user/{BOB['id']}",
        THREAD_ID,
    )
    assert threaded.metadata["discord"]["thread_id"] == THREAD_ID

    # A thread the cache never saw: Discord is asked once what it is.
    fake.channels[LATE_THREAD_ID] = {
        "id": LATE_THREAD_ID,
        "type": 11,
        "guild_id": GUILD_ID,
        "parent_id": CHANNEL_ID,
        "name": "late",
        "owner_id": ALICE_ID,
        "message_count": 2,
        "member_count": 1,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 60,
            "archive_timestamp": "2026-01-05T10:00:00+00:00",
            "locked": False,
        },
    }
    for n in (102, 103):
        late = await arrive(
            fake, recorder, message_payload(snowflake(n), "late", channel_id=LATE_THREAD_ID)
        )
        assert (late.chat_jid, late.topic) == (CHAT, LATE_THREAD_ID)
    assert len(fake.requests_to("GET", f"/channels/{LATE_THREAD_ID}")) == 1

    # A guild channel unknown to the cache that is not a thread (the lookup fails: 404).
    unknown = snowflake(104)
    plain = await arrive(fake, recorder, message_payload(snowflake(105), "x", channel_id=unknown))
    assert (plain.chat_jid, plain.topic) == (f"discord:guild/{GUILD_ID}/channel/{unknown}", "")

    dm = await arrive(
        fake,
        recorder,
        message_payload(snowflake(106), "psst", channel_id=DM_CHANNEL_ID, guild_id=None),
    )
    assert (dm.chat_jid, dm.sender, dm.is_dm, dm.topic) == (
        DM_CHAT,
        f"discord:user/{ALICE_ID}",
        True,
        "",
    )
    assert dm.metadata["discord"] == {"channel_id": DM_CHANNEL_ID}
    (stored_dm,) = await engine.user_messages(DM_CHAT)
    assert stored_dm.metadata.get("is_dm") is True


async def test_a_native_mention_of_the_bot_or_its_role_sets_mentioned(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder, engine: Engine
) -> None:
    await engine.mention_routes("discord")
    lead = await arrive(
        fake,
        recorder,
        message_payload(snowflake(200), f"<@{BOT_ID}> what is up?", mentions=[BOT_USER]),
    )
    assert lead.mentioned is True
    assert lead.content == "what is up?"  # the leading mention is the address, not the words
    decision = engine.result_for(lead.id).decision
    assert (decision.verb, decision.action) == ("mention", Action.FIRE)

    inside = await arrive(
        fake,
        recorder,
        message_payload(
            snowflake(201),
            f"ask <@!{BOT_ID}> and <@{ALICE_ID}> in <#{CHANNEL_ID}>",
            mentions=[BOT_USER, ALICE],
        ),
    )
    assert inside.mentioned is True
    assert inside.content == "ask @Postroom and @Alice in #general"

    role = await arrive(
        fake,
        recorder,
        message_payload(snowflake(202), f"<@&{BOT_ROLE_ID}> help", mention_roles=[BOT_ROLE_ID]),
    )
    assert role.mentioned is True and role.content == "@Postroom help"

    chatter = await arrive(fake, recorder, message_payload(snowflake(203), "just chatting"))
    assert chatter.mentioned is False
    decision = engine.result_for(chatter.id).decision
    assert (decision.verb, decision.action) == ("message", Action.OBSERVE)

    # Only the leading mention is dropped, and never when it is all there is.
    bare = await arrive(
        fake, recorder, message_payload(snowflake(204), f"<@{BOT_ID}>", mentions=[BOT_USER])
    )
    assert bare.mentioned is True and bare.content == "@Postroom"


async def test_a_reply_to_a_bot_message_carries_reply_to_and_follows_the_reply_chain(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder, engine: Engine
) -> None:
    answer_id = await engine.put_answer(CHAT, "I am the answer")
    await deliver_all(engine)
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent" and row.platform_message_id
    bot_message = message_payload(row.platform_message_id, "I am the answer", author=BOT_USER)

    reply = await arrive(fake, recorder, reply_payload(snowflake(300), "and then?", to=bot_message))
    assert reply.reply_to == row.platform_message_id
    assert reply.mentioned is True  # Discord's reply ping to the bot
    decision = engine.result_for(reply.id).decision
    assert (decision.layer, decision.folder, decision.action) == (
        Layer.REPLY_CHAIN,
        "main",
        Action.FIRE,
    )

    # A reply to a person carries reply_to too, but is no mention.
    person = message_payload(snowflake(301), "first", author=BOB)
    to_person = await arrive(fake, recorder, reply_payload(snowflake(302), "+1", to=person))
    assert (to_person.reply_to, to_person.mentioned) == (snowflake(301), False)


async def test_the_bots_own_other_bots_and_system_messages_are_not_ingested(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder, engine: Engine
) -> None:
    fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(400), "my echo", author=BOT_USER))
    fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(401), "ci passed", author=OTHER_BOT))
    fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(402), "", type=7))  # member joined
    fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(403), "", embeds=[{"title": "x"}]))
    await arrive(fake, recorder, message_payload(snowflake(404), "a person"))
    assert [m.id for m in recorder.messages] == [snowflake(404)]
    assert [m.content for m in await engine.stored(CHAT)] == ["a person"]
    assert dc.status().last_event_at is not None


async def test_other_bots_are_ingested_when_not_ignored(
    fake: FakeDiscord, engine: Engine, recorder: Recorder
) -> None:
    channel = await started(fake, engine, recorder, ignore_bots=False)
    try:
        fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(410), "mine", author=BOT_USER))
        other = await arrive(
            fake, recorder, message_payload(snowflake(411), "ci passed", author=OTHER_BOT)
        )
        assert other.sender == f"discord:user/{OTHER_BOT['id']}"
        assert [m.id for m in recorder.messages] == [snowflake(411)]
    finally:
        await channel.stop()


def attachment(name: str, mime: str, size: int, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": snowflake(900 + size % 50),
        "filename": name,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": mime,
        **extra,
    }


async def test_images_voice_notes_and_files_become_attachments_within_the_cap(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 92
    ogg = b"OggS" + b"\x00" * 60
    fake.files["cat.png"] = (png, "image/png")
    fake.files["voice-message.ogg"] = (ogg, "audio/ogg")
    fake.files["report.pdf"] = (b"%PDF-1.7 report", "application/pdf")
    files = [
        attachment("cat.png", "image/png", len(png), fake.file_url("cat.png")),
        attachment("huge.png", "image/png", 10**7, fake.file_url("huge.png")),
        attachment("report.pdf", "application/pdf", 300, fake.file_url("report.pdf")),
    ]
    with_files = await arrive(
        fake, recorder, message_payload(snowflake(500), "", attachments=files)
    )
    assert with_files.content == "[Image: cat.png] [Image: huge.png] [File: report.pdf]"
    image, huge, pdf = with_files.attachments
    assert (image.kind, image.mime, image.url) == ("image", "image/png", fake.file_url("cat.png"))
    assert base64.b64decode(image.data) == png  # the CDN link expires; the bytes do not
    assert (huge.kind, huge.data, huge.url) == ("image", "", fake.file_url("huge.png"))
    # A file is fetched within the file cap as well (for the model's document blocks).
    assert (pdf.kind, base64.b64decode(pdf.data)) == ("file", b"%PDF-1.7 report")

    voice = attachment(
        "voice-message.ogg",
        "audio/ogg",
        len(ogg),
        fake.file_url("voice-message.ogg"),
        duration_secs=2.5,
        waveform=base64.b64encode(b"\x01\x02").decode(),
    )
    note = await arrive(
        fake, recorder, message_payload(snowflake(501), "", attachments=[voice], flags=8192)
    )
    assert note.content == "[Voice message]"
    (clip,) = note.attachments
    assert (clip.kind, clip.mime, base64.b64decode(clip.data)) == ("voice", "audio/ogg", ogg)

    # Over the cap, or gone from the CDN: kept as a link, never inline.
    gone = attachment("lost.ogg", "audio/ogg", 10, fake.file_url("lost.ogg"))
    big = attachment("long.ogg", "audio/ogg", 10**6, fake.file_url("long.ogg"))
    both = await arrive(
        fake, recorder, message_payload(snowflake(502), "listen", attachments=[gone, big])
    )
    assert both.content == "listen"
    assert [(a.kind, a.data) for a in both.attachments] == [("voice", ""), ("voice", "")]

    sticker = await arrive(
        fake,
        recorder,
        message_payload(
            snowflake(503),
            "",
            sticker_items=[{"id": snowflake(504), "name": "wave", "format_type": 1}],
        ),
    )
    assert sticker.content == "[Sticker: wave]"


# ----------------------------------------------------------------------------- outbound


async def test_an_answer_is_chunked_to_2000_and_replies_to_the_triggering_message(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    paragraph = "**Bold** and _it_ with a [link](https://example.org) & more words. " * 20
    text = "\n\n".join([paragraph] * 5)
    assert limit_for("discord") == 2000 and len(text) > 2 * 2000
    trigger = snowflake(600)
    answer_id = await engine.put_answer(CHAT, text, reply_to=trigger)
    await deliver_all(engine)
    rows = await engine.deliveries(answer_id)
    assert len(rows) >= 3 and {r.status for r in rows} == {"sent"}
    assert len(fake.posted) == len(rows)
    for call in fake.posted:
        assert call["_channel"] == CHANNEL_ID
        assert 0 < len(call["content"]) <= 2000
        # No @everyone or role pings from an answer, whatever the model wrote.
        assert call["allowed_mentions"]["parse"] == ["users"]
    # The first chunk answers the triggering message (a Discord reply); the rest follow it.
    reference = fake.posted[0]["message_reference"]
    assert (str(reference["message_id"]), reference["fail_if_not_exists"]) == (trigger, False)
    assert str(reference["channel_id"]) == CHANNEL_ID
    assert all("message_reference" not in call for call in fake.posted[1:])
    assert fake.posted[0]["content"].startswith("**Bold** and *it* with a [link](https://")
    assert all(r.platform_message_id for r in rows)


async def test_threads_dms_and_gone_threads_are_answered_in_the_right_place(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    await engine.put_answer(CHAT, "in the thread", topic=THREAD_ID, reply_to=snowflake(610))
    await engine.put_answer(DM_CHAT, "in the dm", reply_to=snowflake(611))
    await engine.put_answer(CHAT, "pinned topic", topic="research", reply_to="web-123")
    await deliver_all(engine)
    by_text = {c["content"]: c for c in fake.posted}
    assert by_text["in the thread"]["_channel"] == THREAD_ID
    assert str(by_text["in the thread"]["message_reference"]["channel_id"]) == THREAD_ID
    assert by_text["in the dm"]["_channel"] == DM_CHANNEL_ID
    assert by_text["pinned topic"]["_channel"] == CHANNEL_ID
    assert "message_reference" not in by_text["pinned topic"]

    # The thread was deleted: the answer still reaches the chat's channel.
    fake.posted.clear()
    fake.post_failures.append((404, {"message": "Unknown Channel", "code": 10003}, {}))
    answer_id = await engine.put_answer(
        CHAT, "thread gone", topic=THREAD_ID, reply_to=snowflake(612)
    )
    await deliver_all(engine)
    assert [c["_channel"] for c in fake.posted] == [THREAD_ID, CHANNEL_ID]
    assert "message_reference" not in fake.posted[1]
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_a_chunk_that_escapes_lengthen_is_sent_as_several_messages(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    # 1,999 characters of Markdown fit one chunk; every "_" is escaped for Discord.
    words = " ".join(["snake_case_name"] * 125)[:1999]
    trigger = snowflake(601)
    answer_id = await engine.put_answer(CHAT, words, reply_to=trigger)
    await deliver_all(engine)
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert len(fake.posted) >= 2
    assert all(len(call["content"]) <= 2000 for call in fake.posted)
    assert "message_reference" in fake.posted[0]
    assert all("message_reference" not in call for call in fake.posted[1:])
    sent = " ".join(call["content"] for call in fake.posted).replace("\\", "")
    assert sent.split() == words.split()


async def test_rejected_markup_falls_back_to_plain_text(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    fake.reject_content = "**"
    answer_id = await engine.put_answer(CHAT, "**bold** [docs](https://d.example)")
    await deliver_all(engine)
    refused, plain = fake.posted
    assert refused["content"] == "**bold** [docs](https://d.example)"
    assert plain["content"] == "bold docs (https://d.example)"
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_a_long_rate_limit_is_not_slept_in_the_sdk_but_delays_the_delivery(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine, clock: FakeClock
) -> None:
    limited = {"message": "You are being rate limited.", "retry_after": 120.0, "global": False}
    fake.post_failures.append((429, limited, {**VIA, "Retry-After": "120"}))
    answer_id = await engine.put_answer(CHAT, "patience")
    loop = engine.delivery()
    began = time.monotonic()
    assert await loop.deliver_due()
    assert time.monotonic() - began < 5  # refused at once, not waited out inside discord.py
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and row.attempts == 1
    assert (row.next_try - clock()).total_seconds() == pytest.approx(120)
    assert not await loop.deliver_due()
    clock.advance(seconds=120)
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert [c["content"] for c in fake.posted] == ["patience", "patience"]


async def test_a_cloudflare_429_uses_the_retry_after_header(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine, clock: FakeClock
) -> None:
    fake.post_failures.append((429, "error code: 1015", {"Retry-After": "15"}))
    answer_id = await engine.put_answer(CHAT, "again")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending"
    assert (row.next_try - clock()).total_seconds() == pytest.approx(15)


async def test_a_short_rate_limit_is_waited_out_and_the_answer_goes_out(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    limited = {"message": "You are being rate limited.", "retry_after": 0.05, "global": False}
    fake.post_failures.append((429, limited, {**VIA, "Retry-After": "1"}))
    answer_id = await engine.put_answer(CHAT, "soon")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert len(fake.posted) == 2


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (403, {"message": "Missing Access", "code": 50001}, "abandoned"),
        (404, {"message": "Unknown Channel", "code": 10003}, "abandoned"),
        (400, {"message": "Cannot send an empty message", "code": 50006}, "abandoned"),
        (401, {"message": "401: Unauthorized", "code": 0}, "pending"),
    ],
)
async def test_refusals_abandon_or_retry_the_delivery(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine, status: int, body: Any, outcome: str
) -> None:
    fake.post_failures.append((status, body, {}))
    answer_id = await engine.put_answer(CHAT, "anyone?")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == outcome and str(status) in (row.last_error or "")


async def test_typing_is_posted_on_each_refresh_and_stopping_sends_nothing(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder
) -> None:
    await dc.typing(CHAT, True)
    await dc.typing(CHAT, True)  # the worker refreshes every few seconds while a turn runs
    await dc.typing(CHAT, False)
    await dc.typing(DM_CHAT, True)
    assert fake.typing == [CHANNEL_ID, CHANNEL_ID, DM_CHANNEL_ID]
    # After a message in a thread, the chat's indicator shows where the person is writing.
    await arrive(fake, recorder, message_payload(snowflake(700), "hm", channel_id=THREAD_ID))
    await dc.typing(CHAT, True)
    assert fake.typing[-1] == THREAD_ID
    # Not a Discord chat: nothing sent, and nothing raised (typing is best-effort).
    await dc.typing("slack:T/channel/C", True)
    assert len(fake.typing) == 4


async def test_check_asks_who_the_token_belongs_to(dc: DiscordChannel, fake: FakeDiscord) -> None:
    before = len(fake.requests_to("GET", "/users/@me"))
    assert await dc.check() == f"logged in to Discord as postroom (id {BOT_ID})"
    assert len(fake.requests_to("GET", "/users/@me")) == before + 1


async def test_an_exhausted_bucket_is_never_waited_out_inside_discord_py(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine, clock: FakeClock
) -> None:
    # Discord says the channel's bucket is empty for 90 s. discord.py neither sleeps that long
    # after the send that emptied it nor before the next one: the next one is tried, refused
    # with a 429, and the outbox waits instead.
    fake.post_headers.append(
        {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset-After": "90",
            "X-RateLimit-Bucket": "fake-bucket",
        }
    )
    first = await engine.put_answer(CHAT, "one")
    second = await engine.put_answer(CHAT, "two")
    loop = engine.delivery()
    began = time.monotonic()
    assert await loop.deliver_due()
    assert time.monotonic() - began < 5
    assert (await engine.deliveries(first))[0].status == "sent"
    limited = {"message": "You are being rate limited.", "retry_after": 89.5, "global": False}
    fake.post_failures.append((429, limited, VIA))
    assert await loop.deliver_due()
    assert time.monotonic() - began < 5
    (row,) = await engine.deliveries(second)
    assert row.status == "pending"
    assert (row.next_try - clock()).total_seconds() == pytest.approx(89.5)
    assert [c["content"] for c in fake.posted] == ["one", "two"]


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [({"X-RateLimit-Reset-After": "3.5"}, 3.5), ({"Retry-After": "soon"}, None)],
)
async def test_a_429_without_a_usable_body_falls_back_to_the_headers(
    dc: DiscordChannel,
    fake: FakeDiscord,
    engine: Engine,
    clock: FakeClock,
    headers: dict[str, str],
    retry_after: float | None,
) -> None:
    fake.post_failures.append((429, "<html>slow down</html>", headers))
    answer_id = await engine.put_answer(CHAT, "later")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and "429" in (row.last_error or "")
    waited = (row.next_try - clock()).total_seconds()
    if retry_after is not None:
        assert waited == pytest.approx(retry_after)
    else:
        assert waited == pytest.approx(2.0)  # the loop's own backoff


async def test_a_send_that_takes_too_long_is_retried_later(
    fake: FakeDiscord, engine: Engine, recorder: Recorder
) -> None:
    channel = await started(fake, engine, recorder, send_timeout="0.3s")
    try:
        fake.post_delay_s = 1.0
        answer_id = await engine.put_answer(CHAT, "slow")
        assert await engine.delivery().deliver_due()
        (row,) = await engine.deliveries(answer_id)
        assert row.status == "pending" and "in time" in (row.last_error or "")
    finally:
        await channel.stop()


async def test_markup_refused_even_as_plain_text_abandons_the_delivery(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    fake.reject_content = "words"
    answer_id = await engine.put_answer(CHAT, "**too many** words")
    assert await engine.delivery().deliver_due()
    assert len(fake.posted) == 2  # formatted, then plain
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "abandoned" and "400" in (row.last_error or "")


async def test_a_gone_thread_and_a_gone_channel_abandon_the_delivery(
    dc: DiscordChannel, fake: FakeDiscord, engine: Engine
) -> None:
    fake.post_failures.append((404, {"message": "Unknown Channel", "code": 10003}, {}))
    fake.post_failures.append((403, {"message": "Missing Access", "code": 50001}, {}))
    answer_id = await engine.put_answer(CHAT, "nowhere", topic=THREAD_ID)
    assert await engine.delivery().deliver_due()
    assert [c["_channel"] for c in fake.posted] == [THREAD_ID, CHANNEL_ID]
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "abandoned" and "403" in (row.last_error or "")


async def test_unknown_guilds_and_channels_are_placed_by_their_ids(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder
) -> None:
    # A guild the cache has not streamed yet, and a channel Discord says is a text channel.
    other_guild, text_channel = snowflake(800), snowflake(801)
    fake.channels[text_channel] = {
        "id": text_channel,
        "type": 0,
        "guild_id": other_guild,
        "name": "news",
        "position": 1,
        "permission_overwrites": [],
    }
    found = await arrive(
        fake,
        recorder,
        message_payload(
            snowflake(802),
            f"hi <@{snowflake(803)}>",
            channel_id=text_channel,
            guild_id=other_guild,
        ),
    )
    assert (found.chat_jid, found.topic) == (
        f"discord:guild/{other_guild}/channel/{text_channel}",
        "",
    )
    assert found.content == f"hi <@{snowflake(803)}>"  # an unresolved mention stays as written


async def test_a_message_ingest_cannot_take_does_not_stop_the_next_ones(
    fake: FakeDiscord, engine: Engine
) -> None:
    seen: list[str] = []

    async def picky(message: InboundMessage) -> IngestResult:
        seen.append(message.content)
        if message.content == "too big":
            raise InvalidInput("message too large")
        if message.content == "boom":
            raise RuntimeError("disk full")
        return await engine.inbound(message)

    channel = build(fake.section())
    await channel.start(ChannelContext(inbound=picky, clock=engine.clock))
    try:
        async with asyncio.timeout(10):
            await fake.ready.wait()
        for n, text in enumerate(("too big", "boom", "fine")):
            fake.dispatch("MESSAGE_CREATE", message_payload(snowflake(850 + n), text))
        await eventually(lambda: any(r.id == snowflake(852) for r in engine.results))
        assert seen == ["too big", "boom", "fine"]
        assert "disk full" in (channel.status().last_error or "")
    finally:
        await channel.stop()


async def test_a_voice_note_larger_than_it_said_is_not_kept_inline(
    dc: DiscordChannel, fake: FakeDiscord, recorder: Recorder
) -> None:
    fake.files["liar.ogg"] = (b"OggS" + b"\x00" * (128 * 1024), "audio/ogg")
    voice = attachment("liar.ogg", "audio/ogg", 10, fake.file_url("liar.ogg"))
    note = await arrive(fake, recorder, message_payload(snowflake(860), "", attachments=[voice]))
    (clip,) = note.attachments
    assert (note.content, clip.kind, clip.data) == ("[Voice message]", "voice", "")
