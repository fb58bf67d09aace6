"""The WhatsApp adapter's webhook side, against a fake Graph API.

Webhooks are POSTed, signed as Meta signs them, to the adapter's own route; the adapter calls
the fake's Graph API (the number's profile, media lookups and downloads) over real HTTP.
Ingest is the real engine over SQLite with a fake clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from postroom.channels.base import ChannelContext
from postroom.channels.whatsapp import WEBHOOK_PATH, WhatsAppChannel, build
from postroom.core import Action, InboundMessage, Layer
from postroom.engine.ingest import IngestResult

from fake_engine_slack_whatsapp import Engine, open_engine, serve
from fake_whatsapp import (
    ACCESS_TOKEN,
    ALICE,
    BOB,
    DISPLAY_NUMBER,
    GROUP,
    PHONE_ID,
    VERIFY_TOKEN,
    FakeWhatsApp,
    message,
    section,
    signature_headers,
    signed,
    text,
    webhook,
)
from fakeclock import FakeClock

DM = f"whatsapp:user/{ALICE}"
GROUP_CHAT = f"whatsapp:group/{GROUP}"


@pytest.fixture
async def fake() -> AsyncIterator[FakeWhatsApp]:
    fake = FakeWhatsApp()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


@pytest.fixture
async def engine(tmp_path: Any, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


@pytest.fixture
async def whatsapp(fake: FakeWhatsApp, engine: Engine) -> AsyncIterator[WhatsAppChannel]:
    channel = build(section(fake.base_url))
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def post(
    channel: WhatsAppChannel,
    payload: dict[str, Any] | bytes,
    *,
    headers: dict[str, str] | None = None,
    secret: str | None = None,
    raise_errors: bool = True,
) -> httpx.Response:
    if isinstance(payload, bytes):
        body, signed_headers = payload, {}
    else:
        body, signed_headers = signed(payload, **({"secret": secret} if secret else {}))
    transport = httpx.ASGITransport(
        app=Starlette(routes=channel.routes()), raise_app_exceptions=raise_errors
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://postroom.test") as client:
        return await client.post(
            WEBHOOK_PATH, content=body, headers={**signed_headers, **(headers or {})}
        )


async def deliver(channel: WhatsAppChannel, *messages: dict[str, Any], **kw: Any) -> None:
    response = await post(channel, webhook(list(messages), **kw))
    assert response.status_code == 200, response.text
    assert response.content == b""


# ----------------------------------------------------------------------------- addresses


async def test_one_to_one_and_group_messages_get_the_canonical_addresses(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    assert whatsapp.status().state == "connected"
    assert whatsapp.status().detail == "WhatsApp number +1 555-078-3881 (Acme Support)"
    await deliver(whatsapp, text("hello there", id="wamid.IN1"))
    await deliver(
        whatsapp,
        text("hi all", id="wamid.IN2", sender=BOB, group_id=GROUP),
        text("me too", id="wamid.IN3", sender=f"+{ALICE}", group_id=GROUP),
    )

    (dm,) = await engine.user_messages(DM)
    assert (dm.id, dm.sender, dm.sender_name, dm.content) == (
        "wamid.IN1",
        f"whatsapp:user/{ALICE}",
        "Alice",
        "hello there",
    )
    assert dm.metadata.get("is_dm") is True and dm.reply_to is None and dm.topic == ""
    assert dm.timestamp.timestamp() == 1767614400
    assert dm.metadata["whatsapp"]["type"] == "text"
    hi, too = await engine.user_messages(GROUP_CHAT)
    assert (hi.sender, hi.sender_name, hi.content) == (f"whatsapp:user/{BOB}", "Bob", "hi all")
    assert (too.sender, too.sender_name) == (f"whatsapp:user/{ALICE}", "Alice")
    assert not hi.metadata.get("is_dm")
    assert engine.result_for("wamid.IN2").chat_jid == GROUP_CHAT


async def test_a_group_id_with_a_slash_stays_one_segment_and_names_fall_back_to_the_number(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    await deliver(
        whatsapp, text("odd id", id="wamid.IN4", sender="15550001", group_id="ab/c%d"), names={}
    )
    (stored,) = await engine.user_messages("whatsapp:group/ab%2Fc%25d")
    assert stored.sender_name == "15550001"


async def test_receipts_other_numbers_and_other_objects_store_nothing(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    receipts = webhook(
        statuses=[
            {
                "id": "wamid.OUT1",
                "status": "delivered",
                "timestamp": "1767614401",
                "recipient_id": ALICE,
            }
        ]
    )
    other_number = webhook([text("not ours", id="wamid.X1")], phone_number_id="999")
    page = {"object": "page", "entry": []}
    for payload in (receipts, other_number, page):
        assert (await post(whatsapp, payload)).status_code == 200
    assert engine.results == []


async def test_a_mention_in_a_group_is_a_mention_and_chatter_is_only_observed(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    await engine.mention_routes("whatsapp")
    await deliver(
        whatsapp,
        text(f"@{DISPLAY_NUMBER} what is new?", id="wamid.M1", group_id=GROUP),
        text("chatter", id="wamid.M2", sender=BOB, group_id=GROUP),
    )
    mention = engine.result_for("wamid.M1").decision
    assert (mention.verb, mention.action) == ("mention", Action.FIRE)
    chatter = engine.result_for("wamid.M2").decision
    assert (chatter.verb, chatter.action) == ("message", Action.OBSERVE)
    first, _ = await engine.user_messages(GROUP_CHAT)
    assert first.content == "@Postroom what is new?"
    assert first.metadata.get("mentioned") is True


async def test_a_reply_to_a_bot_message_follows_the_reply_chain(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    answer_id = await engine.put_answer(DM, "I am the answer")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent" and row.platform_message_id == "wamid.OUT0001"

    reply = text(
        "and then?",
        id="wamid.R1",
        context={"from": DISPLAY_NUMBER, "id": "wamid.OUT0001"},
    )
    await deliver(whatsapp, reply)
    decision = engine.result_for("wamid.R1").decision
    assert (decision.layer, decision.folder, decision.action) == (
        Layer.REPLY_CHAIN,
        "main",
        Action.FIRE,
    )
    (stored,) = await engine.user_messages(DM)
    assert stored.reply_to == "wamid.OUT0001"
    assert stored.metadata["whatsapp"]["context_from"] == DISPLAY_NUMBER


async def test_the_bots_own_messages_are_not_ingested(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    await deliver(whatsapp, text("my own words", id="wamid.E1", sender=DISPLAY_NUMBER))
    echo = text("typed in the app", id="wamid.E2", sender=DISPLAY_NUMBER)
    echo["to"] = ALICE
    assert (await post(whatsapp, webhook(echoes=[echo]))).status_code == 200
    assert engine.results == []
    # Nor does a typing indicator ever hang on them.
    await whatsapp.typing(DM, True)
    assert fake.reads == []


# ----------------------------------------------------------------------------- message kinds


async def test_images_and_voice_notes_are_fetched_with_the_token_within_the_cap(
    fake: FakeWhatsApp, engine: Engine
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    ogg = b"OggS" + b"\x01" * 32
    fake.media["IMG1"] = (png, "image/png")
    fake.media["AUD1"] = (ogg, "audio/ogg")
    fake.media["BIG1"] = (b"x" * 300, "image/jpeg")
    fake.media["DOC1"] = (b"%PDF-1.7 q3", "application/pdf")
    fake.media_info["BIG2"] = {"url": fake.file_url("BIG1"), "mime_type": "image/jpeg"}
    fake.media_info["EVIL"] = {"url": "https://evil.example/steal.jpg", "file_size": 10}
    channel = build(section(fake.base_url))
    await channel.start(engine.context(image_bytes=200))
    try:
        await deliver(
            channel,
            message(
                "image",
                {"id": "IMG1", "mime_type": "image/png", "caption": "my cat"},
                id="wamid.I1",
            ),
            message(
                "audio",
                {"id": "AUD1", "mime_type": "audio/ogg; codecs=opus", "voice": True},
                id="wamid.I2",
            ),
            # Declared over the cap: never downloaded. Undeclared but over it: download cut off.
            message("image", {"id": "BIG1", "mime_type": "image/jpeg"}, id="wamid.I3"),
            message("image", {"id": "BIG2", "mime_type": "image/jpeg"}, id="wamid.I4"),
            # The token never goes to a host that is not WhatsApp's.
            message("image", {"id": "EVIL", "mime_type": "image/jpeg"}, id="wamid.I5"),
            message("image", {"id": "GONE", "mime_type": "image/jpeg"}, id="wamid.I6"),
            message(
                "document",
                {"id": "DOC1", "filename": "q3.pdf", "mime_type": "application/pdf"},
                id="wamid.I7",
            ),
            message("video", {"id": "VID1", "mime_type": "video/mp4"}, id="wamid.I8"),
            message("sticker", {"id": "STK1", "mime_type": "image/webp"}, id="wamid.I9"),
        )
        stored = {m.id: m for m in await engine.user_messages(DM)}
        assert fake.downloads == [f"Bearer {ACCESS_TOKEN}"] * 3
        # What the turn's enrichment asks the adapter for, after the acknowledgement.
        late = await channel.fetch_attachment("whatsapp-media:DOC1", cap_bytes=1000)
        assert late == b"%PDF-1.7 q3"
        assert await channel.fetch_attachment("whatsapp-media:DOC1", cap_bytes=5) is None
        assert await channel.fetch_attachment("https://elsewhere.example/x", cap_bytes=99) is None
    finally:
        await channel.stop()
    assert len(stored) == 9
    image = stored["wamid.I1"]
    assert image.content == "my cat"
    (attachment,) = image.metadata["attachments"]
    # The bytes are stored once, as a blob; the row keeps their hash.
    assert (attachment["kind"], attachment["mime"], attachment["sha256"]) == (
        "image",
        "image/png",
        hashlib.sha256(png).hexdigest(),
    )
    voice = stored["wamid.I2"]
    assert voice.content == "[Voice message]"
    (clip,) = voice.metadata["attachments"]
    assert (clip["kind"], clip["mime"], clip["sha256"]) == (
        "voice",
        "audio/ogg",
        hashlib.sha256(ogg).hexdigest(),
    )
    assert not voice.metadata.get("transcribed")
    for key in ("wamid.I3", "wamid.I4", "wamid.I5", "wamid.I6"):
        assert stored[key].content == "[Image]"
        assert "sha256" not in stored[key].metadata["attachments"][0]
    assert stored["wamid.I3"].metadata["attachments"][0]["size"] == 300
    assert stored["wamid.I7"].content == "[File: q3.pdf]"
    assert stored["wamid.I7"].metadata["whatsapp"]["media_id"] == "DOC1"
    # A document is fetched after the acknowledgement, by the turn's enrichment.
    (document,) = stored["wamid.I7"].metadata["attachments"]
    assert (document["kind"], document["name"], document["fetch_url"]) == (
        "file",
        "q3.pdf",
        "whatsapp-media:DOC1",
    )
    assert stored["wamid.I8"].content == "[Video]"
    assert stored["wamid.I9"].content == "[Sticker]"
    # Downloads: the image, the voice note and the cut-off one, then the document, each with
    # the token.
    assert fake.downloads == [f"Bearer {ACCESS_TOKEN}"] * 4


async def test_other_kinds_become_words_and_reactions_are_likes(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    await deliver(
        whatsapp,
        message(
            "location",
            {"latitude": 52.52, "longitude": 13.405, "name": "Office", "address": "Main St 1"},
            id="wamid.K1",
        ),
        message("location", {"latitude": 1.5, "longitude": 2.5}, id="wamid.K2"),
        message(
            "interactive",
            {"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes please"}},
            id="wamid.K3",
        ),
        message("button", {"payload": "p", "text": "Stop promotions"}, id="wamid.K4"),
        message("reaction", {"message_id": "wamid.OUT9", "emoji": "👍"}, id="wamid.K5"),
        message("reaction", {"message_id": "wamid.OUT9", "emoji": "👎"}, id="wamid.K6"),
        # A reaction taken back, an unsupported type, a message without sender: nothing.
        message("reaction", {"message_id": "wamid.OUT9", "emoji": ""}, id="wamid.K7"),
        message("unsupported", {}, id="wamid.K8"),
        {"id": "wamid.K9", "type": "text", "text": {"body": "who?"}},
    )
    contact = message("contacts", {}, id="wamid.K10")
    contact["contacts"] = [{"name": {"formatted_name": "Carol Jones"}}]
    await deliver(whatsapp, contact)
    stored = {m.id: m for m in await engine.user_messages(DM)}
    assert stored["wamid.K1"].content == "[Location: Office, Main St 1 (52.52, 13.405)]"
    assert stored["wamid.K2"].content == "[Location: 1.5, 2.5]"
    assert stored["wamid.K3"].content == "Yes please"
    assert stored["wamid.K4"].content == "Stop promotions"
    like, dislike = stored["wamid.K5"], stored["wamid.K6"]
    assert (like.verb, like.content, like.reply_to) == ("like", "👍", "wamid.OUT9")
    assert (dislike.verb, dislike.content) == ("dislike", "👎")
    assert stored["wamid.K10"].content == "[Contact: Carol Jones]"
    assert set(stored) == {f"wamid.K{n}" for n in (1, 2, 3, 4, 5, 6, 10)}


# ----------------------------------------------------------------------------- the webhook


async def test_forged_or_unsigned_webhooks_are_refused_and_nothing_is_stored(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    payload = webhook([text("forged", id="wamid.F1")])
    body, headers = signed(payload)
    wrong = await post(whatsapp, payload, secret="not-the-app-secret")
    unsigned = await post(whatsapp, body, headers={"content-type": "application/json"})
    sha1 = await post(whatsapp, body, headers={"x-hub-signature-256": "sha1=" + "0" * 40})
    tampered = await post(whatsapp, body + b" ", headers=headers)
    assert [r.status_code for r in (wrong, unsigned, sha1, tampered)] == [401] * 4
    assert engine.results == [] and await engine.stored(DM) == []

    for garbage in (b"not json", b"[1, 2]", b"\xff\xfe"):
        response = await post(whatsapp, garbage, headers=signature_headers(garbage))
        assert response.status_code == 400
    huge = b"{" + b" " * (1024 * 1024) + b"}"
    assert (await post(whatsapp, huge, headers=signature_headers(huge))).status_code == 413
    assert (await post(whatsapp, payload)).status_code == 200
    assert len(await engine.stored(DM)) == 1


async def test_the_subscription_handshake_echoes_the_challenge_only_for_our_token(
    whatsapp: WhatsAppChannel,
) -> None:
    transport = httpx.ASGITransport(app=Starlette(routes=whatsapp.routes()))
    async with httpx.AsyncClient(transport=transport, base_url="http://postroom.test") as client:

        async def handshake(mode: str, token: str) -> httpx.Response:
            params = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": "1158201444"}
            return await client.get(WEBHOOK_PATH, params=params)

        ok = await handshake("subscribe", VERIFY_TOKEN)
        assert (ok.status_code, ok.text) == (200, "1158201444")
        assert ok.headers["content-type"].startswith("text/plain")
        assert (await handshake("subscribe", "guess")).status_code == 403
        assert (await handshake("unsubscribe", VERIFY_TOKEN)).status_code == 403
        assert (await client.get(WEBHOOK_PATH)).status_code == 403


async def test_a_redelivered_webhook_is_harmless(whatsapp: WhatsAppChannel, engine: Engine) -> None:
    payload = webhook([text("once", id="wamid.D1")])
    first = await post(whatsapp, payload)
    again = await post(whatsapp, payload)
    assert (first.status_code, again.status_code) == (200, 200)
    assert [m.content for m in await engine.stored(DM)] == ["once"]


async def test_the_webhook_is_answered_only_after_ingest_committed(
    fake: FakeWhatsApp, engine: Engine, clock: FakeClock
) -> None:
    """A failing ingest answers 500, so Meta sends the webhook again; nothing is lost."""
    attempts: list[str] = []

    async def inbound(message: InboundMessage) -> IngestResult:
        attempts.append(message.id)
        if len(attempts) == 1:
            raise RuntimeError("the database is away")
        return await engine.inbound(message)

    channel = build(section(fake.base_url))
    await channel.start(ChannelContext(inbound=inbound, clock=clock))
    try:
        payload = webhook([text("keep me", id="wamid.A1")])
        failed = await post(channel, payload, raise_errors=False)
        assert failed.status_code == 500
        assert await engine.stored(DM) == []
        assert (await post(channel, payload)).status_code == 200
    finally:
        await channel.stop()
    assert attempts == ["wamid.A1", "wamid.A1"]
    assert [m.content for m in await engine.stored(DM)] == ["keep me"]


async def test_a_message_ingest_refuses_is_acknowledged_and_the_rest_go_in(
    whatsapp: WhatsAppChannel, engine: Engine
) -> None:
    await deliver(
        whatsapp,
        text("x" * (70 * 1024), id="wamid.T1"),  # over the 64 KiB content limit
        text("short", id="wamid.T2"),
    )
    assert [m.content for m in await engine.stored(DM)] == ["short"]


async def test_a_channel_whose_number_cannot_be_read_still_receives(
    fake: FakeWhatsApp, engine: Engine
) -> None:
    fake.phone_fails = True
    channel = build(section(fake.base_url))
    await channel.start(engine.context())
    try:
        status = channel.status()
        assert status.state == "error" and "Service temporarily unavailable" in (
            status.last_error or ""
        )
        await deliver(channel, text("still here", id="wamid.S1"))
        assert [m.content for m in await engine.stored(DM)] == ["still here"]
    finally:
        await channel.stop()
    assert PHONE_ID in fake.calls[0][1]
