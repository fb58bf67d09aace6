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

from postroom.channels.telegram import WEBHOOK_PATH, TelegramChannel, build
from postroom.core.errors import ConfigError

from channel_gateway import configure, eventually, init_data_dir, running_gateway, stored_rows
from fake_telegram import (
    BOT_USERNAME,
    TOKEN,
    FakeTelegram,
    group_message,
    private_message,
    serve_fake_telegram,
)

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
    configure(data, telegram_section(fake))
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
    configure(data, telegram_section(fake, mode="webhook", webhook_secret=SECRET))
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
