"""Slack in Socket Mode (slack-sdk's aiohttp SocketModeClient against the fake's WebSocket), and
the whole path: fake Slack → a real postroom gateway → echo provider → chat.postMessage."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.slack import EVENTS_PATH, build
from postroom.core import InboundMessage
from postroom.core.errors import ConfigError
from postroom.engine.ingest import IngestResult

from channel_gateway import configure, init_data_dir, running_gateway, stored_rows
from fake_engine_slack_whatsapp import Engine, eventually, open_engine, serve
from fake_slack import (
    APP_TOKEN,
    BOT_TOKEN,
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
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


async def test_socket_mode_ingests_an_event_before_acknowledging_its_envelope(
    fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    baseline = set(asyncio.all_tasks())
    channel = build(
        {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "base_url": f"{fake.base_url}/api"}
    )
    assert channel.routes() == []  # no public URL needed
    acked_at_ingest: list[list[str]] = []

    async def inbound(message: InboundMessage) -> IngestResult:
        acked_at_ingest.append(list(fake.acks))
        return await engine.inbound(message)

    await channel.start(ChannelContext(inbound=inbound, clock=clock))
    try:
        async with asyncio.timeout(10):
            await fake.socket_opened.wait()
        envelope = fake.push_event(
            event_callback(message_event("over the socket", ts="1712347000.000001"))
        )
        await eventually(lambda: envelope in fake.acks)
        assert acked_at_ingest == [[]]  # ingested first, acknowledged after
        (stored,) = await engine.user_messages(CHANNEL)
        assert (stored.content, stored.sender_name) == ("over the socket", "Alice")
        assert channel.status().state == "connected"
        assert [c["_auth"] for c in fake.calls["apps.connections.open"]] == [f"Bearer {APP_TOKEN}"]
    finally:
        await channel.stop()

    def settled() -> bool:
        return {t for t in asyncio.all_tasks() if not t.done()} - baseline <= {
            asyncio.current_task()
        }

    await eventually(settled)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"signing_secret": SIGNING_SECRET}, "bot_token"),
        ({"bot_token": "xoxp-user-token", "signing_secret": SIGNING_SECRET}, "bot_token"),
        ({"bot_token": BOT_TOKEN, "app_token": "xoxb-oops"}, "app_token"),
        ({"bot_token": BOT_TOKEN}, "signing_secret"),
        ({"bot_token": BOT_TOKEN, "mode": "socket", "signing_secret": "s"}, "app_token"),
        ({"bot_token": BOT_TOKEN, "mode": "events", "app_token": APP_TOKEN}, "signing_secret"),
        ({"bot_token": BOT_TOKEN, "mode": "rtm", "app_token": APP_TOKEN}, "mode"),
        ({"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "base_url": "slack.com"}, "base_url"),
        ({"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "tokn": "x"}, "tokn"),
    ],
)
def test_bad_configuration_is_one_sentence_naming_the_key(
    section: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build(section)
    message = str(raised.value)
    assert key in message and message.endswith(".") and "\n" not in message


def test_the_mode_follows_the_credentials() -> None:
    events = build({"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET})
    socket = build({"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "signing_secret": "s"})
    forced = build(
        {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "signing_secret": "s", "mode": "events"}
    )
    assert [c.config.resolved_mode for c in (events, socket, forced)] == [
        "events",
        "socket",
        "events",
    ]
    # Events API mode serves the events and the slash commands; Socket Mode needs no URL.
    assert [len(c.routes()) for c in (events, socket, forced)] == [2, 0, 2]


async def test_whole_path_from_slack_through_the_gateway_to_chat_post_message(
    fake: FakeSlack, tmp_path: Path
) -> None:
    section = f"""
[channels.slack]
enabled = true
bot_token = "{BOT_TOKEN}"
signing_secret = "{SIGNING_SECRET}"
base_url = "{fake.base_url}/api/"
"""
    data = await asyncio.to_thread(init_data_dir, tmp_path / "data")
    configure(data, section)
    async with running_gateway(data) as (_gateway, url):
        payload = event_callback(message_event("echo me, please", ts="1712348000.000001"))
        body, headers = signed(payload, timestamp=int(time.time()))
        async with httpx.AsyncClient(base_url=url) as client:
            forged = await client.post(
                EVENTS_PATH, content=body, headers={**headers, "x-slack-signature": "v0=00"}
            )
            assert forged.status_code == 401
            response = await client.post(EVENTS_PATH, content=body, headers=headers)
            assert response.status_code == 200, response.text
        await eventually(lambda: bool(fake.posted), timeout_s=20)
        # Leave only once the delivery is recorded: the gateway's last delivery round at stop
        # would otherwise send a row that is still in flight a second time.
        await eventually(
            lambda: stored_rows(tmp_path / "data", "SELECT status FROM deliveries") == [("sent",)]
        )
    (answer,) = fake.posted
    assert answer["channel"] == "C1GENERAL"
    assert "echo me, please" in answer["text"]
    assert answer["thread_ts"] == "1712348000.000001"
