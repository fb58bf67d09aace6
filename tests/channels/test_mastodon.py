"""The Mastodon adapter through Mastodon.py against a fake instance.

The adapter polls the fake's notifications and posts statuses to it through the real
``Mastodon`` client (requests, in worker threads). Ingest and the delivery loop are the real
engine over SQLite, driven by hand with a fake clock.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.mastodon import MastodonChannel, MastodonUnavailable, build
from postroom.channels.mastodon.statuses import STATUS_LIMIT, status_length
from postroom.core import Action, InboundMessage, Layer, MessageType
from postroom.core.errors import InvalidInput
from postroom.engine.ingest import IngestResult

from fake_engine_slack_whatsapp import Engine, eventually, open_engine, serve
from fake_mastodon import BOT_ID, TOKEN, FakeMastodon, rate_limited
from fakeclock import FakeClock

# Chats and senders name the account by its id on the instance, not by its acct.
ALICE_ID = "109876543210"
BOB_ID = "110023456789012345"
ALICE = f"mastodon:account/{ALICE_ID}"
BOB = f"mastodon:account/{BOB_ID}"


def alice_on(fake: FakeMastodon, **extra: Any) -> dict[str, Any]:
    """``alice``, an account of the bot's instance."""
    return fake.account("alice", id=ALICE_ID, **extra)


def bob_on(fake: FakeMastodon, **extra: Any) -> dict[str, Any]:
    """``bob@other.example``, an account of another instance."""
    return fake.account("bob", domain="other.example", id=BOB_ID, **extra)


@pytest.fixture
async def fake() -> AsyncIterator[FakeMastodon]:
    fake = FakeMastodon()
    async with serve(fake.app()) as url:
        fake.base_url = url
        alice_on(fake)
        bob_on(fake)
        yield fake


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


def config(fake: FakeMastodon, **extra: Any) -> dict[str, Any]:
    return {"access_token": TOKEN, "base_url": fake.base_url, "poll_interval_s": 0.05, **extra}


@pytest.fixture
async def mastodon(fake: FakeMastodon, engine: Engine) -> AsyncIterator[MastodonChannel]:
    channel = build(config(fake))
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def polled(fake: FakeMastodon) -> None:
    """Wait for two more polls: whatever was there before the first is ingested by then."""
    seen = fake.calls["/api/v1/notifications"]
    await eventually(lambda: fake.calls["/api/v1/notifications"] >= seen + 2)


# ----------------------------------------------------------------------------- inbound


async def test_mentions_and_direct_messages_get_the_canonical_addresses(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    assert mastodon.status().state == "connected"
    assert mastodon.bot is not None and (mastodon.bot.id, mastodon.bot.acct) == (BOT_ID, "postroom")
    alice = alice_on(fake, name="Alice Liddell")
    bob = bob_on(fake)
    public = fake.mention(alice, "what is <this> & that?")
    dm = fake.mention(bob, "psst, a secret", visibility="direct")
    # Favourites and follows are not messages.
    fake.notify(fake.add_status(fake.bot, "<p>mine</p>"), type="favourite")
    await eventually(lambda: len(engine.results) == 2)

    (first,) = await engine.user_messages(ALICE)
    assert (first.id, first.sender, first.sender_name) == (public["id"], ALICE, "Alice Liddell")
    assert first.content == "what is <this> & that?"
    assert first.verb == "mention" and first.metadata.get("mentioned") is True
    assert not first.metadata.get("is_dm") and first.reply_to is None
    assert first.metadata["mastodon"]["visibility"] == "public"
    (secret,) = await engine.user_messages(BOB)
    assert (secret.sender, secret.sender_name, secret.content) == (BOB, "bob", "psst, a secret")
    assert secret.metadata.get("is_dm") is True
    assert secret.metadata["mastodon"]["acct"] == "bob@other.example"
    assert engine.result_for(dm["id"]).decision.action == Action.FIRE
    # Only mentions are asked for, and the cursor follows the newest one ingested.
    assert all("types%5B%5D=mention" in q for m, p, q in fake.requests if p.endswith("ications"))
    assert mastodon.cursor == fake.notifications[1]["id"]


async def test_the_cursor_moves_only_past_what_ingest_committed(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    alice = alice_on(fake)
    fake.mention(alice, "one")
    failures = ["the store is busy"]

    async def inbound(message: InboundMessage) -> IngestResult:
        if message.content == "two" and failures:
            raise RuntimeError(failures.pop())
        return await engine.inbound(message)

    channel = build(config(fake))
    await channel.start(ChannelContext(inbound=inbound, clock=clock))
    try:
        await eventually(lambda: len(engine.results) == 1)
        cursor = channel.cursor
        fake.mention(alice, "two")
        fake.mention(alice, "three")
        await eventually(lambda: len(engine.results) == 3)
        assert [m.content for m in await engine.user_messages(ALICE)] == ["one", "two", "three"]
        # The failed poll asked again from the same place; nothing was dismissed.
        queries = [q for _m, p, q in fake.requests if p == "/api/v1/notifications"]
        assert sum(f"min_id={cursor}" in q for q in queries) >= 2
        assert not any("dismiss" in p or "clear" in p for _m, p, _q in fake.requests)
        assert channel.status().state == "connected"
    finally:
        await channel.stop()


async def test_at_start_only_recent_mentions_are_caught_up_and_none_twice(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    alice = alice_on(fake)
    old = clock() - timedelta(hours=2)
    fake.mention(alice, "long ago", created_at=old)
    fake.mention(alice, "while you were away", created_at=clock() - timedelta(minutes=3))
    channel = build(config(fake))
    engine.attach(channel)
    await channel.start(engine.context())
    try:
        await eventually(lambda: len(engine.results) == 1)
        await polled(fake)
        assert [m.content for m in await engine.user_messages(ALICE)] == ["while you were away"]
        assert channel.cursor == fake.notifications[-1]["id"]
    finally:
        await channel.stop()

    # A restart reads the newest page again: ingest knows the mention already.
    again = build(config(fake))
    await again.start(engine.context())
    try:
        await eventually(lambda: len(engine.results) == 2)
        assert engine.results[-1].duplicate
        await polled(fake)
        assert len(await engine.user_messages(ALICE)) == 1
    finally:
        await again.stop()


async def test_only_history_at_start_then_pages_follow_one_another(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    alice = alice_on(fake)
    fake.mention(alice, "history", created_at=clock() - timedelta(days=1))
    channel = build(config(fake))
    await channel.start(engine.context())
    try:
        await eventually(lambda: channel.cursor == fake.notifications[0]["id"])
        for n in range(45):
            fake.mention(alice, f"message {n}")
        await eventually(lambda: len(engine.results) == 45)
        contents = [m.content for m in await engine.user_messages(ALICE)]
        assert contents == [f"message {n}" for n in range(45)]
    finally:
        await channel.stop()


async def test_many_recent_mentions_at_start_are_all_caught_up(
    fake: FakeMastodon, engine: Engine
) -> None:
    alice = alice_on(fake)
    for n in range(45):
        fake.mention(alice, f"message {n}")
    channel = build(config(fake))
    await channel.start(engine.context())
    try:
        await eventually(lambda: len(engine.results) == 45)
        contents = [m.content for m in await engine.user_messages(ALICE)]
        assert contents == [f"message {n}" for n in range(45)]
    finally:
        await channel.stop()


async def test_a_rate_limited_poll_waits_for_the_reset(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    await polled(fake)
    fake.poll_failures.append(rate_limited(1))
    fake.mention(alice_on(fake), "after the pause")
    await eventually(lambda: mastodon.status().state == "error")
    assert "Ratelimit" in str(mastodon.status().last_error)
    await eventually(lambda: len(engine.results) == 1)
    assert mastodon.status().state == "connected"


async def test_a_reply_carries_reply_to_and_a_reply_to_the_bot_follows_the_chain(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    answer_id = await engine.put_answer(ALICE, "I am the answer")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent" and row.platform_message_id
    alice = alice_on(fake)
    reply = fake.mention(alice, "and then?", in_reply_to_id=row.platform_message_id)
    await eventually(lambda: len(engine.results) == 1)
    (stored,) = await engine.user_messages(ALICE)
    assert stored.reply_to == row.platform_message_id
    decision = engine.result_for(reply["id"]).decision
    assert (decision.layer, decision.verb, decision.action) == (
        Layer.REPLY_CHAIN,
        "mention",
        Action.FIRE,
    )


async def test_the_bots_own_statuses_are_not_ingested(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    fake.notify(fake.add_status(fake.bot, fake.mention_html("talking to myself")))
    fake.mention(alice_on(fake), "a person")
    await eventually(lambda: len(engine.results) == 1)
    await polled(fake)
    assert [m.content for m in await engine.user_messages(ALICE)] == ["a person"]
    assert await engine.stored(f"mastodon:account/{BOT_ID}") == []


async def test_leading_mentions_of_other_people_stay_and_html_becomes_text(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    alice = alice_on(fake)
    content = (
        '<p><span class="h-card"><a href="https://other.example/@carol" class="u-url mention">'
        '@<span>carol@other.example</span></a></span> <span class="h-card"><a href="'
        f'{fake.base_url}/@postroom" class="u-url mention">@<span>postroom</span></a></span> '
        'see <a href="https://example.org/a/long/path"><span class="invisible">https://'
        '</span><span class="ellipsis">example.org/a/lo</span><span class="invisible">ng/path'
        "</span></a></p><p>line one<br>line two</p>"
    )
    fake.notify(fake.add_status(alice, content))
    await eventually(lambda: len(engine.results) == 1)
    (stored,) = await engine.user_messages(ALICE)
    assert stored.content == (
        "@carol@other.example see https://example.org/a/long/path\n\nline one\nline two"
    )


async def test_images_are_kept_and_audio_without_words_waits_for_a_transcript(
    fake: FakeMastodon, engine: Engine
) -> None:
    channel = build(config(fake))
    await channel.start(engine.context(image_bytes=1024))
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    fake.media["cat.png"] = (png, "image/png")
    fake.media["note.ogg"] = (b"ogg-bytes", "audio/ogg")
    fake.media["huge.png"] = (b"\x00" * 4096, "image/png")
    alice = alice_on(fake)

    def media(name: str, kind: str, **extra: Any) -> dict[str, Any]:
        return {"id": name, "type": kind, "url": fake.media_url(name), **extra}

    fake.mention(alice, "look", media=[media("cat.png", "image", description="a cat")])
    voice = fake.add_status(
        alice, fake.mention_html("").replace(" </p>", "</p>"), media=[media("note.ogg", "audio")]
    )
    fake.notify(voice)
    fake.mention(
        alice,
        "",
        media=[
            media("gone.png", "image"),
            media("huge.png", "image"),
            media("clip.mp4", "video"),
        ],
    )
    try:
        await eventually(lambda: len(engine.results) == 3)
    finally:
        await channel.stop()
    image, audio, others = await engine.user_messages(ALICE)
    (cat,) = image.metadata["attachments"]
    assert (image.content, cat["kind"], cat["mime"], cat["name"]) == (
        "look",
        "image",
        "image/png",
        "a cat",
    )
    assert cat["sha256"] == hashlib.sha256(png).hexdigest()  # the bytes: a blob
    assert audio.content == "[Voice message]"
    assert audio.metadata["attachments"][0]["sha256"] == hashlib.sha256(b"ogg-bytes").hexdigest()
    assert others.content == "[Image]"
    assert ["sha256" in a for a in others.metadata["attachments"]] == [False, False, False]
    assert [a["kind"] for a in others.metadata["attachments"]] == ["image", "image", "video"]


async def test_a_status_ingest_refuses_is_skipped_for_good(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    async def inbound(message: InboundMessage) -> IngestResult:
        if message.content == "too big":
            raise InvalidInput("The content is too large.")
        return await engine.inbound(message)

    channel = build(config(fake))
    await channel.start(ChannelContext(inbound=inbound, clock=clock))
    try:
        alice = alice_on(fake)
        fake.mention(alice, "too big")
        fake.mention(alice, "fine")
        await eventually(lambda: len(engine.results) == 1)
        await polled(fake)
        assert [m.content for m in await engine.user_messages(ALICE)] == ["fine"]
    finally:
        await channel.stop()


async def test_a_bad_token_is_reported_and_the_loop_keeps_trying(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    baseline = set(asyncio.all_tasks())
    channel = build(config(fake, access_token="wrong"))
    await channel.start(engine.context())
    try:
        await eventually(lambda: fake.calls["/api/v1/accounts/verify_credentials"] >= 2)
        status = channel.status()
        assert status.state == "error" and "401" in str(status.last_error)
        with pytest.raises(MastodonUnavailable):
            await channel.check()
    finally:
        await channel.stop()
    assert channel.status().state == "stopped"

    def settled() -> bool:
        return {t for t in asyncio.all_tasks() if not t.done()} - baseline <= {
            asyncio.current_task()
        }

    await eventually(settled)


# ----------------------------------------------------------------------------- outbound


async def test_an_answer_replies_to_the_status_with_its_visibility_and_mentions_the_sender(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    bob = bob_on(fake)
    dm = fake.mention(bob, "psst", visibility="direct")
    await eventually(lambda: len(engine.results) == 1)
    answer_id = await engine.put_answer(BOB, "**a** secret answer", reply_to=dm["id"])
    assert await engine.delivery().deliver_due()
    (sent,) = fake.posted
    assert sent["status"] == "@bob@other.example a secret answer"
    assert (sent["in_reply_to_id"], sent["visibility"]) == (dm["id"], "direct")
    assert sent["_key"]
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent" and row.platform_message_id in fake.statuses
    # Known from the inbound status: the instance was not asked again, nor for the acct.
    assert fake.calls[f"/api/v1/statuses/{dm['id']}"] == 0
    assert fake.calls[f"/api/v1/accounts/{BOB_ID}"] == 0


async def test_after_a_restart_the_acct_is_asked_from_the_instance_once(
    fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    dm = fake.mention(
        bob_on(fake), "psst", visibility="direct", created_at=clock() - timedelta(minutes=3)
    )
    first = build(config(fake))
    await first.start(engine.context())
    try:
        await eventually(lambda: len(engine.results) == 1)
    finally:
        await first.stop()

    # The mention is history for the new adapter: nothing tells it bob's acct.
    channel = build(config(fake, catch_up_s=60))
    engine.attach(channel)
    await channel.start(engine.context())
    try:
        await eventually(lambda: channel.cursor == fake.notifications[-1]["id"])
        await polled(fake)
        assert len(engine.results) == 1
        await engine.put_answer(BOB, "an answer", reply_to=dm["id"])
        await engine.put_answer(BOB, "and another", reply_to=dm["id"])
        delivery = engine.delivery()
        while await delivery.deliver_due():
            pass
        assert [p["status"] for p in fake.posted] == [
            "@bob@other.example an answer",
            "@bob@other.example and another",
        ]
        assert {p["visibility"] for p in fake.posted} == {"direct"}
        assert fake.calls[f"/api/v1/accounts/{BOB_ID}"] == 1

        # The instance cannot answer now: tried again later. It knows no such account: given up.
        fake.account_failures.append((502, {"error": "bad gateway"}, {}))
        carol = fake.account("carol", domain="far.example")
        retried = await engine.put_answer(f"mastodon:account/{carol['id']}", "hello carol")
        assert await delivery.deliver_due()
        (row,) = await engine.deliveries(retried)
        assert (row.status, row.attempts) == ("pending", 1)
        clock.advance(seconds=5)
        assert await delivery.deliver_due()
        assert [r.status for r in await engine.deliveries(retried)] == ["sent"]
        assert fake.posted[-1]["status"] == "@carol@far.example hello carol"
        gone = await engine.put_answer("mastodon:account/404404", "to nobody")
        assert await delivery.deliver_due()
        (row,) = await engine.deliveries(gone)
        assert row.status == "abandoned" and "404404" in str(row.last_error)
    finally:
        await channel.stop()


async def test_a_long_answer_is_a_thread_of_statuses_within_the_limit(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    alice = alice_on(fake)
    trigger = fake.mention(alice, "tell me a lot", visibility="unlisted")
    await eventually(lambda: len(engine.results) == 1)
    words = " ".join(f"word{n}" for n in range(240))
    answer_id = await engine.put_answer(ALICE, words, reply_to=trigger["id"])
    delivery = engine.delivery()
    while await delivery.deliver_due():
        pass
    rows = await engine.deliveries(answer_id)
    assert len(rows) >= 3 and all(r.status == "sent" for r in rows)
    # The mention makes each outbox chunk a little too long: the adapter cuts again.
    assert len(fake.posted) > len(rows)
    assert all(p["status"].startswith("@alice ") for p in fake.posted)
    assert all(status_length(p["status"]) <= STATUS_LIMIT for p in fake.posted)
    assert {p["visibility"] for p in fake.posted} == {"unlisted"}
    assert fake.posted[0]["in_reply_to_id"] == trigger["id"]
    posted_ids = [s["id"] for s in fake.statuses.values() if s["account"]["id"] == BOT_ID]
    assert [p["in_reply_to_id"] for p in fake.posted[1:]] == posted_ids[:-1]
    text = " ".join(p["status"].removeprefix("@alice ") for p in fake.posted)
    assert text.split() == words.split()


async def test_the_visibility_is_asked_when_unknown_and_a_deleted_status_is_not_replied_to(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    alice = alice_on(fake)
    private = fake.add_status(alice, fake.mention_html("followers only"), visibility="private")
    await engine.put_answer(ALICE, "for your followers", reply_to=private["id"])
    await engine.put_answer(ALICE, "to a deleted one", reply_to="999999")
    await engine.put_answer(ALICE, "a notice", message_type=MessageType.HOST)
    delivery = engine.delivery()
    while await delivery.deliver_due():
        pass
    first, second, third = fake.posted
    assert (first["in_reply_to_id"], first["visibility"]) == (private["id"], "private")
    assert fake.calls[f"/api/v1/statuses/{private['id']}"] == 1
    assert "in_reply_to_id" not in second and second["visibility"] == "direct"
    assert third["status"].startswith("@alice 🏠") and third["visibility"] == "direct"


async def test_a_reply_to_a_status_deleted_meanwhile_still_reaches_the_person(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine
) -> None:
    alice = alice_on(fake)
    trigger = fake.mention(alice, "ask")
    await eventually(lambda: len(engine.results) == 1)
    del fake.statuses[trigger["id"]]
    await engine.put_answer(ALICE, "answer", reply_to=trigger["id"])
    assert await engine.delivery().deliver_due()
    tried, sent = fake.posted
    assert tried["in_reply_to_id"] == trigger["id"] and "in_reply_to_id" not in sent
    assert sent["visibility"] == "public" and sent["_key"] == tried["_key"]


async def test_a_rate_limit_waits_for_the_reset_then_delivers(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    fake.post_failures.append(rate_limited(30))
    answer_id = await engine.put_answer(ALICE, "patience")
    delivery = engine.delivery()
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert (row.status, row.attempts) == ("pending", 1)
    assert 27 <= (row.next_try - clock()).total_seconds() <= 32
    assert not await delivery.deliver_due()  # not before the reset
    clock.advance(seconds=33)
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert [p["status"] for p in fake.posted] == ["@alice patience", "@alice patience"]
    assert fake.posted[0]["_key"] == fake.posted[1]["_key"]


async def test_server_errors_are_retried_and_refusals_are_given_up(
    mastodon: MastodonChannel, fake: FakeMastodon, engine: Engine, clock: FakeClock
) -> None:
    fake.post_failures.append((503, {"error": "maintenance"}, {}))
    retried = await engine.put_answer(ALICE, "later")
    delivery = engine.delivery()
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(retried)
    assert (row.status, row.attempts) == ("pending", 1)
    clock.advance(seconds=5)
    assert await delivery.deliver_due()
    assert [r.status for r in await engine.deliveries(retried)] == ["sent"]

    fake.post_failures.append((422, {"error": "Validation failed: Text can't be blank"}, {}))
    refused = await engine.put_answer(ALICE, "never")
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(refused)
    assert row.status == "abandoned" and "Validation failed" in str(row.last_error)

    fake.post_failures.append((429, {"error": "Too many requests"}, {}))
    unsure = await engine.put_answer(ALICE, "no reset given")
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(unsure)
    assert (row.status, row.attempts) == ("pending", 1)  # the usual backoff
    clock.advance(seconds=5)
    assert await delivery.deliver_due()

    fake.post_failures.append((404, {"error": "Record not found"}, {}))
    missing = await engine.put_answer(ALICE, "to nobody")
    assert await delivery.deliver_due()
    assert [r.status for r in await engine.deliveries(missing)] == ["abandoned"]

    fake.lookup_failures.append((502, {"error": "bad gateway"}, {}))
    looked_up = await engine.put_answer(ALICE, "to an unknown status", reply_to="424242")
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(looked_up)
    assert (row.status, row.attempts) == ("pending", 1)

    bad = await engine.put_answer("mastodon:status/1", "nowhere")
    assert await delivery.deliver_due()
    (row,) = await engine.deliveries(bad)
    assert row.status == "abandoned"


async def test_check_and_typing(mastodon: MastodonChannel, fake: FakeMastodon) -> None:
    host = fake.base_url.removeprefix("http://")
    assert await mastodon.check() == f"Mastodon account @postroom on {host}"
    await mastodon.typing(ALICE, True)  # Mastodon has no typing indicator: nothing is sent
    await mastodon.typing(ALICE, False)
    assert [p for _m, p, _q in fake.requests if "typing" in p] == []
    # Without starting (postroom doctor): a client of its own, closed after.
    assert await build(config(fake)).check() == f"Mastodon account @postroom on {host}"
