"""The Slack adapter at its edges: malformed or foreign Events API requests, Web API lookups
that fail, a Slack that cannot be reached, refused sends, and the pure text and id helpers."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from postroom.channels.slack import EVENTS_PATH, SlackChannel, build
from postroom.channels.slack.events import (
    BotIdentity,
    guess_kind,
    kind_of_channel,
    parse_event,
    slack_text_to_plain,
)
from postroom.channels.slack.files import content_with_files
from postroom.core.messages import Attachment
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk

from fake_engine_slack_whatsapp import Engine, eventually, open_engine, serve
from fake_slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    event_callback,
    message_event,
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


@pytest.fixture
async def slack(fake: FakeSlack, engine: Engine) -> AsyncIterator[SlackChannel]:
    channel = build(
        {
            "bot_token": BOT_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "base_url": f"{fake.base_url}/api/",
            "max_body_bytes": 2048,
        }
    )
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def raw_post(
    channel: SlackChannel, body: bytes, clock: FakeClock, *, timestamp: str | None = None
) -> httpx.Response:
    """*body* signed as Slack signs it (optionally under a forged timestamp header)."""
    stamp = str(int(clock().timestamp()))
    base = b"v0:" + stamp.encode() + b":" + body
    headers = {
        "content-type": "application/json",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": "v0="
        + hmac.new(SIGNING_SECRET.encode(), base, hashlib.sha256).hexdigest(),
    }
    if timestamp is not None:
        headers["x-slack-request-timestamp"] = timestamp
    transport = httpx.ASGITransport(app=Starlette(routes=channel.routes()))
    async with httpx.AsyncClient(transport=transport, base_url="http://postroom.test") as client:
        return await client.post(EVENTS_PATH, content=body, headers=headers)


async def post_event(channel: SlackChannel, clock: FakeClock, payload: dict[str, Any]) -> None:
    response = await raw_post(channel, json.dumps(payload).encode(), clock)
    assert response.status_code == 200, response.text


def chunk(chat_jid: str = CHANNEL, **changes: Any) -> OutgoingChunk:
    fields: dict[str, Any] = {
        "delivery_id": 1,
        "message_id": "answer-1",
        "chat_jid": chat_jid,
        "chunk": 0,
        "chunks": 1,
        "content": "hello",
        "kind": "reply",
        "message_type": "assistant",
        "folder": "main",
        "topic": "",
        "reply_to": None,
        "attempt": 1,
        **changes,
    }
    return OutgoingChunk(**fields)


# ----------------------------------------------------------------------------- requests


async def test_bodies_that_are_too_large_not_json_or_wrongly_stamped_are_refused(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    assert (await raw_post(slack, b"x" * 4096, clock)).status_code == 413
    assert (await raw_post(slack, b"{not json", clock)).status_code == 400
    assert (await raw_post(slack, b"[1, 2]", clock)).status_code == 400
    body = json.dumps(event_callback(message_event("hi", ts="1712345000.000001"))).encode()
    assert (await raw_post(slack, body, clock, timestamp="yesterday")).status_code == 401
    assert engine.results == []


async def test_payloads_that_carry_no_message_are_acknowledged_and_ignored(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    await post_event(slack, clock, {"type": "app_rate_limited", "team_id": TEAM})
    reaction = {"type": "reaction_added", "user": "U1ALICE", "reaction": "tada"}
    await post_event(slack, clock, event_callback(reaction))
    await post_event(slack, clock, event_callback(message_event("x", ts="1.2", channel="")))
    await post_event(slack, clock, event_callback(message_event("x", ts="not-a-ts")))
    assert engine.results == []


async def test_lookups_that_fail_fall_back_to_the_ids(
    slack: SlackChannel, fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    fake.conversations["C5DM"] = {"is_im": True}
    # No channel_type: the adapter asks conversations.info, once per channel.
    for ts in ("1712345000.000001", "1712345000.000002"):
        await post_event(
            slack,
            clock,
            event_callback(message_event("hi", ts=ts, channel="C5DM", channel_type="")),
        )
    # A channel Slack does not know (and a user it does not know): the id's prefix decides.
    await post_event(
        slack,
        clock,
        event_callback(
            message_event(
                "psst", ts="1712345000.000003", channel="G7OLD", channel_type="", user="U9GHOST"
            )
        ),
    )
    first, second, third = engine.results
    assert first.chat_jid == second.chat_jid == f"slack:{TEAM}/dm/C5DM"
    assert [c["channel"] for c in fake.calls["conversations.info"]] == ["C5DM", "G7OLD"]
    assert third.chat_jid == f"slack:{TEAM}/group/G7OLD"
    (ghost,) = await engine.user_messages(third.chat_jid)
    assert ghost.sender_name == "U9GHOST"


async def test_refused_input_is_acknowledged_and_not_stored(
    fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    # The default body limit (1 MiB) lets a message past ingest's content limit (64 KiB) in.
    channel = build(
        {
            "bot_token": BOT_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "base_url": f"{fake.base_url}/api/",
        }
    )
    await channel.start(engine.context())
    try:
        assert channel.status().state == "connected"
        huge = message_event("x" * 70_000, ts="1712345000.000009")
        await post_event(channel, clock, event_callback(huge))
    finally:
        await channel.stop()
    assert await engine.stored(CHANNEL) == []


# ----------------------------------------------------------------------------- outbound


async def test_an_answer_to_a_message_inside_a_thread_goes_to_that_thread(
    slack: SlackChannel, fake: FakeSlack, clock: FakeClock
) -> None:
    inside = message_event("in here", ts="1712345100.000002", thread_ts="1712345100.000001")
    await post_event(slack, clock, event_callback(inside))
    await slack.send(chunk(reply_to="1712345100.000002"))
    assert fake.posted[-1]["thread_ts"] == "1712345100.000001"


async def test_refusals_and_bad_addresses_are_delivery_failures(
    slack: SlackChannel, fake: FakeSlack
) -> None:
    fake.post_failures.append((200, {"ok": False, "error": "msg_too_long"}, {}))
    with pytest.raises(DeliveryFailed, match="msg_too_long") as refused:
        await slack.send(chunk())
    assert not refused.value.permanent
    fake.post_failures.append((429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "x"}))
    with pytest.raises(DeliveryFailed) as limited:
        await slack.send(chunk())
    assert limited.value.retry_after is None  # a Retry-After that is not a number is ignored
    with pytest.raises(DeliveryFailed) as wrong:
        await slack.send(chunk(chat_jid="slack:T1/thread/C1"))
    assert wrong.value.permanent


async def test_an_unreachable_slack_is_retried_in_the_background(
    engine: Engine, unused_port: int
) -> None:
    channel = build(
        {
            "bot_token": BOT_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "base_url": f"http://127.0.0.1:{unused_port}/api/",
        }
    )
    baseline = set(asyncio.all_tasks())
    await channel.start(engine.context())
    try:
        assert channel.status().state == "error"
        assert "slack-identify" in {t.get_name() for t in asyncio.all_tasks()}
        with pytest.raises(DeliveryFailed, match="could not be reached"):
            await channel.send(chunk())
    finally:
        await channel.stop()
    assert set(asyncio.all_tasks()) <= baseline


async def test_socket_mode_keeps_trying_while_the_token_is_refused(
    fake: FakeSlack, engine: Engine
) -> None:
    channel = build(
        {"bot_token": "xoxb-revoked", "app_token": APP_TOKEN, "base_url": f"{fake.base_url}/api"}
    )
    await channel.start(engine.context())
    try:
        await eventually(lambda: channel.status().state == "error")
        assert "invalid_auth" in (channel.status().last_error or "")
        assert channel.bot is None
    finally:
        await channel.stop()


@pytest.fixture
async def unused_port() -> int:
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


# ----------------------------------------------------------------------------- pure helpers


def test_text_references_read_as_a_person_reads_them() -> None:
    text = "<#C1|general> <#C2> <!here> <!subteam^S1|@devs> <mailto:a@x.org|a@x.org> &amp;"
    assert slack_text_to_plain(text, bot_user=BOT_USER, assistant_name="Postroom") == (
        "#general #C2 @here @devs a@x.org &"
    )


def test_chat_kinds_from_the_event_or_the_id() -> None:
    assert kind_of_channel("mpim", "G1") == "group"
    assert kind_of_channel(None, "D1") == "dm"
    assert kind_of_channel(None, "C1") is None
    assert [guess_kind(c) for c in ("D1", "G1", "C1")] == ["dm", "group", "channel"]


def test_before_auth_test_the_events_authorizations_say_who_the_bot_is() -> None:
    payload = event_callback(message_event(f"<@{BOT_USER}> hi", ts="1712345000.000001"))
    message = parse_event(
        payload, payload["event"], kind="channel", bot=None, assistant_name="Postroom"
    )
    assert message is not None and message.mentioned
    mine = message_event("echo", ts="1712345000.000002", user=BOT_USER)
    own = parse_event(
        event_callback(mine), mine, kind="channel", bot=None, assistant_name="Postroom"
    )
    assert own is not None and own.is_from_me
    stranger = parse_event(
        {"event": mine},
        mine,
        kind="channel",
        bot=BotIdentity(user_id="", bot_id="", team_id=""),
        assistant_name="Postroom",
    )
    assert stranger is not None and not stranger.is_from_me


def test_a_message_that_is_only_files_gets_words() -> None:
    image = Attachment(kind="image", mime="image/png", name="a.png", size=1)
    pdf = Attachment(kind="file", mime="application/pdf", name="a.pdf", size=1)
    nameless = Attachment(kind="file", mime="application/pdf", name="", size=1)
    assert content_with_files("", [image]) == "[Image]"
    assert content_with_files("", [pdf]) == "[File: a.pdf]"
    assert content_with_files("", [nameless]) == ""
    assert content_with_files("words", [pdf]) == "words"
