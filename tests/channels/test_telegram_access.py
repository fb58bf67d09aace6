"""Who can talk to the agents, end to end through the Telegram adapter (real python-telegram-bot
against the fake Bot API) and a gateway built as ``postroom serve`` builds it: a stranger's DM
gets a pairing code and no turn, the owner's chat is told, ``postroom access approve`` lets the
stranger's next message fire, a blocked sender in a group is dropped, ``allowlist`` sends
nothing, and a used daily budget stops turns and says so once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from postroom.config import DATABASE_FILE
from postroom.store import SqliteStore
from postroom.store.records import RunRecord

from channel_gateway import cli, configure, eventually, init_data_dir, running_gateway, stored_rows
from fake_telegram import TOKEN, FakeTelegram, group_message, private_message, serve_fake_telegram

pytestmark = pytest.mark.timeout(120)

OWNER_ID = 1
STRANGER_ID = 42
GROUP_CHAT = -1001234567890
CODE = re.compile(r"approve code ([A-Z0-9]{4}-[A-Z0-9]{4})\.")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with serve_fake_telegram() as server:
        yield server


async def data_dir(tmp_path: Path, fake: FakeTelegram, access: str = "") -> Path:
    data = await asyncio.to_thread(init_data_dir, tmp_path / "data")
    configure(
        data,
        "[channels.telegram]\n"
        "enabled = true\n"
        f'token = "{TOKEN}"\n'
        f'base_url = "{fake.url}"\n'
        "poll_timeout = 1\n"
        "[owners]\n"
        f'senders = ["telegram:user/{OWNER_ID}"]\n'
        "[access]\n"
        f'notify = ["telegram:user/{OWNER_ID}"]\n' + access,
    )
    return data


def said_to(fake: FakeTelegram, chat_id: int) -> list[str]:
    return [str(c["text"]) for c in fake.called("sendMessage") if c["chat_id"] == chat_id]


def count(data: Path, sql: str, *params: object) -> int:
    ((n,),) = stored_rows(data, sql, *params)
    return int(n)


async def postroom(data: Path, *args: str) -> str:
    """A ``postroom`` command against the data directory, as an operator types it (its own
    event loop, so in a thread)."""
    result = await asyncio.to_thread(cli, data, *args)
    assert result.exit_code == 0, result.output
    return result.output


async def test_a_stranger_pairs_the_owner_is_told_and_a_blocked_sender_is_dropped(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    data = await data_dir(tmp_path, fake)
    async with running_gateway(data):
        fake.push(private_message("hi bot, what can you do?", user_id=STRANGER_ID, message_id=11))
        (prompt,) = await eventually(lambda: said_to(fake, STRANGER_ID), timeout=30)
        match = CODE.search(prompt)
        assert match is not None, prompt
        code = match.group(1)
        # The owner's chat hears about the request, with the code and how to approve it.
        (told,) = await eventually(lambda: said_to(fake, OWNER_ID), timeout=30)
        assert code in told and f"telegram:user/{STRANGER_ID}" in told
        # No turn ran, and the stranger's words were not kept.
        assert count(data, "SELECT COUNT(*) FROM jobs") == 0
        assert count(data, "SELECT COUNT(*) FROM messages WHERE message_type = 'user'") == 0
        assert stored_rows(data, "SELECT id, reason FROM drops") == [("11", "pairing_pending")]
        pending = await postroom(data, "access", "pending", "--json")
        assert code in pending

        await postroom(data, "access", "approve", code)
        await eventually(
            lambda: any(
                "You can talk to this assistant now." in t for t in said_to(fake, STRANGER_ID)
            ),
            timeout=30,
        )
        fake.push(private_message("echo me, please", user_id=STRANGER_ID, message_id=12))
        await eventually(
            lambda: any("echo me, please" in text for text in said_to(fake, STRANGER_ID)),
            timeout=30,
        )
        assert count(data, "SELECT COUNT(*) FROM jobs") == 1

        # A blocked sender is dropped in a group too; the others there are answered.
        await postroom(data, "access", "block", "telegram:user/66")
        fake.push(group_message("buy my stuff", user_id=66, message_id=21))
        fake.push(group_message("and a question", user_id=7, message_id=22))
        await eventually(
            lambda: any("and a question" in text for text in said_to(fake, GROUP_CHAT)),
            timeout=30,
        )
        await eventually(
            lambda: ("21", "blocked") in stored_rows(data, "SELECT id, reason FROM drops")
        )
    assert not any("buy my stuff" in text for text in said_to(fake, GROUP_CHAT))
    assert stored_rows(data, "SELECT id FROM messages WHERE id = '21'") == []
    assert len(said_to(fake, OWNER_ID)) == 1  # one request, one announcement


async def test_allowlist_answers_strangers_nothing_at_all(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    data = await data_dir(tmp_path, fake, 'dm_policy = "allowlist"\n')
    async with running_gateway(data):
        fake.push(private_message("hello?", user_id=STRANGER_ID, message_id=31))
        await eventually(
            lambda: stored_rows(data, "SELECT id, reason FROM drops") == [("31", "not_admitted")],
            timeout=30,
        )
        # Whatever a drop says is written in the same transaction as the drop: nothing was.
        assert count(data, "SELECT COUNT(*) FROM messages") == 0
        assert count(data, "SELECT COUNT(*) FROM deliveries") == 0
        assert count(data, "SELECT COUNT(*) FROM pairing_requests") == 0
    assert said_to(fake, STRANGER_ID) == [] and said_to(fake, OWNER_ID) == []


async def test_a_used_budget_stops_turns_and_says_so_once(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    data = await data_dir(tmp_path, fake)
    output = await postroom(data, "folders", "set", "main", "--budget-per-day", "0.50")
    assert "budget_per_day" in output
    # Today's runs of main already cost 0.60 USD.
    store = await SqliteStore.open(data / DATABASE_FILE)
    try:
        async with store.write() as tx:
            await tx.insert_run(
                RunRecord(
                    job_id=1,
                    folder="main",
                    provider="anthropic",
                    model="claude-sonnet-4",
                    system="",
                    messages=[],
                    outcome="ok",
                    started_at=datetime.now(UTC),
                    cost=0.6,
                )
            )
    finally:
        await store.close()
    async with running_gateway(data):
        fake.push(group_message("first question", user_id=7, message_id=41))
        fake.push(group_message("second question", user_id=8, message_id=42))
        await eventually(
            lambda: count(data, "SELECT COUNT(*) FROM messages WHERE message_type = 'user'") == 2,
            timeout=30,
        )
        await eventually(
            lambda: count(data, "SELECT COUNT(*) FROM deliveries WHERE status = 'sent'") == 1,
            timeout=30,
        )
        usage = await postroom(data, "usage", "--budgets", "--json")
    (notice,) = said_to(fake, GROUP_CHAT)
    assert "used today's budget" in notice
    assert count(data, "SELECT COUNT(*) FROM jobs") == 0
    assert count(data, "SELECT COUNT(*) FROM deliveries") == 1
    assert '"reached": true' in usage
