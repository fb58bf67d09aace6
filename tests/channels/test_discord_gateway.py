"""The Discord adapter's life: configuration, login and ``check``, the gateway connection (refused
intents, reconnects, Discord unreachable), where discord.py is pointed, and the whole path:
fake Discord → a real postroom gateway (echo provider) → the answer posted back to the fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.discord import build, parse_config
from postroom.channels.discord._sdk import discord
from postroom.channels.discord.endpoints import Endpoints
from postroom.channels.discord.inbound import channel_of, is_snowflake
from postroom.core import InboundMessage
from postroom.core.errors import ConfigError
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk
from postroom.engine.ingest import IngestResult

from channel_gateway import configure, eventually, init_data_dir, running_gateway, stored_rows
from fake_discord import (
    ALICE_ID,
    BOT_ID,
    BOT_USER,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    TOKEN,
    FakeDiscord,
    message_payload,
    snowflake_at,
)
from fake_engine_slack_whatsapp import serve
from fakeclock import FakeClock

CHAT = f"discord:guild/{GUILD_ID}/channel/{CHANNEL_ID}"
ORIGINAL_BASE = discord.http.Route.BASE
ORIGINAL_GATEWAY = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake
    assert discord.http.Route.BASE == ORIGINAL_BASE
    assert discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY == ORIGINAL_GATEWAY


class Inbox:
    """An inbound sink that only collects (these tests are about the connection)."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def __call__(self, message: InboundMessage) -> IngestResult:
        self.messages.append(message)
        return None  # type: ignore[return-value]  # the adapter ignores what ingest returns


def context(inbox: Inbox, clock: FakeClock) -> ChannelContext:
    return ChannelContext(inbound=inbox, clock=clock)


def chunk(chat_jid: str, content: str, **extra: Any) -> OutgoingChunk:
    fields: dict[str, Any] = {
        "delivery_id": 1,
        "message_id": "m1",
        "chat_jid": chat_jid,
        "chunk": 0,
        "chunks": 1,
        "content": content,
        "kind": "reply",
        "message_type": "assistant",
        "folder": "main",
        "topic": "",
        "reply_to": None,
        "attempt": 1,
    }
    fields.update(extra)
    return OutgoingChunk(**fields)


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({}, "token"),
        ({"token": ""}, "token"),
        ({"token": "two words"}, "token"),
        ({"token": 5}, "token"),
        ({"token": TOKEN, "base_url": "discord.com/api"}, "base_url"),
        ({"token": TOKEN, "gateway_url": "https://gateway.discord.gg"}, "gateway_url"),
        ({"token": TOKEN, "send_timeout": "0"}, "send_timeout"),
        ({"token": TOKEN, "send_timeout": "soon"}, "send_timeout"),
        ({"token": TOKEN, "message_content": "maybe"}, "message_content"),
        ({"token": TOKEN, "tokn": "x"}, "tokn"),
    ],
)
def test_bad_configuration_is_one_sentence_naming_the_key(
    section: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build(section)
    message = str(raised.value)
    assert key in message and message.endswith(".") and "\n" not in message


def test_a_pasted_bot_prefix_is_dropped_and_defaults_hold() -> None:
    config = parse_config({"token": f"  Bot {TOKEN} ", "send_timeout": "90s"})
    assert (config.token, config.send_timeout_s) == (TOKEN, 90.0)
    assert (config.base_url, config.gateway_url, config.message_content, config.ignore_bots) == (
        None,
        None,
        True,
        True,
    )
    trimmed = parse_config({"token": TOKEN, "base_url": "http://127.0.0.1:9/api/v10/"})
    assert trimmed.base_url == "http://127.0.0.1:9/api/v10"
    assert build({"token": TOKEN}).config.token == TOKEN


def test_endpoints_are_changed_only_when_overridden_and_always_put_back() -> None:
    with Endpoints(base_url=None, gateway_url=None).applied():
        assert discord.http.Route.BASE == ORIGINAL_BASE
    endpoints = Endpoints(base_url="http://127.0.0.1:9/api/v10", gateway_url="ws://127.0.0.1:9/")
    with endpoints.applied():
        assert discord.http.Route.BASE == "http://127.0.0.1:9/api/v10"
        assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == "ws://127.0.0.1:9/"
    endpoints.restore()  # nothing left to undo
    assert discord.http.Route.BASE == ORIGINAL_BASE
    assert discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY == ORIGINAL_GATEWAY


def test_chat_addresses_and_ids() -> None:
    assert channel_of(CHAT) == int(CHANNEL_ID)
    assert channel_of(f"discord:dm/{DM_CHANNEL_ID}") == int(DM_CHANNEL_ID)
    for wrong in ("discord:user/1", "slack:T/dm/5", "discord:guild/1/channel/x"):
        with pytest.raises(ValueError, match="not a Discord chat address"):
            channel_of(wrong)
    assert is_snowflake(CHANNEL_ID) and not is_snowflake("2024") and not is_snowflake(None)


# ----------------------------------------------------------------------------- login and check


async def test_check_logs_in_over_rest_and_a_bad_token_is_a_config_error(
    fake: FakeDiscord,
) -> None:
    channel = build(fake.section())
    assert await channel.check() == f"logged in to Discord as postroom (id {BOT_ID})"
    assert [(m, p) for m, p, _ in fake.requests] == [
        ("GET", "/users/@me"),
        ("GET", "/oauth2/applications/@me"),
    ]
    assert fake.connections == 0  # a check never opens the gateway

    refused = build(fake.section(token="not-the-token"))
    with pytest.raises(ConfigError, match="token") as raised:
        await refused.check()
    assert str(raised.value).endswith(".")


async def test_a_refused_token_stops_start_with_a_config_error(
    fake: FakeDiscord, clock: FakeClock
) -> None:
    channel = build(fake.section(token="not-the-token"))
    with pytest.raises(ConfigError):
        await channel.start(context(Inbox(), clock))
    status = channel.status()
    assert status.state == "error" and "token" in (status.last_error or "")
    await channel.stop()
    assert channel.status().state == "stopped"


async def test_sending_before_the_gateway_is_up_or_to_a_foreign_chat_fails_cleanly(
    fake: FakeDiscord,
) -> None:
    channel = build(fake.section())
    with pytest.raises(DeliveryFailed, match="not connected") as early:
        await channel.send(chunk(CHAT, "hi"))
    assert not early.value.permanent
    with pytest.raises(DeliveryFailed) as foreign:
        await channel.send(chunk("slack:T/channel/C", "hi"))
    assert foreign.value.permanent
    assert (await channel.send(chunk(CHAT, "   "))).platform_message_id is None
    assert fake.posted == []


# ----------------------------------------------------------------------------- the gateway


async def test_identify_asks_for_the_message_intents_and_heartbeats_are_answered(
    fake: FakeDiscord, clock: FakeClock
) -> None:
    inbox = Inbox()
    channel = build(fake.section(message_content=False))
    await channel.start(context(inbox, clock))
    try:
        await eventually(lambda: fake.ready.is_set() and fake.heartbeats >= 1)
        (identify,) = fake.identifies
        intents = discord.Intents._from_value(identify["intents"])
        assert intents.guilds and intents.guild_messages and intents.dm_messages
        assert not intents.message_content and not intents.members
        assert identify["token"] == TOKEN
    finally:
        await channel.stop()


async def test_refused_intents_are_reported_and_retried(
    fake: FakeDiscord, clock: FakeClock
) -> None:
    fake.refuse_identify = 4014
    channel = build(fake.section())
    await channel.start(context(Inbox(), clock))
    try:
        await eventually(lambda: "Message Content intent" in (channel.status().last_error or ""))
        assert channel.status().state == "error"
        await eventually(lambda: fake.connections >= 2, timeout=10)  # logs in again after a pause
    finally:
        await channel.stop()
    assert channel.status().state == "stopped"


async def test_a_dropped_connection_is_resumed_and_messages_keep_flowing(
    fake: FakeDiscord, clock: FakeClock
) -> None:
    inbox = Inbox()
    channel = build(fake.section())
    await channel.start(context(inbox, clock))
    try:
        async with asyncio.timeout(10):
            await fake.ready.wait()
        fake.close_gateway(4000)
        await eventually(lambda: fake.connections == 2 and fake.ready.is_set())
        await eventually(lambda: channel.status().state == "connected")
        assert channel.status().last_error is not None  # the drop was noticed
        fake.dispatch("MESSAGE_CREATE", message_payload(snowflake_at(clock()), "still here"))
        await eventually(lambda: [m.content for m in inbox.messages] == ["still here"])
        assert len(fake.identifies) == 1  # resumed (op 6), not identified again
    finally:
        await channel.stop()


async def test_a_gateway_that_refuses_the_session_is_retried_with_a_fresh_login(
    fake: FakeDiscord, clock: FakeClock
) -> None:
    channel = build(fake.section())
    await channel.start(context(Inbox(), clock))
    try:
        async with asyncio.timeout(10):
            await fake.ready.wait()
        fake.close_gateway(4004)  # authentication failed: discord.py gives up this connection
        await eventually(lambda: len(fake.identifies) == 2, timeout=10)
        assert len(fake.requests_to("GET", "/users/@me")) == 2
        await eventually(lambda: channel.status().state == "connected")
    finally:
        await channel.stop()


async def test_discord_unreachable_at_start_is_an_error_state_not_a_crash(
    clock: FakeClock,
) -> None:
    fake = FakeDiscord()
    async with serve(fake.app()) as url:
        dead = url  # a port nobody listens on once this server stopped
    channel = build(
        {"token": TOKEN, "base_url": f"{dead}/api/v10", "gateway_url": "ws://127.0.0.1:9/"}
    )
    await channel.start(context(Inbox(), clock))
    try:
        status = channel.status()
        assert status.state == "error" and status.last_error
    finally:
        await channel.stop()
    assert discord.http.Route.BASE == ORIGINAL_BASE


# ----------------------------------------------------------------------------- the whole path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data directory made by ``postroom init`` (the CLI runs its own event loop, so this
    fixture is synchronous)."""
    return init_data_dir(tmp_path / "data")


async def test_whole_path_from_discord_through_the_gateway_to_the_answer(
    fake: FakeDiscord, data: Path
) -> None:
    section = "\n".join(f'{key} = "{value}"' for key, value in fake.section().items())
    # A slow echo, so the typing indicator is seen refreshed during the turn.
    configure(
        data,
        f"[channels.discord]\nenabled = true\n{section}\n\n[providers.echo]\ndelay_ms = 4500\n",
    )
    async with running_gateway(data) as (gateway, _url):
        async with asyncio.timeout(15):
            await fake.ready.wait()
        trigger = snowflake_at(datetime.now(UTC))
        fake.dispatch(
            "MESSAGE_CREATE",
            message_payload(trigger, f"<@{BOT_ID}> echo me, please", mentions=[BOT_USER]),
        )
        await eventually(lambda: fake.posted, timeout=30)
        assert [c["state"] for c in gateway.channels.status()] == ["connected"]
    (answer,) = fake.posted
    assert answer["_channel"] == CHANNEL_ID
    assert "echo me, please" in answer["content"]
    assert str(answer["message_reference"]["message_id"]) == trigger
    assert fake.typing and set(fake.typing) == {CHANNEL_ID}
    assert fake.typing_at[-1] - fake.typing_at[0] >= 3  # refreshed while the turn ran
    (row,) = stored_rows(
        data, "SELECT chat_jid, sender, content FROM messages WHERE id = ?", trigger
    )
    assert row == (CHAT, f"discord:user/{ALICE_ID}", "echo me, please")
    (sent,) = stored_rows(
        data, "SELECT status, platform_message_id FROM deliveries WHERE chat_jid = ?", CHAT
    )
    assert sent[0] == "sent" and sent[1]
