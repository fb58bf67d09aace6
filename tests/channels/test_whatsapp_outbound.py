"""The WhatsApp adapter's sending side: answers, chunks, markup, errors and typing, through
the real delivery loop (hand-driven, fake clock) against a fake Graph API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from postroom.channels.whatsapp import WhatsAppChannel, build
from postroom.core import MessageType
from postroom.core.chunking import limit_for

from fake_engine_slack_whatsapp import Engine, open_engine, serve
from fake_whatsapp import (
    ACCESS_TOKEN,
    ALICE,
    GROUP,
    PHONE_ID,
    FakeWhatsApp,
    graph_error,
    section,
    text,
    webhook,
)
from fakeclock import FakeClock

DM = f"whatsapp:user/{ALICE}"
GROUP_CHAT = f"whatsapp:group/{GROUP}"


@pytest.fixture
async def fake() -> AsyncIterator[FakeWhatsApp]:
    fake = FakeWhatsApp()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


@pytest.fixture
async def engine(tmp_path: Any, clock: FakeClock) -> AsyncIterator[Engine]:
    async with open_engine(tmp_path, clock) as engine:
        yield engine


@pytest.fixture
async def whatsapp(fake: FakeWhatsApp, engine: Engine) -> AsyncIterator[WhatsAppChannel]:
    channel = build(section(fake.base_url))
    engine.attach(channel)
    await channel.start(engine.context())
    yield channel
    await channel.stop()


async def deliver_all(engine: Engine) -> None:
    loop = engine.delivery()
    while await loop.deliver_due():
        pass


# ----------------------------------------------------------------------------- answers


async def test_an_answer_is_chunked_formatted_and_quotes_what_it_answers(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    paragraph = (
        "**Bold** and _it_ with a [link](https://example.org/?a=1&b=2) & <more> words. " * 20
    )
    answer = "\n\n".join([paragraph] * 6)
    assert len(answer) > 2 * limit_for("whatsapp")
    answer_id = await engine.put_answer(DM, answer, reply_to="wamid.IN1")
    await deliver_all(engine)
    rows = await engine.deliveries(answer_id)
    assert len(rows) >= 3 and {r.status for r in rows} == {"sent"}
    assert len(fake.sent) == len(rows)
    for call in fake.sent:
        assert (call["to"], call["recipient_type"], call["type"]) == (ALICE, "individual", "text")
        assert len(call["text"]["body"]) <= limit_for("whatsapp")
    # The first chunk quotes the message it answers; the rest follow it.
    assert fake.sent[0]["context"] == {"message_id": "wamid.IN1"}
    assert all("context" not in call for call in fake.sent[1:])
    assert fake.sent[0]["text"]["body"].startswith(
        "*Bold* and _it_ with a link (https://example.org/?a=1&b=2) & <more> words."
    )
    assert [r.platform_message_id for r in rows][:2] == ["wamid.OUT0001", "wamid.OUT0002"]
    assert {auth for _m, _p, auth in fake.calls} == {f"Bearer {ACCESS_TOKEN}"}
    assert fake.calls[-1][:2] == ("POST", f"/v21.0/{PHONE_ID}/messages")


async def test_group_answers_go_to_the_group_and_foreign_reply_ids_are_not_quoted(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    await engine.put_answer(GROUP_CHAT, "to all of you", reply_to="web-123")
    await engine.put_answer(DM, "⚠️ the disk is full", message_type=MessageType.HOST, reply_to=None)
    await deliver_all(engine)
    to_group, notice = fake.sent
    assert (to_group["to"], to_group["recipient_type"]) == (GROUP, "group")
    assert "context" not in to_group
    assert notice["text"]["body"].startswith("🏠")


async def test_an_answer_is_sent_in_whatsapps_markup(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    md = (
        "# Title\n**Bold** _it_ ~~gone~~ `a<b>&c` [docs](https://d.example/x?a=1&b=2) "
        "<https://bare.example> & [https://same.example](https://same.example) &amp;\n\n"
        "- item\n\n> quote\n\n```py\nif a < b && c:\n    pass\n```"
    )
    await engine.put_answer(DM, md)
    await deliver_all(engine)
    assert fake.sent[0]["text"]["body"] == (
        "*Title*\n*Bold* _it_ ~gone~ `a<b>&c` docs (https://d.example/x?a=1&b=2) "
        "https://bare.example & https://same.example &\n\n"
        "• item\n\n> quote\n\n```\nif a < b && c:\n    pass\n```"
    )


async def test_an_empty_answer_sends_nothing(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine
) -> None:
    answer_id = await engine.put_answer(DM, " \n ")
    await deliver_all(engine)
    assert fake.sent == []
    assert [r.status for r in await engine.deliveries(answer_id)] == ["sent"]


# ----------------------------------------------------------------------------- errors


async def test_a_429_delays_the_delivery_by_retry_after_then_it_goes_out(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine, clock: FakeClock
) -> None:
    fake.failures.append(
        (
            429,
            graph_error(130429, "Rate limit hit", details="Cloud API throughput reached"),
            {"Retry-After": "7"},
        )
    )
    answer_id = await engine.put_answer(DM, "patience")
    loop = engine.delivery()
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and row.attempts == 1
    assert (row.next_try - clock()).total_seconds() == pytest.approx(7)
    assert "rate limit" in (row.last_error or "") and "130429" in (row.last_error or "")
    assert not await loop.deliver_due()  # not due yet
    clock.advance(seconds=7)
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "sent"
    assert [c["text"]["body"] for c in fake.sent] == ["patience", "patience"]


async def test_a_pair_rate_limit_without_retry_after_backs_off(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine, clock: FakeClock
) -> None:
    fake.failures.append(
        (400, graph_error(131056, "(Business Account, Consumer Account) pair rate limit hit"), {})
    )
    answer_id = await engine.put_answer(DM, "slowly")
    loop = engine.delivery()
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and "rate limit" in (row.last_error or "")
    clock.advance(seconds=300)
    assert await loop.deliver_due()
    assert (await engine.deliveries(answer_id))[0].status == "sent"


@pytest.mark.parametrize("code", [131047, 131026, 131030])
async def test_a_recipient_that_cannot_be_reached_abandons_the_delivery_at_once(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine, code: int
) -> None:
    fake.failures.append((400, graph_error(code, "Message failed to send"), {}))
    answer_id = await engine.put_answer(DM, "anyone?")
    assert await engine.delivery().deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "abandoned" and str(code) in (row.last_error or "")
    assert len(fake.sent) == 1


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, {"error": {"message": "Service unavailable", "code": "2"}}, "(2)"),
        (502, {}, "502 without an error body"),
        (200, {"error": "odd"}, "200 without an error body"),
    ],
)
async def test_other_failures_are_retried(
    whatsapp: WhatsAppChannel,
    fake: FakeWhatsApp,
    engine: Engine,
    clock: FakeClock,
    status: int,
    body: dict[str, Any],
    expected: str,
) -> None:
    fake.failures.append((status, body, {}))
    answer_id = await engine.put_answer(DM, "again")
    loop = engine.delivery()
    assert await loop.deliver_due()
    (row,) = await engine.deliveries(answer_id)
    assert row.status == "pending" and expected in (row.last_error or "")
    clock.advance(seconds=60)
    assert await loop.deliver_due()
    assert (await engine.deliveries(answer_id))[0].status == "sent"


async def test_an_unreachable_graph_is_retried_and_a_bad_address_abandoned(
    fake: FakeWhatsApp, engine: Engine
) -> None:
    channel = build(section("http://127.0.0.1:9"))  # nothing listens on the discard port
    engine.attach(channel)
    await channel.start(engine.context())
    try:
        assert channel.status().state == "error"
        unreachable = await engine.put_answer(DM, "hello?")
        wrong = await engine.put_answer("whatsapp:channel/5", "where?")
        loop = engine.delivery()
        while await loop.deliver_due():
            pass
        (row,) = await engine.deliveries(unreachable)
        assert row.status == "pending" and "could not be reached" in (row.last_error or "")
        (row,) = await engine.deliveries(wrong)
        assert row.status == "abandoned" and "not a WhatsApp chat address" in (row.last_error or "")
    finally:
        await channel.stop()


async def test_a_send_that_works_again_clears_the_error_state(
    fake: FakeWhatsApp, engine: Engine
) -> None:
    fake.phone_fails = True
    channel = build(section(fake.base_url))
    engine.attach(channel)
    await channel.start(engine.context())
    try:
        assert channel.status().state == "error"
        await engine.put_answer(DM, "I am fine")
        await deliver_all(engine)
        assert channel.status().state == "connected"
    finally:
        await channel.stop()


# ----------------------------------------------------------------------------- typing


async def test_typing_marks_the_last_message_read_and_is_resent_only_when_it_expires(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp, engine: Engine, clock: FakeClock
) -> None:
    await whatsapp.typing(DM, True)  # nothing received yet: nothing to hang it on
    assert fake.reads == []
    await whatsapp.handle_payload(
        webhook([text("hi", id="wamid.IN1"), text("and", id="wamid.IN2")])
    )
    await whatsapp.typing(DM, True)
    await whatsapp.typing(DM, True)  # the engine refreshes every few seconds
    clock.advance(seconds=19)
    await whatsapp.typing(DM, True)
    assert fake.reads == [
        {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": "wamid.IN2",
            "typing_indicator": {"type": "text"},
        }
    ]
    clock.advance(seconds=2)
    await whatsapp.typing(DM, True)  # 21 s: the indicator is about to expire
    assert len(fake.reads) == 2
    await whatsapp.typing(DM, False)  # no "stop" call exists: nothing is sent
    await whatsapp.typing(DM, True)  # the next turn shows it afresh
    assert len(fake.reads) == 3
    await engine.put_answer(DM, "done")
    await deliver_all(engine)
    await whatsapp.typing(DM, True)  # the answer dismissed it
    assert len(fake.reads) == 4
    assert {r["message_id"] for r in fake.reads} == {"wamid.IN2"}


async def test_a_failing_typing_indicator_never_fails_anything(
    whatsapp: WhatsAppChannel, fake: FakeWhatsApp
) -> None:
    await whatsapp.handle_payload(webhook([text("hi", id="wamid.IN3")]))
    fake.failures.append((400, graph_error(100, "Invalid parameter"), {}))
    await whatsapp.typing(DM, True)
    assert len(fake.reads) == 1
    await whatsapp.typing(DM, True)  # not remembered as shown: tried again
    assert len(fake.reads) == 2
