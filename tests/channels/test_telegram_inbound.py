"""The Telegram adapter, inbound: the real python-telegram-bot against a fake Bot API.

Updates go in through the fake's ``getUpdates`` (long polling) or a signed webhook call; each
becomes an ``InboundMessage`` with exactly ROUTING §1's JIDs and is ingested for real (SQLite),
and the update is acknowledged — the next ``getUpdates`` offset moves past it — only after
ingest committed.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from postroom.channels.telegram import WEBHOOK_PATH, TelegramUnavailable
from postroom.core import Action, Layer
from postroom.engine import Services

from fake_telegram import (
    BOT_ID,
    BOT_USERNAME,
    FakeTelegram,
    Inbox,
    eventually,
    group_message,
    open_engine,
    private_message,
    running_channel,
    serve_app,
    serve_fake_telegram,
)
from fakeclock import FakeClock

GROUP = "telegram:group/1001234567890"
SECRET = "s3cret_Webhook-token"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with serve_fake_telegram() as server:
        yield server


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    services = await open_engine(tmp_path, clock)
    yield services
    await services.close()


@pytest.fixture
def inbox(engine: Services) -> Inbox:
    return Inbox(engine)


async def stored(engine: Services, chat_jid: str) -> list[str]:
    async with engine.store.read() as tx:
        rows = await tx.list_messages(chat_jid=chat_jid)
    return [row.id for row in rows if row.message_type == "user"]


FILE = {"file_id": "f", "file_unique_id": "uf"}
STICKER = FILE | {
    "width": 512,
    "height": 512,
    "is_animated": False,
    "is_video": False,
    "type": "regular",
}


def photo_size(file_id: str, side: int, size: int) -> dict[str, object]:
    return {
        "file_id": file_id,
        "file_unique_id": f"u-{file_id}",
        "width": side,
        "height": side,
        "file_size": size,
    }


# --------------------------------------------------------------------------- addresses and fields


async def test_private_and_group_messages_get_canonical_jids_and_fields(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    async with running_channel(fake, inbox, clock):
        fake.push(private_message("hello there", user_id=42, message_id=11))
        fake.push(
            group_message(
                "a basic group",
                chat_id=-4000123,
                chat_type="group",
                message_id=12,
                reply_to_message=group_message("earlier", chat_id=-4000123, message_id=10),
            )
        )
        await inbox.wait(2)
    dm, group = inbox.messages
    assert (dm.id, dm.chat_jid, dm.sender, dm.sender_name) == (
        "11",
        "telegram:user/42",
        "telegram:user/42",
        "Ada Lovelace",
    )
    assert dm.is_dm and not dm.mentioned and not dm.is_from_me
    assert (dm.content, dm.reply_to, dm.topic) == ("hello there", None, "")
    assert dm.timestamp.isoformat() == "2026-01-05T12:00:00+00:00"
    assert (group.chat_jid, group.sender, group.sender_name) == (
        "telegram:group/4000123",  # the group's id without its minus sign
        "telegram:user/7",
        "Grace Hopper",
    )
    assert not group.is_dm
    assert group.reply_to == "10"
    # The DM fires main; the unaddressed group chatter is observed (ROUTING §5's pair).
    assert [r.decision.action for r in inbox.results] == [Action.FIRE, Action.OBSERVE]


async def test_forum_topic_is_the_native_topic_not_part_of_the_jid(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    topic_root = group_message(
        None, message_id=77, forum_topic_created={"name": "Ops", "icon_color": 7322096}
    )
    in_topic = {"is_forum": True, "message_thread_id": 77, "is_topic_message": True}
    async with running_channel(fake, inbox, clock) as channel:
        # Telegram sets reply_to_message to the topic's first message on every topic message.
        fake.push(group_message("status?", message_id=80, reply_to_message=topic_root, **in_topic))
        fake.push(
            group_message(
                "@postroom_test_bot and this one",
                message_id=81,
                reply_to_message=group_message("the real parent", message_id=79, **in_topic),
                entities=[{"type": "mention", "offset": 0, "length": 18}],
                **in_topic,
            )
        )
        await inbox.wait(2)
        # The typing indicator shows in the topic the chat last wrote in.
        await channel.typing(GROUP, True)
        assert fake.called("sendChatAction")[-1]["message_thread_id"] == 77
    plain, reply = inbox.messages
    assert (plain.chat_jid, plain.topic, plain.reply_to) == (GROUP, "77", None)
    assert (reply.chat_jid, reply.topic, reply.reply_to) == (GROUP, "77", "79")
    assert inbox.results[1].decision.topic == "77"


# --------------------------------------------------------------------------- mentions


@pytest.mark.parametrize(
    ("text", "entities", "mentioned", "content"),
    [
        pytest.param(
            "@postroom_test_bot what's up",
            [{"type": "mention", "offset": 0, "length": 18}],
            True,
            "@postroom_test_bot what's up",
            id="at-mention",
        ),
        pytest.param(
            # Entity offsets count UTF-16 units: the emoji is two of them.
            "👋 hey @Postroom_Test_Bot",
            [{"type": "mention", "offset": 7, "length": 18}],
            True,
            "👋 hey @Postroom_Test_Bot",
            id="mention-after-emoji",
        ),
        pytest.param(
            "Postroom, summarize",
            [
                {
                    "type": "text_mention",
                    "offset": 0,
                    "length": 8,
                    "user": {"id": BOT_ID, "is_bot": True, "first_name": "Postroom"},
                }
            ],
            True,
            "Postroom, summarize",
            id="text-mention",
        ),
        pytest.param(
            "/help@postroom_test_bot now",
            [{"type": "bot_command", "offset": 0, "length": 23}],
            True,
            "/help now",
            id="command-to-us",
        ),
        pytest.param(
            "/help@other_bot",
            [{"type": "bot_command", "offset": 0, "length": 15}],
            False,
            "/help@other_bot",
            id="command-to-another-bot",
        ),
        pytest.param(
            "ask @other_bot",
            [{"type": "mention", "offset": 4, "length": 10}],
            False,
            "ask @other_bot",
            id="someone-else",
        ),
    ],
)
async def test_platform_mentions_make_the_verb_mention(
    fake: FakeTelegram,
    inbox: Inbox,
    clock: FakeClock,
    text: str,
    entities: list[dict[str, object]],
    mentioned: bool,
    content: str,
) -> None:
    async with running_channel(fake, inbox, clock):
        fake.push(group_message(text, entities=entities))
        await inbox.wait(1)
    (message,) = inbox.messages
    (result,) = inbox.results
    assert (message.mentioned, message.content) == (mentioned, content)
    if mentioned:
        assert (result.decision.verb, result.decision.action) == ("mention", Action.FIRE)
        assert result.decision.folder == "main"
    else:
        assert (result.decision.verb, result.decision.action) == ("message", Action.OBSERVE)


async def test_a_command_addressed_to_the_bot_is_a_steering_command(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    async with running_channel(fake, inbox, clock):
        fake.push(
            group_message(
                f"/chatid@{BOT_USERNAME}",
                entities=[{"type": "bot_command", "offset": 0, "length": 25}],
            )
        )
        await inbox.wait(1)
    (result,) = inbox.results
    assert (result.decision.action, result.decision.layer) == (Action.COMMAND, Layer.COMMAND)
    assert result.decision.ack is not None and GROUP in result.decision.ack


async def test_the_bots_own_messages_are_not_ingested_but_acknowledged(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    async with running_channel(fake, inbox, clock):
        echo = fake.push(group_message("an answer", user_id=BOT_ID, first="Postroom"))
        after = fake.push(group_message("a person", message_id=501))
        await inbox.wait(1)
        await fake.wait_confirmed(after)
        assert echo < after
    assert [m.content for m in inbox.messages] == ["a person"]
    assert await stored(engine, GROUP) == ["501"]


# --------------------------------------------------------------------------- media


async def test_voice_note_is_fetched_inline_and_photo_within_the_cap(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    fake.files["voice-1"] = b"OggS" + b"\x01" * 300
    fake.files["photo-m"] = b"\xff\xd8" + b"\x02" * 798
    fake.files["photo-l"] = b"\xff\xd8" + b"\x03" * 4998
    voice = {
        "file_id": "voice-1",
        "file_unique_id": "uv1",
        "duration": 3,
        "mime_type": "audio/ogg",
        "file_size": 304,
    }
    photo = [photo_size("photo-s", 90, 90), photo_size("photo-m", 320, 800)]
    photo.append(photo_size("photo-l", 1280, 5000))
    async with running_channel(fake, inbox, clock, image_bytes=1000):
        fake.push(private_message(None, message_id=21, voice=voice))
        fake.push(private_message(None, message_id=22, photo=photo, caption="look"))
        await inbox.wait(2)
    spoken, pictured = inbox.messages
    (note,) = spoken.attachments
    assert (spoken.content, note.kind, note.mime, note.size) == (
        "[Voice message]",
        "voice",
        "audio/ogg",
        304,
    )
    assert base64.b64decode(note.data) == fake.files["voice-1"]
    (image,) = pictured.attachments
    assert (pictured.content, image.kind, image.size) == ("look", "image", 800)
    assert base64.b64decode(image.data) == fake.files["photo-m"]  # the largest within 1000 bytes
    # The file URLs carry the token: never stored.
    assert not note.url and not image.url
    async with engine.store.read() as tx:
        row = await tx.get_message("21", "telegram:user/42")
    assert row is not None and fake.token not in str(row.metadata)
    assert [p["file_id"] for p in fake.called("getFile")] == ["voice-1", "photo-m"]


# --------------------------------------------------------------------------- acknowledgement


async def test_offset_moves_only_after_ingest_committed(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    inbox.fail_next = 1  # the database is locked for the first try
    async with running_channel(fake, inbox, clock) as channel:
        update_id = fake.push(private_message("keep me", message_id=31))
        await inbox.wait(1)
        await fake.wait_confirmed(update_id)
        assert channel.status().state == "connected"
        assert channel.status().last_error and "database is locked" in channel.status().last_error
    # Offered twice (not confirmed after the failure), stored once.
    assert [m.id for m in inbox.messages] == ["31", "31"]
    offsets = fake.offsets()
    first_confirm = offsets.index(update_id + 1)
    assert update_id + 1 not in offsets[:first_confirm]
    assert await stored(engine, "telegram:user/42") == ["31"]


async def test_refused_input_is_logged_and_acknowledged(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    async with running_channel(fake, inbox, clock):
        too_big = fake.push(private_message("x" * 5000, message_id=41))  # limit: 4096 bytes
        fake.push(private_message("fine", message_id=42))
        await inbox.wait(1)
        await fake.wait_confirmed(too_big)
    assert [m.id for m in inbox.messages] == ["41", "42"]
    assert await stored(engine, "telegram:user/42") == ["42"]


async def test_stop_cancels_the_poll_and_leaves_no_task_behind(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    baseline = asyncio.all_tasks()
    async with running_channel(fake, inbox, clock) as channel:
        await fake.wait_for("getUpdates", 2)
        assert channel.status().state == "connected"
        assert "@postroom_test_bot" in channel.status().detail
    assert channel.status().state == "stopped"
    await eventually(lambda: asyncio.all_tasks() <= baseline)
    assert fake.called("deleteWebhook")  # getUpdates is refused while a webhook is set


# --------------------------------------------------------------------------- webhook mode


async def test_webhook_checks_the_secret_and_answers_after_ingest(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    update = {"update_id": 900, "message": private_message("via webhook", message_id=51)}
    async with running_channel(
        fake,
        inbox,
        clock,
        mode="webhook",
        webhook_secret=SECRET,
        webhook_url="https://bot.example.org/channels/telegram/webhook",
    ) as channel:
        assert not fake.called("getUpdates")
        (registered,) = fake.called("setWebhook")
        assert registered["url"] == "https://bot.example.org/channels/telegram/webhook"
        assert registered["secret_token"] == SECRET
        async with (
            serve_app(Starlette(routes=channel.routes())) as base,
            httpx.AsyncClient(base_url=base) as client,
        ):
            forged = await client.post(
                WEBHOOK_PATH,
                json=update,
                headers={"X-Telegram-Bot-Api-Secret-Token": "guess"},
            )
            missing = await client.post(WEBHOOK_PATH, json=update)
            assert (forged.status_code, missing.status_code) == (401, 401)
            assert inbox.messages == []
            assert await stored(engine, "telegram:user/42") == []
            good = await client.post(
                WEBHOOK_PATH,
                json=update,
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
            )
            junk = await client.post(
                WEBHOOK_PATH,
                content=b"[1, 2]",
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
            )
    assert good.status_code == 200
    assert junk.status_code == 400
    # The 200 came after the commit: the row is there.
    assert await stored(engine, "telegram:user/42") == ["51"]
    assert inbox.messages[0].chat_jid == "telegram:user/42"


async def test_webhook_failures_make_telegram_retry_and_other_updates_are_acknowledged(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    update = {"update_id": 910, "message": private_message("retry me", message_id=61)}
    edited = {"update_id": 911, "edited_message": private_message("changed", message_id=61)}
    fake.fail("getMe", 500, "Internal Server Error")  # down while starting
    fake.fail("getMe", 502, "Bad Gateway")  # and at the first webhook call
    async with running_channel(
        fake, inbox, clock, mode="webhook", webhook_secret=SECRET
    ) as channel:
        assert channel.status().state == "error"
        async with (
            serve_app(Starlette(routes=channel.routes())) as base,
            httpx.AsyncClient(base_url=base, headers=headers) as client,
        ):
            unreachable = await client.post(WEBHOOK_PATH, json=update)
            inbox.fail_next = 1  # the database is locked for the next try
            locked = await client.post(WEBHOOK_PATH, json=update)
            assert [m.id for m in inbox.messages] == ["61"]
            assert await stored(engine, "telegram:user/42") == []
            retried = await client.post(WEBHOOK_PATH, json=update)
            ignored = await client.post(WEBHOOK_PATH, json=edited)
            huge = await client.post(WEBHOOK_PATH, content=b"{" + b" " * (1024 * 1024) + b"}")
        assert channel.status().state == "connected"
    assert [r.status_code for r in (unreachable, locked, retried, ignored, huge)] == [
        503,
        503,
        200,
        200,
        413,
    ]
    assert not fake.called("setWebhook")  # no public URL configured: set by hand
    assert await stored(engine, "telegram:user/42") == ["61"]


async def test_a_refused_token_fails_the_start(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    fake.fail("getMe", 401, "Unauthorized")
    with pytest.raises(TelegramUnavailable, match=r"\[channels.telegram\] token"):
        async with running_channel(fake, inbox, clock):
            pass  # pragma: no cover - the start raises


async def test_polling_survives_an_unreachable_api_and_reconnects(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    fake.fail("getMe", 500, "Internal Server Error")
    fake.fail("getUpdates", 502, "Bad Gateway")
    async with running_channel(fake, inbox, clock) as channel:
        fake.push(private_message("after the outage", message_id=71))
        await inbox.wait(1)
        assert channel.status().state == "connected"
        assert channel.identity is not None and channel.identity.username == BOT_USERNAME
    assert inbox.messages[0].content == "after the outage"


@pytest.mark.parametrize(
    ("extra", "content"),
    [
        ({"sticker": STICKER | {"emoji": "👍"}}, "[Sticker 👍]"),
        ({"sticker": STICKER}, "[Sticker]"),
        ({"document": FILE | {"file_name": "report.pdf"}}, "[File: report.pdf]"),
        ({"document": FILE}, "[File: unnamed]"),
        ({"video": FILE | {"width": 1, "height": 1, "duration": 1}}, "[Video]"),
        ({"video_note": FILE | {"length": 1, "duration": 1}}, "[Video message]"),
        ({"location": {"latitude": 52.5, "longitude": 13.4}}, "[Location: 52.5, 13.4]"),
        ({"contact": {"first_name": "Bob", "phone_number": "+4930"}}, "[Contact: Bob +4930]"),
        (
            {
                "poll": {
                    "id": "p",
                    "question": "Lunch?",
                    "options": [],
                    "total_voter_count": 0,
                    "is_closed": False,
                    "is_anonymous": True,
                    "type": "regular",
                    "allows_multiple_answers": False,
                    "allows_revoting": False,
                    "members_only": False,
                }
            },
            "[Poll: Lunch?]",
        ),
    ],
)
async def test_other_kinds_of_message_are_described(
    fake: FakeTelegram,
    inbox: Inbox,
    clock: FakeClock,
    extra: dict[str, dict[str, object]],
    content: str,
) -> None:
    async with running_channel(fake, inbox, clock):
        fake.push(private_message(None, message_id=81, **extra))
        await inbox.wait(1)
    assert inbox.messages[0].content == content


async def test_service_messages_channel_posts_and_edits_are_not_routed(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    joined = group_message(None, new_chat_members=[{"id": 8, "is_bot": False, "first_name": "B"}])
    post = {
        "message_id": 90,
        "date": 1767614400,
        "chat": {"id": -100555, "type": "channel", "title": "News"},
        "text": "broadcast",
    }
    anonymous = group_message(
        "from the admins",
        message_id=92,
        user_id=1087968824,
        first="Group",
        last=None,
        username="GroupAnonymousBot",
        sender_chat={"id": -1001234567890, "type": "supergroup", "title": "Engineering"},
    )
    async with running_channel(fake, inbox, clock):
        fake.push(joined)
        fake.push(post, kind="channel_post")
        fake.push(post)  # a channel's message in the message field: still no chat of ours
        fake.push(private_message("edited", message_id=91), kind="edited_message")
        last = fake.push(anonymous)
        await inbox.wait(1)
        await fake.wait_confirmed(last)
    (message,) = inbox.messages
    assert (message.id, message.sender_name) == ("92", "Engineering")
    assert message.metadata["telegram"]["chat_title"] == "Engineering"


async def test_media_over_the_cap_or_unreachable_comes_without_its_bytes(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    fake.files["voice-big"] = b"OggS" + b"\x01" * 2000
    big_photo = [photo_size("p-big", 1280, 5000), photo_size("p-huge", 2560, 9000)]
    unsized_voice = {"file_id": "voice-big", "file_unique_id": "uvb", "duration": 9}
    missing_voice = {"file_id": "voice-gone", "file_unique_id": "uvg", "duration": 1}
    sized_voice = unsized_voice | {"file_size": 2004}
    async with running_channel(fake, inbox, clock, image_bytes=1000):
        fake.push(private_message(None, message_id=101, photo=big_photo))
        fake.push(private_message(None, message_id=102, voice=unsized_voice))
        fake.push(private_message(None, message_id=103, voice=missing_voice))
        fake.push(private_message(None, message_id=104, voice=sized_voice))
        await inbox.wait(4)
    photo, unsized, missing, sized = (m.attachments[0] for m in inbox.messages)
    assert (inbox.messages[0].content, photo.kind, photo.size, photo.data) == (
        "[Image]",
        "image",
        9000,
        "",
    )
    # Over the cap by getFile's answer, unreachable, and over the cap by the message itself.
    assert (unsized.kind, unsized.size, unsized.data) == ("voice", 2004, "")
    assert (missing.kind, missing.size, missing.data) == ("voice", 0, "")
    assert (sized.size, sized.data) == (2004, "")
    assert [p["file_id"] for p in fake.called("getFile")] == ["voice-big", "voice-gone"]
    assert {m.content for m in inbox.messages[1:]} == {"[Voice message]"}


async def test_a_rate_limit_page_that_is_not_json_is_still_a_rate_limit(
    fake: FakeTelegram, inbox: Inbox, clock: FakeClock
) -> None:
    fake.fail_raw("getUpdates", 429, b"<html>slow down</html>")
    fake.fail_raw("getUpdates", 429, b"[]")
    async with running_channel(fake, inbox, clock) as channel:
        fake.push(private_message("through", message_id=111))
        await inbox.wait(1)
        assert channel.status().last_error == "FloodWait: Too Many Requests"


async def test_an_update_the_sdk_cannot_read_is_skipped_not_a_blockade(
    fake: FakeTelegram, inbox: Inbox, engine: Services, clock: FakeClock
) -> None:
    # A sticker without the fields the SDK requires: python-telegram-bot refuses the object.
    unreadable = private_message(None, message_id=121, sticker={"file_id": "s"})
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with running_channel(fake, inbox, clock) as channel:
        skipped = fake.push(unreadable)
        fake.push(private_message("after it", message_id=122))
        await inbox.wait(1)
        alone = fake.push(unreadable)  # a batch with nothing readable in it
        await fake.wait_confirmed(alone)
        assert skipped < alone and channel.status().state == "connected"
    async with (
        running_channel(fake, inbox, clock, mode="webhook", webhook_secret=SECRET) as hooked,
        serve_app(Starlette(routes=hooked.routes())) as base,
        httpx.AsyncClient(base_url=base, headers=headers) as client,
    ):
        answered = await client.post(WEBHOOK_PATH, json={"update_id": 950, "message": unreadable})
        not_json = await client.post(WEBHOOK_PATH, content=b"{not json")
    assert (answered.status_code, not_json.status_code) == (200, 400)
    assert [m.id for m in inbox.messages] == ["122"]
    assert await stored(engine, "telegram:user/42") == ["122"]
