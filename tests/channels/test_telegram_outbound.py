"""The Telegram adapter, outbound: answers stored by the real engine (SQLite) leave through the
delivery loop, driven by hand with a fake clock, as ``sendMessage`` calls of the real
python-telegram-bot to the fake Bot API; typing is ``sendChatAction`` kept alive during a turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.telegram import TelegramChannel, TelegramUnavailable
from postroom.channels.telegram.config import parse_config
from postroom.channels.telegram.outbound import TEXT_LIMIT, visible_length
from postroom.core import Action, Layer, MessageType
from postroom.core.chunking import limit_for
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk
from postroom.engine.outbox import DeliveryKind

from fake_engine_slack_whatsapp import Engine, open_engine
from fake_telegram import (
    BOT_ID,
    BOT_USERNAME,
    TOKEN,
    FakeTelegram,
    eventually,
    group_message,
    serve_fake_telegram,
)
from fakeclock import FakeClock

DM = "telegram:user/42"
GROUP = "telegram:group/1001234567890"
GROUP_ID = -1001234567890


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with serve_fake_telegram() as server:
        yield server


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


def new_channel(fake: FakeTelegram, **section: Any) -> TelegramChannel:
    config = parse_config({"token": TOKEN, "base_url": fake.url, "poll_timeout": 1} | section)
    return TelegramChannel(
        config,
        retry_base_s=0.05,
        retry_max_s=0.2,
        typing_refresh_s=0.05,
        typing_linger_s=5.0,
    )


@pytest.fixture
async def telegram(fake: FakeTelegram, engine: Engine) -> AsyncIterator[TelegramChannel]:
    channel = new_channel(fake)
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def deliver_all(engine: Engine) -> None:
    loop = engine.delivery()
    while await loop.deliver_due():
        pass


def chunk(chat_jid: str, content: str, **fields: Any) -> OutgoingChunk:
    values: dict[str, Any] = {
        "delivery_id": 1,
        "message_id": "m1",
        "chat_jid": chat_jid,
        "chunk": 0,
        "chunks": 1,
        "content": content,
        "kind": DeliveryKind.REPLY,
        "message_type": "assistant",
        "folder": "main",
        "topic": "",
        "reply_to": None,
        "attempt": 1,
    }
    return OutgoingChunk(**(values | fields))


# ----------------------------------------------------------------------------- sending


async def test_an_answer_is_chunked_formatted_and_replies_to_the_triggering_message(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine
) -> None:
    paragraph = "**Bold** and _it_ with a [link](https://example.org) & <tags>. " * 20
    text = "\n\n".join([paragraph] * 9)
    assert len(text) > 2 * limit_for("telegram")
    answer_id = await engine.put_answer(DM, text, reply_to="11")
    await deliver_all(engine)
    rows = await engine.deliveries(answer_id)
    sent = fake.called("sendMessage")
    assert len(rows) >= 3 and {r.status for r in rows} == {"sent"}
    assert len(sent) == len(rows)
    for call in sent:
        assert call["chat_id"] == 42 and call["parse_mode"] == "HTML"
        assert visible_length(call["text"], "telegram_html") <= TEXT_LIMIT
        assert "message_thread_id" not in call
    assert sent[0]["text"].startswith(
        '<b>Bold</b> and <i>it</i> with a <a href="https://example.org">link</a>'
        " &amp; &lt;tags&gt;."
    )
    # Only the first chunk answers the message that triggered the turn.
    assert sent[0]["reply_parameters"] == {"message_id": 11, "allow_sending_without_reply": True}
    assert all("reply_parameters" not in call for call in sent[1:])
    assert rows[0].platform_message_id == "9000"


async def test_an_answer_goes_into_the_forum_topic_it_answers(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine
) -> None:
    await engine.put_answer(GROUP, "in the topic", topic="77", reply_to="80")
    await engine.put_answer(GROUP, "pinned topic", topic="research", reply_to="web-1")
    await engine.put_answer(GROUP, "general topic", topic="1")
    await deliver_all(engine)
    by_text = {call["text"]: call for call in fake.called("sendMessage")}
    in_topic = by_text["in the topic"]
    assert (in_topic["chat_id"], in_topic["message_thread_id"]) == (GROUP_ID, 77)
    assert in_topic["reply_parameters"]["message_id"] == 80
    # A topic postroom named itself, or Telegram's General topic (1), is no thread to post to;
    # a reply id that is not Telegram's is no message to answer.
    for text in ("pinned topic", "general topic"):
        assert "message_thread_id" not in by_text[text]
        assert "reply_parameters" not in by_text[text]


async def test_a_topic_that_is_gone_gets_the_answer_in_the_chat(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine
) -> None:
    fake.fail("sendMessage", 400, "Bad Request: message thread not found")
    answer_id = await engine.put_answer(GROUP, "still here", topic="77")
    await deliver_all(engine)
    refused, delivered = fake.called("sendMessage")
    assert refused["message_thread_id"] == 77 and "message_thread_id" not in delivered
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_a_mirror_copy_carries_no_ids_of_the_chat_it_copies(
    telegram: TelegramChannel, fake: FakeTelegram
) -> None:
    result = await telegram.send(
        chunk(DM, "[Ada] copied", kind=DeliveryKind.MIRROR, message_type="user", topic="77")
    )
    (call,) = fake.called("sendMessage")
    assert call["text"] == "[Ada] copied"
    assert "message_thread_id" not in call and "reply_parameters" not in call
    assert result.platform_message_id == "9000"


async def test_rejected_markup_falls_back_to_plain_text(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine
) -> None:
    fake.reject_html = True
    answer_id = await engine.put_answer(DM, "**bold** [docs](https://d.example)", reply_to="5")
    await deliver_all(engine)
    refused, plain = fake.called("sendMessage")
    assert (refused["text"], refused["parse_mode"]) == (
        '<b>bold</b> <a href="https://d.example">docs</a>',
        "HTML",
    )
    assert plain["text"] == "bold docs (https://d.example)" and "parse_mode" not in plain
    assert plain["reply_parameters"]["message_id"] == 5
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_a_rate_limit_delays_the_delivery_by_retry_after_then_it_goes_out(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine, clock: FakeClock
) -> None:
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 7", retry_after=7)
    answer_id = await engine.put_answer(DM, "patience")
    loop = engine.delivery()
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and row.attempts == 1
    assert (row.next_try - clock()).total_seconds() == pytest.approx(7)
    assert "rate limit" in (row.last_error or "")
    assert not await loop.deliver_due()  # not due yet
    clock.advance(seconds=7)
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert [c["text"] for c in fake.called("sendMessage")] == ["patience", "patience"]


async def test_a_rate_limit_without_retry_after_is_still_a_rate_limit(
    telegram: TelegramChannel, fake: FakeTelegram
) -> None:
    fake.fail("sendMessage", 429, "Too Many Requests")
    with pytest.raises(DeliveryFailed) as raised:
        await telegram.send(chunk(DM, "soon"))
    assert raised.value.retry_after is None and not raised.value.permanent
    assert "rate limit" in str(raised.value)


@pytest.mark.parametrize(
    ("status", "description", "parameters", "permanent", "says"),
    [
        (403, "Forbidden: bot was blocked by the user", {}, True, "refused"),
        (400, "Bad Request: chat not found", {}, True, "refused"),
        (400, "Bad Request: message text is empty", {}, True, "refused a message"),
        (
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            {"migrate_to_chat_id": -1009876},
            True,
            "telegram:group/1009876",
        ),
        (502, "Bad Gateway", {}, False, "failed"),
    ],
)
async def test_refusals_are_permanent_and_outages_are_retried(
    telegram: TelegramChannel,
    fake: FakeTelegram,
    status: int,
    description: str,
    parameters: dict[str, Any],
    permanent: bool,
    says: str,
) -> None:
    fake.fail("sendMessage", status, description, **parameters)
    with pytest.raises(DeliveryFailed) as raised:
        await telegram.send(chunk(GROUP, "hello?"))
    assert raised.value.permanent is permanent
    assert says in str(raised.value)


async def test_a_prefixed_full_chunk_is_cut_again_to_fit(
    telegram: TelegramChannel, fake: FakeTelegram, engine: Engine
) -> None:
    words = ("word " * 2000).strip()
    answer_id = await engine.put_answer(
        DM, words[:4096], reply_to="12", message_type=MessageType.HOST
    )
    await deliver_all(engine)
    (row,) = await engine.deliveries(answer_id)
    first, second = fake.called("sendMessage")
    assert row.status == "sent" and row.platform_message_id == "9000"
    assert first["text"].startswith("🏠 word") and len(first["text"]) <= TEXT_LIMIT
    assert first["reply_parameters"]["message_id"] == 12 and "reply_parameters" not in second
    sent_words = (first["text"] + " " + second["text"]).removeprefix("🏠 ").split()
    assert sent_words == words[:4096].split()


async def test_unsendable_chunks(telegram: TelegramChannel, fake: FakeTelegram) -> None:
    with pytest.raises(DeliveryFailed) as raised:
        await telegram.send(chunk("slack:T1/channel/C1", "wrong platform"))
    assert raised.value.permanent
    assert (await telegram.send(chunk(DM, "   "))).platform_message_id is None
    assert fake.called("sendMessage") == []


async def test_sending_before_start_is_a_retryable_failure(fake: FakeTelegram) -> None:
    with pytest.raises(DeliveryFailed) as raised:
        await new_channel(fake).do_send(chunk(DM, "early"), "early", "plain")
    assert not raised.value.permanent


async def test_a_node_without_the_polling_lease_sends_but_never_polls(
    fake: FakeTelegram, engine: Engine
) -> None:
    channel = new_channel(fake)
    engine.attach(channel)
    await channel.start(engine.context(), listen=False)
    try:
        assert channel.single_connection and not channel.listening
        await channel.send(chunk(DM, "from a node that does not poll"))
        assert len(fake.called("sendMessage")) == 1
        assert not fake.called("getUpdates")

        await channel.listen()  # the node took the lease
        await fake.wait_for("getUpdates")
        await channel.unlisten()  # and lost it again
        polled = len(fake.called("getUpdates"))
        await channel.send(chunk(DM, "still sending", delivery_id=2, message_id="m2"))
        assert len(fake.called("sendMessage")) == 2
        assert len(fake.called("getUpdates")) == polled
    finally:
        await channel.stop()


# ----------------------------------------------------------------------------- reply chains


async def test_a_reply_to_a_bot_message_follows_the_reply_chain(
    fake: FakeTelegram, engine: Engine, clock: FakeClock
) -> None:
    await engine.mention_routes("telegram")
    channel = new_channel(fake)
    engine.attach(channel)
    await channel.start(engine.context())
    try:
        answer_id = await engine.put_answer(GROUP, "I am the answer")
        await deliver_all(engine)
        (row,) = await engine.deliveries(answer_id)
        bot_message = {
            "message_id": int(row.platform_message_id or 0),
            "date": 1767614400,
            "chat": {"id": GROUP_ID, "type": "supergroup", "title": "Engineering"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Postroom"},
            "text": "I am the answer",
        }
        fake.push(group_message("and then?", message_id=601, reply_to_message=bot_message))
        await eventually(lambda: any(r.id == "601" for r in engine.results))
    finally:
        await channel.stop()
    decision = engine.result_for("601").decision
    assert (decision.action, decision.folder) == (Action.FIRE, "main")
    # A reply to the bot is a mention, and the chain leads to the folder that answered.
    assert (decision.layer, decision.verb) == (Layer.REPLY_CHAIN, "mention")
    (stored,) = [m for m in await engine.user_messages(GROUP) if m.id == "601"]
    assert stored.reply_to == row.platform_message_id


# ----------------------------------------------------------------------------- typing


async def test_typing_is_refreshed_while_active_and_stops(
    telegram: TelegramChannel, fake: FakeTelegram
) -> None:
    await telegram.typing(DM, True)
    assert len(fake.called("sendChatAction")) == 1  # at once, not after the first period
    await fake.wait_for("sendChatAction", 4)
    await telegram.typing(DM, True)  # the engine's renewal: no second refresher
    assert telegram.typing_chats == frozenset({DM})
    await telegram.typing(DM, False)
    assert telegram.typing_chats == frozenset()
    stopped_at = len(fake.called("sendChatAction"))
    # Six refresh periods go by (another chat's typing is refreshed six times): none for DM.
    await telegram.typing(GROUP, True)
    await eventually(
        lambda: sum(c["chat_id"] == GROUP_ID for c in fake.called("sendChatAction")) >= 6
    )
    await telegram.typing(GROUP, False)
    assert sum(c["chat_id"] == 42 for c in fake.called("sendChatAction")) == stopped_at
    call = fake.called("sendChatAction")[0]
    assert (call["chat_id"], call["action"]) == (42, "typing")


async def test_typing_ends_on_its_own_when_no_longer_renewed(
    fake: FakeTelegram, engine: Engine
) -> None:
    channel = TelegramChannel(
        parse_config({"token": TOKEN, "base_url": fake.url, "poll_timeout": 1}),
        typing_refresh_s=0.02,
        typing_linger_s=0.1,
    )
    await channel.start(engine.context())
    try:
        await channel.typing(GROUP, True)
        await eventually(lambda: not channel.typing_chats)
        assert len(fake.called("sendChatAction")) >= 2
        assert fake.called("sendChatAction")[0]["chat_id"] == GROUP_ID
    finally:
        await channel.stop()


async def test_typing_failures_never_fail_the_turn_and_stop_leaves_no_task(
    fake: FakeTelegram, engine: Engine
) -> None:
    baseline = asyncio.all_tasks()
    channel = new_channel(fake)
    await channel.start(engine.context())
    fake.fail("sendChatAction", 400, "Bad Request: chat not found")
    fake.fail("sendChatAction", 429, "Too Many Requests: retry after 3", retry_after=3)
    fake.fail("sendChatAction", 500, "Internal Server Error")
    await channel.typing(DM, True)  # refused: swallowed
    await fake.wait_for("sendChatAction", 5)  # the refreshes go on through 429 and 500
    await channel.typing("not-a-telegram-chat", True)
    await channel.stop()
    assert channel.typing_chats == frozenset()
    await eventually(lambda: asyncio.all_tasks() <= baseline)


# ----------------------------------------------------------------------------- check


async def test_check_calls_get_me(telegram: TelegramChannel, fake: FakeTelegram) -> None:
    before = len(fake.called("getMe"))
    assert await telegram.check() == f"bot @{BOT_USERNAME} (id {BOT_ID}), polling"
    assert len(fake.called("getMe")) == before + 1


async def test_check_works_without_starting_the_channel(fake: FakeTelegram) -> None:
    channel = new_channel(fake, mode="webhook", webhook_secret="s3cret")
    assert await channel.check() == f"bot @{BOT_USERNAME} (id {BOT_ID}), webhook"
    assert fake.called("getUpdates") == [] and fake.called("setWebhook") == []


async def test_check_reports_a_refused_token_and_an_unreachable_api(fake: FakeTelegram) -> None:
    wrong = TelegramChannel(parse_config({"token": "99:nope", "base_url": fake.url}))
    with pytest.raises(TelegramUnavailable, match="refused the bot token"):
        await wrong.check()
    gone = TelegramChannel(parse_config({"token": TOKEN, "base_url": "http://127.0.0.1:9"}))
    with pytest.raises(TelegramUnavailable, match="unreachable"):
        await gone.check()
