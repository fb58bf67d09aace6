"""The Telegram adapter as ``postroom serve`` runs it: ``[channels.telegram]`` validated into one
sentence per mistake, and the whole path — fake Bot API → a real gateway (``postroom init``
data directory, echo provider) → the answer back at the fake's ``sendMessage`` — by long
polling and by webhook.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from postroom.app.gateway import Gateway
from postroom.channels.telegram import WEBHOOK_PATH, TelegramChannel, build
from postroom.channels.telegram.config import parse_config
from postroom.config import Config
from postroom.core.errors import ConfigError
from postroom.engine.bootstrap import bootstrap
from postroom.llm import ProviderError

from channel_gateway import (
    OPEN_DMS,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)
from fake_telegram import (
    BOT_USERNAME,
    TOKEN,
    FakeTelegram,
    group_message,
    private_message,
    serve_fake_telegram,
)
from gated_provider import GatedProvider
from gateway_support import new_data_dir, serving

SECRET = "gateway_Secret-1"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with serve_fake_telegram() as server:
        yield server


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({}, "token"),
        ({"token": "not-a-token"}, "token"),
        ({"token": TOKEN, "tokn": "x"}, "tokn"),
        ({"token": TOKEN, "mode": "push"}, "mode"),
        ({"token": TOKEN, "mode": "webhook"}, "webhook_secret"),
        ({"token": TOKEN, "mode": "webhook", "webhook_secret": "no spaces"}, "webhook_secret"),
        ({"token": TOKEN, "webhook_url": "http://bot.example.org/hook"}, "webhook_url"),
        ({"token": TOKEN, "base_url": "api.telegram.org"}, "base_url"),
        ({"token": TOKEN, "poll_timeout": 1000}, "poll_timeout"),
    ],
)
def test_bad_configuration_is_one_sentence_naming_the_key(
    section: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build(section)
    message = str(raised.value)
    assert key in message and message.endswith(".") and "\n" not in message
    assert TOKEN not in message


def test_the_mode_decides_the_routes() -> None:
    polling = build({"token": TOKEN})
    webhook = build({"token": TOKEN, "mode": "webhook", "webhook_secret": SECRET})
    assert isinstance(polling, TelegramChannel) and polling.routes() == []
    assert [getattr(r, "path", None) for r in webhook.routes()] == [WEBHOOK_PATH]
    assert polling.identity is None  # getMe has not answered yet


# ----------------------------------------------------------------------------- the whole path


async def initialized(directory: Path) -> Path:
    """``postroom init`` runs its own event loop (``asyncio.run``): it runs in a thread here."""
    return await asyncio.to_thread(init_data_dir, directory)


def telegram_section(fake: FakeTelegram, **keys: str) -> str:
    extra = "".join(f'{key} = "{value}"\n' for key, value in keys.items())
    return (
        "[channels.telegram]\n"
        "enabled = true\n"
        f'token = "{TOKEN}"\n'
        f'base_url = "{fake.url}"\n'
        "poll_timeout = 1\n" + extra
    )


async def test_whole_path_by_long_polling_into_a_dm_and_a_forum_topic(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    data = await initialized(tmp_path / "data")
    configure(data, telegram_section(fake) + OPEN_DMS)
    async with running_gateway(data) as (_gateway, _url):
        dm = fake.push(private_message("echo me, please", message_id=301))
        fake.push(
            group_message(
                f"@{BOT_USERNAME} and in the topic",
                message_id=302,
                is_forum=True,
                message_thread_id=77,
                is_topic_message=True,
                entities=[{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}],
            )
        )
        await eventually(lambda: len(fake.called("sendMessage")) >= 2, timeout=30)
        await fake.wait_confirmed(dm)
        await eventually(lambda: fake.called("sendChatAction"))
    by_chat = {call["chat_id"]: call for call in fake.called("sendMessage")}
    answer = by_chat[42]
    assert "echo me, please" in answer["text"] and answer["parse_mode"] == "HTML"
    assert answer["reply_parameters"]["message_id"] == 301
    in_topic = by_chat[-1001234567890]
    assert "and in the topic" in in_topic["text"]
    assert (in_topic["message_thread_id"], in_topic["reply_parameters"]["message_id"]) == (77, 302)
    rows = stored_rows(
        data,
        "SELECT id, chat_jid, sender, topic FROM messages WHERE message_type = 'user' ORDER BY id",
    )
    assert rows == [
        ("301", "telegram:user/42", "telegram:user/42", ""),
        ("302", "telegram:group/1001234567890", "telegram:user/7", "77"),
    ]


async def test_whole_path_by_webhook_refuses_a_forged_update(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    data = await initialized(tmp_path / "data")
    configure(data, telegram_section(fake, mode="webhook", webhook_secret=SECRET) + OPEN_DMS)
    update = {"update_id": 5001, "message": private_message("by webhook", message_id=401)}
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as client:
        forged = await client.post(
            WEBHOOK_PATH, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "guess"}
        )
        unsigned = await client.post(WEBHOOK_PATH, json=update)
        assert (forged.status_code, unsigned.status_code) == (401, 401)
        assert stored_rows(data, "SELECT id FROM messages WHERE message_type = 'user'") == []
        good = await client.post(
            WEBHOOK_PATH, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}
        )
        assert good.status_code == 200, good.text
        # Answered after the commit: the row is already there.
        assert stored_rows(data, "SELECT id FROM messages WHERE message_type = 'user'") == [
            ("401",)
        ]
        await eventually(lambda: fake.called("sendMessage"), timeout=30)
    (answer,) = fake.called("sendMessage")
    assert answer["chat_id"] == 42 and "by webhook" in answer["text"]
    assert fake.called("getUpdates") == []


# ----------------------------------------------------------------------------- typing


async def test_typing_starts_when_a_turn_is_queued_and_stops_whatever_ends_it(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """PIPELINE §1.5 through the real adapter: ``sendChatAction`` as soon as a turn is queued
    (before any model work), refreshed while it waits and runs, and never again once it ended —
    answered, failed, stopped by ``/stop`` or cancelled while still queued."""
    data = await new_data_dir(tmp_path / "data")
    runner = GatedProvider()
    telegram = TelegramChannel(
        parse_config({"token": TOKEN, "base_url": fake.url, "poll_timeout": 1}),
        typing_refresh_s=0.05,
    )
    config = Config.model_validate(
        {
            "queue": {"max_concurrent_turns": 1, "shutdown_grace": "1s"},
            "access": {"dm_policy": "open"},
        }
    )
    gateway = await Gateway.build(data, config, providers={"echo": runner}, channels=[telegram])
    await bootstrap(gateway.services, actor="test")

    def actions(user: int) -> int:
        return sum(1 for c in fake.called("sendChatAction") if c["chat_id"] == user)

    def said(user: int) -> list[str]:
        return [c["text"] for c in fake.called("sendMessage") if c["chat_id"] == user]

    async def stopped(user: int) -> None:
        await eventually(lambda: f"telegram:user/{user}" not in telegram.typing_chats)

    async with serving(gateway):
        # Queued behind another chat's turn: typing shows before its model call.
        runner.holds[0] = asyncio.Event()
        fake.push(private_message("first", user_id=1))
        await eventually(lambda: runner.total == 1)
        fake.push(private_message("second", user_id=2))
        await eventually(lambda: actions(2) >= 2)  # shown, and refreshed while it waits
        assert len(runner.requests) == 1
        runner.holds[0].set()
        await eventually(lambda: said(1) == ["first"] and said(2) == ["second"])
        await stopped(1)
        await stopped(2)

        # A failed turn.
        runner.failures.append(ProviderError("boom", retryable=False))
        fake.push(private_message("third", user_id=3))
        await eventually(lambda: any("could not answer" in text for text in said(3)))
        await stopped(3)

        # A turn stopped by /stop.
        runner.holds[3] = asyncio.Event()
        fake.push(private_message("fourth", user_id=4))
        await eventually(lambda: runner.total == 1 and actions(4) >= 1)
        fake.push(private_message("/stop", user_id=4))
        await eventually(lambda: runner.cancelled() == [3])
        await stopped(4)

        # A turn cancelled while it was still queued.
        runner.holds[4] = asyncio.Event()
        fake.push(private_message("fifth", user_id=5))
        await eventually(lambda: runner.total == 1)
        fake.push(private_message("sixth", user_id=6))
        await eventually(lambda: actions(6) >= 1)
        (queued,) = await gateway.services.turns.list_jobs(status="queued")
        await gateway.services.turns.cancel(queued.id)
        await stopped(6)
        runner.holds[4].set()
        await eventually(lambda: said(5) == ["fifth"])
        await stopped(5)

        # No refresh after the end: while another chat's typing is refreshed several times,
        # the chats whose turns ended get none.
        ended = {user: actions(user) for user in range(1, 7)}
        runner.holds[5] = asyncio.Event()
        fake.push(private_message("seventh", user_id=7))
        await eventually(lambda: actions(7) >= 5)
        assert {user: actions(user) for user in range(1, 7)} == ended
        runner.holds[5].set()
        await eventually(lambda: said(7) == ["seventh"])
        await stopped(7)
    assert len(runner.requests) == 6  # the cancelled queued turn never reached the model
