"""Commands on Slack (ROUTING §3.1): ``<@BOT> /new`` typed in a mention-only channel, ``\\new``,
and the registered slash commands ``/new``, ``/stop``, ``/status``, ``/chatid`` — a signed form
POST in Events API mode, a ``slash_commands`` envelope in Socket Mode — through slack-sdk
against the fake Slack, into the real engine over SQLite, answered by a host message that the
delivery loop posts with ``chat.postMessage``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from postroom.channels.base import ChannelContext
from postroom.channels.slack import COMMANDS_PATH, SlackChannel, build
from postroom.core import Action, CommandKind, MessageType

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
    signed,
    signed_form,
    slash_command,
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
        await engine.mention_routes("slack")
        yield engine


@pytest.fixture
async def slack(fake: FakeSlack, engine: Engine) -> AsyncIterator[SlackChannel]:
    channel = build(
        {
            "bot_token": BOT_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "base_url": f"{fake.base_url}/api/",
        }
    )
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def post(
    channel: SlackChannel, path: str, body: bytes, headers: dict[str, str]
) -> httpx.Response:
    transport = httpx.ASGITransport(app=Starlette(routes=channel.routes()))
    async with httpx.AsyncClient(transport=transport, base_url="http://postroom.test") as client:
        return await client.post(path, content=body, headers=headers)


async def command(
    channel: SlackChannel, clock: FakeClock, fields: dict[str, str], *, secret: str = SIGNING_SECRET
) -> httpx.Response:
    body, headers = signed_form(fields, timestamp=int(clock().timestamp()), secret=secret)
    return await post(channel, COMMANDS_PATH, body, headers)


async def delivered(engine: Engine, fake: FakeSlack) -> list[str]:
    """Run the delivery loop until nothing is due; the texts Slack was sent."""
    loop = engine.delivery()
    while await loop.deliver_due():
        pass
    return [str(call["text"]) for call in fake.posted]


async def notices(engine: Engine, chat_jid: str = CHANNEL) -> list[str]:
    return [m.content for m in await engine.stored(chat_jid) if m.message_type is MessageType.HOST]


# ------------------------------------------------------------------ commands typed after a mention


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"<@{BOT_USER}> /new", CommandKind.NEW),
        (f"<@{BOT_USER}> \\new", CommandKind.NEW),
        (f"<@{BOT_USER}>  /status", CommandKind.STATUS),
        (f"<@{BOT_USER}> /chatid", CommandKind.CHATID),
        (f"<@{BOT_USER}> #support", CommandKind.SET_TOPIC),
    ],
)
async def test_a_command_after_a_mention_of_the_bot_is_carried_out_in_a_mention_only_channel(
    slack: SlackChannel,
    fake: FakeSlack,
    engine: Engine,
    clock: FakeClock,
    text: str,
    kind: CommandKind,
) -> None:
    payload = event_callback(message_event(text, ts="1712350000.000100"))
    body, headers = signed(payload, timestamp=int(clock().timestamp()))
    assert (await post(slack, "/channels/slack/events", body, headers)).status_code == 200
    decision = engine.result_for("1712350000.000100").decision
    assert decision.action is Action.COMMAND
    assert decision.command is not None and decision.command.kind is kind
    (stored,) = await engine.user_messages(CHANNEL)
    assert stored.content.startswith("@Postroom ")  # the history keeps what was typed
    assert stored.metadata.get("command") is True
    (ack,) = await notices(engine)
    assert await delivered(engine, fake) == [f"🏠 {ack}"]


async def test_without_the_mention_the_same_text_is_only_observed(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    payload = event_callback(message_event("/new", ts="1712350001.000100"))
    body, headers = signed(payload, timestamp=int(clock().timestamp()))
    assert (await post(slack, "/channels/slack/events", body, headers)).status_code == 200
    assert engine.result_for("1712350001.000100").decision.action is Action.OBSERVE
    assert await notices(engine) == []


# ------------------------------------------------------------------ registered slash commands


@pytest.mark.parametrize(
    ("typed", "text", "kind", "answer"),
    [
        ("/new", "", CommandKind.NEW, "🏠 new conversation with main"),
        ("/chatid", "", CommandKind.CHATID, f"🏠 chat id: {CHANNEL}"),
        ("/stop", "", CommandKind.STOP, "🏠 nothing is running for main"),
        ("/status", "", CommandKind.STATUS, "🏠 folder main · no topic"),
        ("/postroom", "status", CommandKind.STATUS, "🏠 folder main · no topic"),
        ("/postroom", " \\New ", CommandKind.NEW, "🏠 new conversation with main"),
    ],
)
async def test_a_slash_command_over_the_events_api_is_the_command_in_its_channel(
    slack: SlackChannel,
    fake: FakeSlack,
    engine: Engine,
    clock: FakeClock,
    typed: str,
    text: str,
    kind: CommandKind,
    answer: str,
) -> None:
    fields = slash_command(typed, text)
    response = await command(slack, clock, fields)
    assert (response.status_code, response.content) == (200, b"")
    (result,) = engine.results
    assert (result.chat_jid, result.id) == (CHANNEL, f"command-{fields['trigger_id']}")
    assert result.decision.command is not None and result.decision.command.kind is kind
    # In a mention-only channel: a command registered by the app is addressed to it.
    assert result.decision.verb == "mention"
    (stored,) = await engine.user_messages(CHANNEL)
    assert (stored.content, stored.sender, stored.sender_name) == (
        f"/{kind.value}",
        "slack:user/U1ALICE",
        "Alice",
    )
    (posted,) = await delivered(engine, fake)
    assert posted.startswith(answer)
    assert fake.posted[0]["channel"] == "C1GENERAL"


async def test_a_slash_command_in_a_direct_message_goes_to_the_dm_chat(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    fields = slash_command("/chatid", channel="D1ALICE", channel_name="directmessage")
    assert (await command(slack, clock, fields)).status_code == 200
    chat = f"slack:{TEAM}/dm/D1ALICE"
    assert await notices(engine, chat) == [f"chat id: {chat}"]


@pytest.mark.parametrize(
    ("typed", "text", "refusal"),
    [
        ("/new", "please", "/new takes nothing after it."),
        ("/postroom", "dance", "/postroom takes one of: chatid, new, status, stop."),
        ("/postroom", "", "/postroom takes one of: chatid, new, status, stop."),
    ],
)
async def test_a_slash_command_it_cannot_carry_out_is_answered_to_the_person_alone(
    slack: SlackChannel, engine: Engine, clock: FakeClock, typed: str, text: str, refusal: str
) -> None:
    response = await command(slack, clock, slash_command(typed, text))
    assert response.status_code == 200
    assert response.json() == {"response_type": "ephemeral", "text": refusal}
    assert engine.results == []
    assert await engine.stored(CHANNEL) == []


async def test_a_slash_command_where_no_agent_answers_says_so(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    for row in await engine.services.routes.list_routes():
        await engine.services.routes.delete_route(row.id, actor="test")
    response = await command(slack, clock, slash_command("/new"))
    assert response.json() == {
        "response_type": "ephemeral",
        "text": "/new was not carried out: no agent answers in this channel.",
    }
    # /chatid is still answered there, in the chat (ROUTING §3 step 1).
    assert (await command(slack, clock, slash_command("/chatid"))).content == b""
    assert await notices(engine) == [f"chat id: {CHANNEL}"]


async def test_a_forged_or_unsigned_slash_command_is_refused_and_nothing_is_stored(
    slack: SlackChannel, engine: Engine, clock: FakeClock
) -> None:
    forged = await command(slack, clock, slash_command("/new"), secret="not-the-secret")
    assert forged.status_code == 401
    body, headers = signed_form(slash_command("/new"), timestamp=int(clock().timestamp()))
    del headers["x-slack-signature"]
    assert (await post(slack, COMMANDS_PATH, body, headers)).status_code == 401
    body, headers = signed_form(slash_command("/new"), timestamp=int(clock().timestamp()) - 900)
    assert (await post(slack, COMMANDS_PATH, body, headers)).status_code == 401
    assert engine.results == []


async def test_slash_commands_over_socket_mode_are_ingested_before_their_ack(
    fake: FakeSlack, engine: Engine, clock: FakeClock
) -> None:
    channel = build(
        {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "base_url": f"{fake.base_url}/api"}
    )
    assert channel.routes() == []
    engine.attach(channel)
    acked_at_ingest: list[list[str]] = []

    async def inbound(message: Any) -> Any:
        acked_at_ingest.append(list(fake.acks))
        return await engine.inbound(message)

    await channel.start(ChannelContext(inbound=inbound, clock=clock))
    try:
        async with asyncio.timeout(10):
            await fake.socket_opened.wait()
        ok = fake.push_command(slash_command("/new"))
        await eventually(lambda: ok in fake.acks)
        assert acked_at_ingest == [[]]  # ingested first, acknowledged after
        assert ok not in fake.ack_payloads
        refused = fake.push_command(slash_command("/stop", "everything"))
        await eventually(lambda: refused in fake.acks)
        assert fake.ack_payloads[refused] == {"text": "/stop takes nothing after it."}
        (result,) = engine.results
        assert result.decision.command is not None
        assert result.decision.command.kind is CommandKind.NEW
        assert await delivered(engine, fake) == ["🏠 new conversation with main"]
    finally:
        await channel.stop()
