"""The outbound side over a real SQLite file (PIPELINE §3, ROUTING §4, MESSAGES §6, INTERFACES §4).

The delivery loop is driven round by round with ``deliver_due()`` and a FakeClock moved by hand
between rounds, so retries, backoff and the TTL are checked as exact values. Sinks are real: an
in-test sink that records chunks and fails on demand, the event-stream sink, and the outbound
webhook sink POSTing to a Starlette receiver served by uvicorn in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from structlog.testing import capture_logs

from postroom.app.gateway import Gateway
from postroom.channels.http import EventStreamSink, WebhookSession, WebhookSink, sign_body
from postroom.core import Action, Layer, MessageType
from postroom.core.bounds import MAX_TIME
from postroom.core.chunking import limit_for
from postroom.core.decision import Engagement
from postroom.engine import FolderSpec, Services
from postroom.engine.delivery import (
    DeliveryFailed,
    DeliveryLoop,
    DeliverySettings,
    OutgoingChunk,
    SendResult,
    SinkRouter,
)
from postroom.engine.notices import post_notice
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.engine.worker import WorkerPool
from postroom.store.records import DeliveryRecord, JobRecord, JobStatus, NewMessage
from postroom.store.sqlite import base as sqlite_base

from fakeclock import FakeClock
from support import SQLITE_ONLY, eventually, inbound, open_gateway, seed_spec_table

#: Every test runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("db_engine")

GUILD = "discord:guild/77/channel/3"
ABANDONED_PREFIX = "⚠️ a message could not be delivered"

# --------------------------------------------------------------------------- fakes and helpers


class RecordingSink:
    """A platform sink that records what it is asked to send and fails on demand."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self.tries: list[OutgoingChunk] = []
        #: When each try happened, on the test's clock.
        self.tried_at: list[datetime] = []
        self.sent: list[OutgoingChunk] = []
        #: Set whenever a chunk was sent.
        self.arrived = asyncio.Event()
        self._failures: dict[str, list[Exception]] = {}

    def fail(self, chat_jid: str, *errors: Exception) -> None:
        """The next sends to *chat_jid* raise *errors*, one each, in order."""
        self._failures.setdefault(chat_jid, []).extend(errors)

    async def send(self, chunk: OutgoingChunk) -> SendResult:
        self.tries.append(chunk)
        self.tried_at.append(self._clock())
        pending = self._failures.get(chunk.chat_jid)
        if pending:
            raise pending.pop(0)
        self.sent.append(chunk)
        self.arrived.set()
        return SendResult(f"p{len(self.sent)}")

    def sent_to(self, chat_jid: str) -> list[OutgoingChunk]:
        return [c for c in self.sent if c.chat_jid == chat_jid]


def make_loop(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    *,
    backoff_base_s: float = 2.0,
    ttl_s: float = 3600.0,
    extra: dict[str, Any] | None = None,
) -> DeliveryLoop:
    platforms = ("discord", "telegram", "slack", "whatsapp")
    by_platform: dict[str, Any] = dict.fromkeys(platforms, sink)
    by_platform.update(extra or {})
    return DeliveryLoop(
        store=services.store,
        sinks=SinkRouter(fallback=EventStreamSink(), by_platform=by_platform),
        catalog=services.catalog,
        defaults=services.defaults,
        signals=services.signals,
        clock=clock,
        settings=DeliverySettings(backoff_base_s=backoff_base_s, ttl_s=ttl_s),
    )


async def drain(loop: DeliveryLoop, *, max_rounds: int = 200) -> int:
    """Run rounds until nothing is due now; return how many rounds sent something."""
    rounds = 0
    while await loop.deliver_due():
        rounds += 1
        assert rounds < max_rounds, "the delivery loop never ran out of due rows"
    return rounds


async def outbox(
    services: Services, *, message_id: str | None = None, status: str | None = None
) -> list[DeliveryRecord]:
    return await services.history.deliveries(message_id=message_id, status=status, limit=1000)


async def the_delivery(services: Services, message_id: str, chat_jid: str) -> DeliveryRecord:
    (row,) = [d for d in await outbox(services, message_id=message_id) if d.chat_jid == chat_jid]
    return row


async def put_answer(
    services: Services,
    clock: FakeClock,
    content: str,
    chats: Sequence[str],
    *,
    kind: str = DeliveryKind.REPLY,
    engage: bool = False,
    folder: str | None = None,
    topic: str = "",
    message_id: str | None = None,
) -> OutboundMessage:
    """Store an assistant message in ``chats[0]`` and write its outbox rows, as a turn does."""
    message_id = message_id or uuid.uuid4().hex
    message = OutboundMessage(
        message_id=message_id,
        message_chat_jid=chats[0],
        message_type=MessageType.ASSISTANT.value,
        content=content,
        folder=folder,
        topic=topic,
    )
    async with services.store.write() as tx:
        await tx.insert_message(
            NewMessage(
                id=message_id,
                chat_jid=chats[0],
                sender="bot",
                sender_name="Postroom",
                content=content,
                timestamp=clock(),
                message_type=MessageType.ASSISTANT,
                is_from_me=True,
                topic=topic,
                routed_to=folder,
            )
        )
        await write_outbox(
            tx, plan_deliveries(message, chats, kind=kind, now=clock(), engage=engage)
        )
    return message


async def engagements(services: Services, chat_jid: str) -> dict[str, Engagement]:
    async with services.store.read() as tx:
        return dict((await tx.chat_state(chat_jid)).engagements)


async def finished(services: Services, job_id: int) -> JobRecord:
    """Wait (bounded) until the worker pool has finished the turn."""
    async with asyncio.timeout(20):
        while True:
            job = await services.turns.get_job(job_id)
            if job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
                return job
            await asyncio.sleep(0.01)


def words(text: str) -> list[str]:
    return text.split()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
async def gateway(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Gateway]:
    built = await open_gateway(tmp_path / "data", clock)
    yield built
    await built.close()


@pytest.fixture
def services(gateway: Gateway) -> Services:
    return gateway.services


@pytest.fixture
def sink(clock: FakeClock) -> RecordingSink:
    return RecordingSink(clock)


@pytest.fixture
def loop(services: Services, clock: FakeClock, sink: RecordingSink) -> DeliveryLoop:
    return make_loop(services, clock, sink)


@pytest.fixture
async def workers(gateway: Gateway) -> AsyncIterator[WorkerPool]:
    """The gateway's turn workers (echo), claiming turns."""
    await gateway.workers.start()
    yield gateway.workers
    await gateway.workers.stop()


# --------------------------------------------------------------------------- chunking


def long_answer_with_code() -> tuple[str, str]:
    """About 9,000 characters of prose with a fenced block straddling the 2,000 mark."""

    def paragraph(n: int) -> str:
        return f"Paragraph {n}. " + " ".join(f"w{n}x{j}" for j in range(70))

    code = "```python\n" + "".join(f"print('line {k:02d} of the block')\n" for k in range(20))
    code += "```"
    parts = [paragraph(n) for n in range(4)] + [code] + [paragraph(n) for n in range(4, 20)]
    return "\n\n".join(parts), code


async def test_a_long_answer_is_cut_to_the_platform_limit_and_sent_in_order(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    text, code = long_answer_with_code()
    assert len(text) >= 9000
    start = text.index(code)
    # The block straddles a cut that ignored it (precondition of the test).
    assert start < limit_for("discord") < start + len(code)
    message = await put_answer(services, clock, text, [GUILD])

    rows = await outbox(services, message_id=message.message_id)
    assert len(rows) >= 5
    assert [r.chunk for r in rows] == list(range(len(rows)))
    assert {r.chunks for r in rows} == {len(rows)}
    assert all(len(r.content) <= 2000 for r in rows)

    # One pending row per chat at a time: the first round sends chunk 0 only.
    assert await loop.deliver_due()
    assert [c.chunk for c in sink.sent] == [0]
    await drain(loop)

    assert [c.chunk for c in sink.sent] == list(range(len(rows)))
    assert all(c.chunks == len(rows) and c.message_id == message.message_id for c in sink.sent)
    assert all(len(c.content) <= 2000 for c in sink.sent)
    assert [c.content for c in sink.sent] == [r.content for r in rows]
    # Nothing lost, nothing reordered: the words read the same.
    assert words(" ".join(c.content for c in sink.sent)) == words(text)
    # The fenced block is whole in exactly one chunk, and no chunk leaves a fence open.
    holding = [c for c in sink.sent if code in c.content]
    assert len(holding) == 1
    assert all(c.content.count("```") % 2 == 0 for c in sink.sent)
    assert {r.status for r in await outbox(services, message_id=message.message_id)} == {"sent"}


async def test_each_platform_gets_its_own_limit(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    text = "\n\n".join(" ".join(f"p{n}w{j}" for j in range(60)) for n in range(20))
    message = await put_answer(services, clock, text, [GUILD, "telegram:group/5"])
    await drain(loop)
    for chat, limit in ((GUILD, 2000), ("telegram:group/5", 4096)):
        chunks = sink.sent_to(chat)
        assert all(len(c.content) <= limit for c in chunks)
        assert [c.chunk for c in chunks] == list(range(len(chunks)))
        assert words(" ".join(c.content for c in chunks)) == words(text)
        assert all(c.message_id == message.message_id for c in chunks)
    assert len(sink.sent_to(GUILD)) > len(sink.sent_to("telegram:group/5"))


# --------------------------------------------------------------------------- idempotency


async def test_delivery_is_idempotent_per_message_chat_and_chunk(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    text = "x " * 1500  # two chunks on Discord, one on Telegram
    chats = [GUILD, "telegram:group/5"]
    message = await put_answer(services, clock, text, chats)
    planned = await outbox(services, message_id=message.message_id)
    assert sorted((r.chat_jid, r.chunk) for r in planned) == [
        (GUILD, 0),
        (GUILD, 1),
        ("telegram:group/5", 0),
    ]

    # Writing the same planned rows again (a repeated commit after a crash) adds nothing.
    for _ in range(2):
        clock.advance(seconds=1)
        async with services.store.write() as tx:
            rows = plan_deliveries(message, chats, kind=DeliveryKind.REPLY, now=clock())
            await write_outbox(tx, rows)
    assert [r.id for r in await outbox(services, message_id=message.message_id)] == [
        r.id for r in planned
    ]

    await drain(loop)
    sent_keys = [(c.message_id, c.chat_jid, c.chunk) for c in sink.sent]
    assert sorted(sent_keys) == sorted((r.message_id, r.chat_jid, r.chunk) for r in planned)
    assert len(set(sent_keys)) == len(sent_keys)

    # Delivered rows are never sent again: more rounds, later, and a re-written outbox.
    async with services.store.write() as tx:
        await write_outbox(
            tx, plan_deliveries(message, chats, kind=DeliveryKind.REPLY, now=clock())
        )
    for _ in range(3):
        clock.advance(minutes=10)
        assert not await loop.deliver_due()
    assert len(sink.tries) == len(planned)
    rows = await outbox(services, message_id=message.message_id)
    assert len(rows) == len(planned)
    assert {r.status for r in rows} == {"sent"}
    assert all(r.attempts == 1 for r in rows)


# --------------------------------------------------------------------------- order and retries


async def test_a_chat_waits_for_its_retry_while_other_chats_go_through(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    chat_a, chat_b = GUILD, "telegram:group/2"
    a = await put_answer(services, clock, "a " * 1500, [chat_a])  # chunks 0 and 1
    b1 = await put_answer(services, clock, "first for B", [chat_b])
    b2 = await put_answer(services, clock, "second for B", [chat_b])
    assert len(await outbox(services, message_id=a.message_id)) == 2
    sink.fail(chat_a, DeliveryFailed("discord is down"))

    assert await loop.deliver_due()  # A0 fails, B's first message goes
    assert await loop.deliver_due()  # A0 waits: only B's second message goes
    assert not await loop.deliver_due()  # nothing else is due now
    assert [(c.chat_jid, c.message_id) for c in sink.sent] == [
        (chat_b, b1.message_id),
        (chat_b, b2.message_id),
    ]
    assert [(c.chat_jid, c.chunk) for c in sink.tries if c.chat_jid == chat_a] == [(chat_a, 0)]
    a0, a1 = await outbox(services, message_id=a.message_id)
    assert (a0.status, a0.attempts) == ("pending", 1)
    assert (a1.status, a1.attempts) == ("pending", 0)

    clock.advance(seconds=2)  # backoff_base × 2^0
    await drain(loop)
    assert [(c.chunk, c.attempt) for c in sink.sent_to(chat_a)] == [(0, 2), (1, 1)]


async def test_retry_backoff_doubles_and_retry_after_wins(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    chat = "telegram:group/3"
    message = await put_answer(services, clock, "hello", [chat])
    sink.fail(
        chat,
        DeliveryFailed("503 from telegram"),
        DeliveryFailed("timeout"),
        DeliveryFailed("503 again"),
        DeliveryFailed("flood control", retry_after=1),
        RuntimeError("adapter bug"),  # not a DeliveryFailed: retried all the same
        DeliveryFailed("flood control", retry_after=7),
    )
    # After the n-th failure the row waits backoff_base × 2^(n-1), or retry_after when given.
    expected = [
        (1, 2.0, "503 from telegram"),
        (2, 4.0, "timeout"),
        (3, 8.0, "503 again"),
        (4, 1.0, "flood control"),
        (5, 32.0, "adapter bug"),
        (6, 7.0, "flood control"),
    ]
    for attempts, delay_s, error in expected:
        failed_at = clock()
        assert await loop.deliver_due()
        row = await the_delivery(services, message.message_id, chat)
        assert row.status == "pending"
        assert row.attempts == attempts
        assert row.next_try == failed_at + timedelta(seconds=delay_s)
        assert row.last_error is not None and error in row.last_error
        # Not a moment before it is due.
        clock.advance(seconds=delay_s - 0.5)
        assert not await loop.deliver_due()
        clock.advance(seconds=0.5)

    assert await loop.deliver_due()
    row = await the_delivery(services, message.message_id, chat)
    assert row.status == "sent"
    assert [c.attempt for c in sink.tries] == [1, 2, 3, 4, 5, 6, 7]
    assert [c.content for c in sink.sent] == ["hello"]


async def test_a_row_that_keeps_failing_is_abandoned_after_the_ttl_with_a_host_record(
    services: Services, clock: FakeClock, sink: RecordingSink
) -> None:
    loop = make_loop(services, clock, sink, backoff_base_s=10, ttl_s=60)
    chat = "telegram:group/4"
    created = clock()
    message = await put_answer(services, clock, "will never arrive", [chat])
    sink.fail(chat, *(DeliveryFailed("chat unreachable") for _ in range(50)))

    for _ in range(20):
        row = await the_delivery(services, message.message_id, chat)
        if row.status != "pending":
            break
        clock.now = max(clock.now, row.next_try)
        await loop.deliver_due()
    row = await the_delivery(services, message.message_id, chat)
    assert row.status == "abandoned"
    assert row.last_error is not None and "chat unreachable" in row.last_error
    assert sink.sent == []
    # Retried with backoff, and never tried once the row was older than the TTL.
    assert len(sink.tries) >= 2
    assert all((at - created).total_seconds() <= 60 for at in sink.tried_at)
    tries = len(sink.tries)

    history = await services.history.messages(chat_jid=chat)
    notices = [m for m in history if m.message_type is MessageType.HOST]
    assert len(notices) == 1
    assert notices[0].content.startswith(ABANDONED_PREFIX)
    assert notices[0].reply_to == message.message_id
    # The host record is history, not a delivery (the chat cannot be reached anyway) ...
    assert await outbox(services, message_id=notices[0].id) == []
    # ... and nothing for the chat is left in the outbox: later rounds send nothing.
    assert [r for r in await outbox(services, status="pending") if r.chat_jid == chat] == []
    for _ in range(3):
        clock.advance(hours=1)
        assert not await loop.deliver_due()
    assert len(sink.tries) == tries


async def test_a_row_older_than_the_ttl_is_abandoned_not_sent_after_a_restart(
    services: Services, clock: FakeClock, sink: RecordingSink
) -> None:
    """PIPELINE §3.3: abandoned after the TTL "so a restart never floods a chat with stale
    answers" — a row still pending when the gateway comes back hours later is not sent."""
    chat = "telegram:group/8"
    message = await put_answer(services, clock, "an answer from two hours ago", [chat])
    clock.advance(hours=2)  # the gateway was down
    loop = make_loop(services, clock, sink, ttl_s=3600)
    await drain(loop)
    assert sink.sent == [], "a stale answer (older than the delivery TTL) was sent"
    row = await the_delivery(services, message.message_id, chat)
    assert row.status == "abandoned"
    notices = [
        m
        for m in await services.history.messages(chat_jid=chat)
        if m.message_type is MessageType.HOST
    ]
    assert [n.content.startswith(ABANDONED_PREFIX) for n in notices] == [True]


async def test_a_permanent_failure_abandons_at_once(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    chat, other = "telegram:group/6", "telegram:group/7"
    message = await put_answer(services, clock, "to a chat the bot was removed from", [chat])
    later = await put_answer(services, clock, "the next message for that chat", [chat])
    elsewhere = await put_answer(services, clock, "fine elsewhere", [other])
    sink.fail(chat, DeliveryFailed("bot was kicked", permanent=True))

    assert await loop.deliver_due()
    row = await the_delivery(services, message.message_id, chat)
    assert row.status == "abandoned"
    assert row.last_error is not None and "bot was kicked" in row.last_error
    (notice,) = [
        m
        for m in await services.history.messages(chat_jid=chat)
        if m.message_type is MessageType.HOST
    ]
    assert notice.content.startswith(ABANDONED_PREFIX)
    assert "bot was kicked" in notice.content
    # The chat's queue moves on; the other chat was not held up.
    await drain(loop)
    assert [c.message_id for c in sink.sent_to(other)] == [elsewhere.message_id]
    assert [c.message_id for c in sink.sent_to(chat)] == [later.message_id]
    assert [c.message_id for c in sink.tries if c.chat_jid == chat] == [
        message.message_id,
        later.message_id,
    ]


# --------------------------------------------------------------------------- engagement


async def test_a_delivered_reply_engages_for_the_folders_ttl(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    await services.folders.add_folder("ten", FolderSpec(engagement_ttl="10m"), actor="test")
    await services.folders.add_folder("never", FolderSpec(engagement_ttl="0"), actor="test")
    await services.folders.add_folder("plain", FolderSpec(), actor="test")
    chat_ten, chat_never, chat_plain = "telegram:group/10", "telegram:group/11", "telegram:group/12"

    await put_answer(services, clock, "r1", [chat_ten], engage=True, folder="ten")
    await put_answer(services, clock, "r2", [chat_never], engage=True, folder="never")
    await put_answer(
        services, clock, "r3", [chat_plain], engage=True, folder="plain", topic="billing"
    )
    # Writing the reply to the outbox does not engage; delivering it does.
    assert await engagements(services, chat_ten) == {}
    sink.fail(chat_plain, DeliveryFailed("down"))
    t0 = clock()
    await drain(loop)

    assert await engagements(services, chat_ten) == {
        "": Engagement("ten", t0 + timedelta(seconds=600))
    }
    assert await engagements(services, chat_never) == {}
    # A failed send engages nothing.
    assert await engagements(services, chat_plain) == {}

    clock.advance(minutes=5)
    t1 = clock()
    await drain(loop)  # the retry of r3 goes through now
    # Default TTL (30 minutes), engaged for the reply's topic only.
    assert await engagements(services, chat_plain) == {
        "billing": Engagement("plain", t1 + timedelta(minutes=30))
    }
    # Every delivered reply renews the engagement.
    await put_answer(services, clock, "r4", [chat_ten], engage=True, folder="ten")
    await drain(loop)
    assert await engagements(services, chat_ten) == {
        "": Engagement("ten", t1 + timedelta(seconds=600))
    }
    # A notice in the chat (not a reply) does not renew it.
    clock.advance(minutes=1)
    async with services.store.write() as tx:
        await post_notice(tx, chat_ten, "just saying", clock=clock)
    await drain(loop)
    assert await engagements(services, chat_ten) == {
        "": Engagement("ten", t1 + timedelta(seconds=600))
    }


@SQLITE_ONLY
async def test_an_absurd_stored_ttl_still_marks_the_send_sent_once(
    tmp_path: Path, services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    """A TTL no surface accepts any more (99999999h), written straight into the database as an
    older version or a hand edit could: ``now + ttl`` saturates, so the sent row is marked sent
    and never sent again (it used to overflow, fail the commit and resend every round)."""
    await services.folders.add_folder("forever", FolderSpec(engagement_ttl="10m"), actor="test")
    db = sqlite3.connect(tmp_path / "data" / "postroom.db")
    with db:
        db.execute(
            "UPDATE folders SET engagement_ttl_s = ? WHERE path = 'forever'", (99999999 * 3600,)
        )
    db.close()
    async with services.store.read() as tx:
        await services.catalog.reload(tx)
    chat = "telegram:group/13"
    answer = await put_answer(
        services, clock, "forever yours", [chat], engage=True, folder="forever"
    )

    await drain(loop)
    assert [c.content for c in sink.sent] == ["forever yours"]
    assert (await the_delivery(services, answer.message_id, chat)).status == "sent"
    assert await engagements(services, chat) == {"": Engagement("forever", MAX_TIME)}
    clock.advance(minutes=5)
    assert await drain(loop) == 0
    assert len(sink.tries) == 1


async def test_discord_guild_example_end_to_end(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    loop: DeliveryLoop,
    workers: WorkerPool,
) -> None:
    """ROUTING §7: observe, fire on a mention, the delivered reply engages, engagement beats
    #observe, and after the TTL plain messages are observed again."""
    await seed_spec_table(services)
    alice, bob = "discord:user/alice", "discord:user/bob"

    lunch = await services.ingest.ingest(inbound(GUILD, "lunch?", sender=alice))
    assert (lunch.decision.action, lunch.decision.folder) == (Action.OBSERVE, "main")

    called = await services.ingest.ingest(inbound(GUILD, "@Postroom summarize", sender=bob))
    assert (called.decision.action, called.decision.folder) == (Action.FIRE, "main")
    assert called.decision.layer is Layer.ROUTE and called.decision.route_id == 6
    assert called.decision.job_id is not None
    job = await finished(services, called.decision.job_id)
    assert job.status is JobStatus.DONE and job.answer_id is not None
    answer = next(
        m for m in await services.history.messages(chat_jid=GUILD) if m.id == job.answer_id
    )
    assert answer.message_type is MessageType.ASSISTANT and answer.routed_to == "main"
    assert answer.run_id is not None
    run = await services.history.run(answer.run_id)
    assert "lunch?" in json.dumps(run.messages)  # the observed row joined the context

    # Not engaged until the reply is delivered.
    assert await engagements(services, GUILD) == {}
    delivered_at = clock()
    await drain(loop)
    (reply,) = sink.sent_to(GUILD)
    assert (reply.message_id, reply.kind, reply.folder) == (job.answer_id, "reply", "main")
    assert reply.content == answer.content
    assert await engagements(services, GUILD) == {
        "": Engagement("main", delivered_at + timedelta(minutes=30))
    }

    clock.advance(minutes=10)
    follow = await services.ingest.ingest(inbound(GUILD, "and tomorrow?", sender=alice))
    assert (follow.decision.action, follow.decision.folder) == (Action.FIRE, "main")
    assert follow.decision.layer is Layer.ENGAGEMENT
    assert follow.decision.job_id is not None
    assert (await finished(services, follow.decision.job_id)).status is JobStatus.DONE
    renewed_at = clock()
    await drain(loop)
    assert len(sink.sent_to(GUILD)) == 2
    assert await engagements(services, GUILD) == {
        "": Engagement("main", renewed_at + timedelta(minutes=30))
    }

    clock.advance(minutes=30, seconds=1)
    later = await services.ingest.ingest(inbound(GUILD, "anyone around?", sender=alice))
    assert (later.decision.action, later.decision.folder) == (Action.OBSERVE, "main")
    assert later.decision.layer is Layer.ROUTE and later.decision.job_id is None
    assert len(sink.sent_to(GUILD)) == 2


# --------------------------------------------------------------------------- mirrors


async def test_mirror_chats_get_user_messages_and_replies_but_never_notices(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    loop: DeliveryLoop,
    workers: WorkerPool,
) -> None:
    mirror = "telegram:user/42"
    dm = "discord:dm/9"
    await services.folders.add_folder("pa", FolderSpec(mirror=(mirror,)), actor="test")
    await services.routes.add_route(0, "platform=discord", "pa", actor="test")
    await services.routes.add_route(1, f"chat_jid={mirror}", "pa", actor="test")
    await services.routes.add_route(2, "platform=slack", "pa#observe", actor="test")

    hello = await services.ingest.ingest(
        inbound(dm, "hello from discord", sender="discord:user/alice")
    )
    assert hello.decision.action is Action.FIRE and hello.decision.job_id is not None
    # The user message is copied to the mirror at ingest, with its sender's name.
    (copy,) = await outbox(services, message_id=hello.id)
    assert (copy.chat_jid, copy.kind, copy.message_type) == (mirror, "mirror", "user")
    assert copy.content == "[alice] hello from discord"
    assert not copy.engage

    job = await finished(services, hello.decision.job_id)
    assert job.status is JobStatus.DONE and job.answer_id is not None
    answer_rows = await outbox(services, message_id=job.answer_id)
    assert sorted((r.chat_jid, r.kind, r.engage) for r in answer_rows) == [
        (dm, "reply", True),
        (mirror, "mirror", False),
    ]

    ack = await services.ingest.ingest(inbound(dm, "#support", sender="discord:user/alice"))
    assert ack.decision.action is Action.COMMAND and ack.decision.ack == "topic → support"

    await drain(loop)
    assert [(c.message_type, c.content) for c in sink.sent_to(mirror)] == [
        ("user", "[alice] hello from discord"),
        ("assistant", answer_rows[0].content),
    ]
    assert [c.message_type for c in sink.sent_to(dm)] == ["assistant", "host"]
    assert sink.sent_to(dm)[1].content == "topic → support"
    # The reply engaged the chat it answered; the mirror copy engaged nothing.
    assert set(await engagements(services, dm)) == {""}
    assert await engagements(services, mirror) == {}

    # A message sent *in* the mirror chat is routed like any other; it is not copied to
    # itself, and its reply reaches it once, as a reply.
    own = await services.ingest.ingest(inbound(mirror, "from the mirror itself"))
    assert own.decision.action is Action.FIRE and own.decision.job_id is not None
    assert await outbox(services, message_id=own.id) == []
    own_job = await finished(services, own.decision.job_id)
    assert own_job.answer_id is not None
    assert [(r.chat_jid, r.kind) for r in await outbox(services, message_id=own_job.answer_id)] == [
        (mirror, "reply")
    ]
    # An observed user message of the folder is mirrored too (at ingest).
    seen = await services.ingest.ingest(
        inbound("slack:T1/channel/C1", "fyi", sender="slack:user/bob")
    )
    assert seen.decision.action is Action.OBSERVE
    await drain(loop)
    own_answer = (await outbox(services, message_id=own_job.answer_id))[0].content
    assert [(c.message_type, c.kind, c.content) for c in sink.sent_to(mirror)] == [
        ("user", "mirror", "[alice] hello from discord"),
        ("assistant", "mirror", answer_rows[0].content),
        ("assistant", "reply", own_answer),
        ("user", "mirror", "[bob] fyi"),
    ]


# --------------------------------------------------------------------------- host notices


async def test_steering_acks_go_through_the_outbox_to_their_chat(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    await seed_spec_table(services)
    chat = "telegram:group/5"
    result = await services.ingest.ingest(inbound(chat, "@atlas/social"))
    assert result.decision.ack == "routing → atlas/social"
    (notice,) = [
        m
        for m in await services.history.messages(chat_jid=chat)
        if m.message_type is MessageType.HOST
    ]
    (row,) = await outbox(services, message_id=notice.id)
    assert (row.chat_jid, row.kind, row.message_type, row.status) == (
        chat,
        "notice",
        "host",
        "pending",
    )
    assert not row.engage

    await drain(loop)
    assert [(c.chat_jid, c.message_type, c.content) for c in sink.sent] == [
        (chat, "host", "routing → atlas/social")
    ]
    assert (await the_delivery(services, notice.id, chat)).status == "sent"
    assert await engagements(services, chat) == {}


async def test_a_failed_turn_notice_is_delivered_to_the_chat(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    loop: DeliveryLoop,
    workers: WorkerPool,
) -> None:
    # A known provider with no key configured: the turn fails (an unknown one is refused when
    # the folder is written).
    await services.folders.add_folder("broken", FolderSpec(provider="anthropic"), actor="test")
    await services.routes.add_route(0, "platform=telegram", "broken", actor="test")
    result = await services.ingest.ingest(inbound("telegram:group/9", "hi"))
    assert result.decision.job_id is not None
    job = await finished(services, result.decision.job_id)
    assert job.status is JobStatus.FAILED
    await drain(loop)
    (sent,) = sink.sent
    assert sent.chat_jid == "telegram:group/9" and sent.message_type == "host"
    assert sent.content.startswith(f"⚠️ could not answer (job {job.id}):")


# --------------------------------------------------------------------------- the outbound webhook


@dataclass
class Receiver:
    """A webhook endpoint that records requests and answers as told."""

    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append((dict(request.headers), body))
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        return Response(status_code=status, headers=headers)


@contextlib.asynccontextmanager
async def serve(app: Starlette) -> AsyncIterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the receiver stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    state = Receiver()
    app = Starlette(routes=[Route("/hook", state.endpoint, methods=["POST"])])
    async with serve(app) as base:
        yield state, f"{base}/hook"


@pytest.fixture
async def http() -> AsyncIterator[WebhookSession]:
    session = WebhookSession()
    yield session
    await session.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_webhook_body_idempotency_key_and_signature(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    receiver: tuple[Receiver, str],
    http: WebhookSession,
) -> None:
    state, url = receiver
    secret = "s3cret-ü"
    hook = WebhookSink(url=url, secret=secret, client=http)
    loop = make_loop(services, clock, sink, extra={"acme": hook})
    chat = "acme:room/1"
    await services.folders.add_folder("acme", FolderSpec(), actor="test")
    text = ("Grüße " + "z" * 30 + "\n") * 150  # over 4,000 characters: two chunks
    message = await put_answer(services, clock, text, [chat], folder="acme", topic="deploy")

    await drain(loop)
    assert len(state.requests) == 2
    rows = await outbox(services, message_id=message.message_id)
    assert [r.status for r in rows] == ["sent", "sent"]
    for index, (headers, body) in enumerate(state.requests):
        payload = json.loads(body)
        assert payload == {
            "id": message.message_id,
            "chat_jid": chat,
            "topic": "deploy",
            "reply_to": None,
            "folder": "acme",
            "message_type": "assistant",
            "content": rows[index].content,
            "chunk": index,
            "chunks": 2,
        }
        assert len(payload["content"]) <= 4000
        assert headers["content-type"].startswith("application/json")
        assert headers["idempotency-key"] == f"{message.message_id}:{chat}:{index}"
        # INTERFACES §4: t=<unix seconds>,v1=<HMAC of "<t>.<path as sent>.<body>">.
        t_part, _, v1_part = headers["x-postroom-signature"].partition(",")
        t = int(t_part.removeprefix("t="))
        assert abs(t - time.time()) < 60
        signed = f"{t}./hook.".encode() + body
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        assert v1_part == f"v1={expected}"
        assert sign_body(secret, url, body, now=t) == headers["x-postroom-signature"]
    assert words(" ".join(json.loads(b)["content"] for _, b in state.requests)) == words(text)

    # Without a secret there is no signature header.
    unsigned = make_loop(
        services, clock, sink, extra={"acme": WebhookSink(url=url, secret=None, client=http)}
    )
    await put_answer(services, clock, "plain", [chat])
    await drain(unsigned)
    headers, _ = state.requests[-1]
    assert "x-postroom-signature" not in headers


async def test_webhook_retries_honour_retry_after_and_backoff(
    services: Services,
    clock: FakeClock,
    sink: RecordingSink,
    receiver: tuple[Receiver, str],
    http: WebhookSession,
) -> None:
    state, url = receiver
    loop = make_loop(
        services,
        clock,
        sink,
        backoff_base_s=2,
        extra={"acme": WebhookSink(url=url, secret=None, client=http)},
    )
    chat = "acme:room/2"

    # 429 with Retry-After: 7 → rescheduled exactly 7 s later, then delivered.
    limited = await put_answer(services, clock, "rate limited", [chat])
    state.answers.append((429, {"Retry-After": "7"}))
    failed_at = clock()
    assert await loop.deliver_due()
    row = await the_delivery(services, limited.message_id, chat)
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.next_try == failed_at + timedelta(seconds=7)
    clock.advance(seconds=6)
    assert not await loop.deliver_due()
    clock.advance(seconds=1)
    assert await loop.deliver_due()
    assert (await the_delivery(services, limited.message_id, chat)).status == "sent"
    assert len(state.requests) == 2
    assert state.requests[0] == state.requests[1]  # same body, same idempotency key

    # 500 → retried with backoff (base × 2^0, then × 2^1), then delivered.
    broken = await put_answer(services, clock, "server error", [chat])
    state.answers += [(500, {}), (500, {"Retry-After": "99"})]  # Retry-After only for 429/503
    failed_at = clock()
    assert await loop.deliver_due()
    row = await the_delivery(services, broken.message_id, chat)
    assert row.next_try == failed_at + timedelta(seconds=2)
    assert row.last_error is not None and "500" in row.last_error
    clock.advance(seconds=2)
    failed_at = clock()
    assert await loop.deliver_due()
    row = await the_delivery(services, broken.message_id, chat)
    assert (row.attempts, row.next_try) == (2, failed_at + timedelta(seconds=4))
    clock.advance(seconds=4)
    assert await loop.deliver_due()
    assert (await the_delivery(services, broken.message_id, chat)).status == "sent"
    assert len(state.requests) == 5

    # A Retry-After that cannot be read means the backoff; an absurd one waits out the TTL at
    # most (1e15 s used to overflow the date arithmetic and fail the round).
    odd = await put_answer(services, clock, "odd wait", ["acme:room/3"])
    state.answers += [(429, {"Retry-After": "soon"}), (429, {"Retry-After": "1e15"})]
    failed_at = clock()
    assert await loop.deliver_due()
    row = await the_delivery(services, odd.message_id, "acme:room/3")
    assert row.next_try == failed_at + timedelta(seconds=2)
    clock.advance(seconds=2)
    assert await loop.deliver_due()
    row = await the_delivery(services, odd.message_id, "acme:room/3")
    assert (row.status, row.attempts) == ("pending", 2)
    assert row.next_try <= row.created_at + timedelta(hours=1, seconds=1)  # the TTL at most


async def test_an_unreachable_webhook_is_retried(
    services: Services, clock: FakeClock, sink: RecordingSink, http: WebhookSession
) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    loop = make_loop(
        services,
        clock,
        sink,
        backoff_base_s=3,
        extra={"acme": WebhookSink(url=url, secret="k", client=http)},
    )
    chat = "acme:room/3"
    message = await put_answer(services, clock, "nobody listens", [chat])
    failed_at = clock()
    assert await loop.deliver_due()
    row = await the_delivery(services, message.message_id, chat)
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.next_try == failed_at + timedelta(seconds=3)
    assert row.last_error is not None and "unreachable" in row.last_error
    clock.advance(seconds=3)
    assert await loop.deliver_due()
    row = await the_delivery(services, message.message_id, chat)
    assert (row.status, row.attempts) == ("pending", 2)


# --------------------------------------------------------------------------- live events


async def test_each_sent_chunk_publishes_a_delivery_event(
    services: Services, clock: FakeClock, sink: RecordingSink, loop: DeliveryLoop
) -> None:
    subscription = services.signals.bus.subscribe(accept=lambda e: e.kind == "delivery")
    message = await put_answer(services, clock, "y " * 1500, [GUILD], folder="main")
    web = await put_answer(services, clock, "to the web chat", ["web:main/anon-1"])
    sink.fail(GUILD, DeliveryFailed("later"))
    await drain(loop)
    clock.advance(seconds=2)
    await drain(loop)

    events: list[dict[str, Any]] = []
    async with asyncio.timeout(5):
        async for event in subscription:
            events.append(event.data)
            if len(events) == 3:
                break
    subscription.close()
    # The failed try published nothing; every sent chunk did, once.
    assert sorted((e["id"], e["chat_jid"], e["chunk"], e["status"]) for e in events) == sorted(
        [
            (web.message_id, "web:main/anon-1", 0, "sent"),
            (message.message_id, GUILD, 0, "sent"),
            (message.message_id, GUILD, 1, "sent"),
        ]
    )
    guild_events = [e for e in events if e["chat_jid"] == GUILD]
    assert [e["chunk"] for e in guild_events] == [0, 1]
    assert all(e["chunks"] == 2 and e["folder"] == "main" for e in guild_events)
    assert {"id", "chat_jid", "topic", "reply_to", "folder", "message_type", "content"} <= set(
        guild_events[0]
    )


async def test_the_running_loop_delivers_an_answer_without_being_driven(
    services: Services, clock: FakeClock, sink: RecordingSink, workers: WorkerPool
) -> None:
    """End to end with ``run()``: ingest wakes a worker, the stored answer wakes the loop."""
    await seed_spec_table(services)
    loop = make_loop(services, clock, sink)
    running = asyncio.create_task(loop.run())
    try:
        result = await services.ingest.ingest(inbound("telegram:group/5", "ping"))
        assert result.decision.job_id is not None
        job = await finished(services, result.decision.job_id)
        async with asyncio.timeout(20):
            await sink.arrived.wait()
    finally:
        loop.stop()
        await running
    (sent,) = sink.sent
    assert (sent.message_id, sent.chat_jid, sent.content) == (
        job.answer_id,
        "telegram:group/5",
        "ping",
    )
    assert await outbox(services, status="pending") == []


@SQLITE_ONLY
async def test_the_running_loop_goes_on_after_a_round_fails(
    services: Services, clock: FakeClock, sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock past the busy timeout fails the send's record
    (the row was sent but could not be marked); the loop logs it and sends the row again later
    instead of ending for good: the same row again (a sink's idempotency key is made of it)."""
    monkeypatch.setattr(sqlite_base, "BUSY_TIMEOUT_MS", 100)
    message = await put_answer(services, clock, "hello", ["telegram:group/5"])
    loop = make_loop(services, clock, sink)
    other = sqlite3.connect(services.store.path)  # type: ignore[attr-defined]
    other.isolation_level = None
    other.execute("BEGIN IMMEDIATE")
    running = asyncio.create_task(loop.run())
    try:
        with capture_logs() as logs:
            await eventually(
                lambda: any(e["event"] == "delivery.send_crashed" for e in logs),
                "a send that could not be recorded",
            )
        other.execute("ROLLBACK")

        async def all_sent() -> bool:
            return not await outbox(services, status="pending")

        await eventually(all_sent, "the row to be sent again")
    finally:
        other.close()
        loop.stop()
        await running
    assert len(sink.sent) == 2  # once before the failed round, once after
    assert {(c.delivery_id, c.message_id, c.chunk) for c in sink.sent} == {
        (sink.sent[0].delivery_id, message.message_id, 0)
    }


# --------------------------------------------------------------------------- overlapping rounds


class SlowSink(RecordingSink):
    """Holds every send until released, like a platform answering slowly."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def send(self, chunk: OutgoingChunk) -> SendResult:
        self.entered.set()
        await self.release.wait()
        return await super().send(chunk)


async def test_overlapping_rounds_never_send_a_row_twice(
    services: Services, clock: FakeClock
) -> None:
    """The loop's round and a final round at shutdown may overlap: a row that is mid-send in
    one must not be read as due by the other."""
    sink = SlowSink(clock)
    loop = make_loop(services, clock, sink)
    await put_answer(services, clock, "only once", [GUILD])
    first = asyncio.create_task(loop.deliver_due())
    await asyncio.wait_for(sink.entered.wait(), 10)  # the first round waits inside the sink
    second = asyncio.create_task(loop.deliver_due())
    await asyncio.sleep(0)  # the second round starts while the first is mid-send
    sink.release.set()
    assert await first is True
    assert await second is False  # it ran after the first: nothing was due any more
    assert [c.content for c in sink.sent] == ["only once"]


# --------------------------------------------------------------------------- pipelined sends


class GatedSink(RecordingSink):
    """Holds the sends to the chats in ``held`` until released; counts what is in flight."""

    def __init__(self, clock: FakeClock, held: Sequence[str] = ()) -> None:
        super().__init__(clock)
        self.gates = {chat: asyncio.Event() for chat in held}
        self.entered = {chat: asyncio.Event() for chat in held}
        self.in_flight: dict[str, int] = {}
        self.most_per_chat = 0
        self.most_at_once = 0
        self.changed = asyncio.Event()

    async def send(self, chunk: OutgoingChunk) -> SendResult:
        chat = chunk.chat_jid
        self.in_flight[chat] = self.in_flight.get(chat, 0) + 1
        self.most_per_chat = max(self.most_per_chat, self.in_flight[chat])
        self.most_at_once = max(self.most_at_once, sum(self.in_flight.values()))
        try:
            if chat in self.entered:
                self.entered[chat].set()
                await self.gates[chat].wait()
            else:
                await asyncio.sleep(0)  # a real send yields: others may start meanwhile
            return await super().send(chunk)
        finally:
            self.in_flight[chat] -= 1
            self.changed.set()

    def release(self, chat: str) -> None:
        self.gates[chat].set()


@contextlib.asynccontextmanager
async def running(loop: DeliveryLoop) -> AsyncIterator[None]:
    task = asyncio.create_task(loop.run(), name="test-delivery-loop")
    try:
        yield
    finally:
        loop.stop()
        await task


async def test_a_slow_chat_holds_only_its_own_rows(services: Services, clock: FakeClock) -> None:
    slow, quick = GUILD, "telegram:group/2"
    sink = GatedSink(clock, held=[slow])
    loop = make_loop(services, clock, sink)
    async with running(loop):
        await put_answer(services, clock, "first for the slow chat", [slow])
        await asyncio.wait_for(sink.entered[slow].wait(), 10)
        await put_answer(services, clock, "second for the slow chat", [slow])
        q1 = await put_answer(services, clock, "first for the quick chat", [quick])
        q2 = await put_answer(services, clock, "second for the quick chat", [quick])

        await eventually(lambda: len(sink.sent_to(quick)) == 2, "the quick chat's answers")
        assert sink.sent_to(slow) == []  # still held: the quick chat did not wait for it
        assert [c.message_id for c in sink.sent_to(quick)] == [q1.message_id, q2.message_id]
        sink.release(slow)
        await eventually(lambda: len(sink.sent_to(slow)) == 2, "the slow chat's answers")
    assert [c.content for c in sink.sent_to(slow)] == [
        "first for the slow chat",
        "second for the slow chat",
    ]
    assert sink.most_per_chat == 1
    assert await outbox(services, status="pending") == []


async def test_pipelined_sends_keep_each_chats_order_and_the_overall_bound(
    services: Services, clock: FakeClock
) -> None:
    chats = [f"telegram:group/{n}" for n in range(6)]
    sink = GatedSink(clock)
    loop = DeliveryLoop(
        store=services.store,
        sinks=SinkRouter(fallback=EventStreamSink(), by_platform={"telegram": sink}),
        catalog=services.catalog,
        defaults=services.defaults,
        signals=services.signals,
        clock=clock,
        settings=DeliverySettings(concurrency=2),
    )
    stored: dict[str, list[tuple[str, int]]] = {chat: [] for chat in chats}
    for round_ in range(3):
        for chat in chats:
            text = f"{round_} " + "word " * (1200 if round_ == 1 else 2)  # round 1: two chunks
            message = await put_answer(services, clock, text, [chat])
            rows = await outbox(services, message_id=message.message_id)
            stored[chat].extend((message.message_id, row.chunk) for row in rows)
    async with running(loop):
        total = sum(len(rows) for rows in stored.values())
        await eventually(lambda: len(sink.sent) == total, "every chunk")
    for chat in chats:
        assert [(c.message_id, c.chunk) for c in sink.sent_to(chat)] == stored[chat]
    assert sink.most_per_chat == 1
    assert sink.most_at_once <= 2
    assert len({(c.delivery_id) for c in sink.sent}) == total  # each row once


async def test_a_turn_logs_its_events_at_debug_only(
    services: Services, clock: FakeClock, sink: RecordingSink, workers: WorkerPool
) -> None:
    """Per-message events cost nothing at the default level: info is for start-up, shutdown,
    errors and the periodic summary."""
    await seed_spec_table(services)
    loop = make_loop(services, clock, sink)
    with capture_logs() as logs:
        async with running(loop):
            result = await services.ingest.ingest(inbound("telegram:group/5", "ping"))
            assert result.decision.job_id is not None
            await finished(services, result.decision.job_id)
            await asyncio.wait_for(sink.arrived.wait(), 20)
    levels = {e["event"]: e["log_level"] for e in logs}
    assert {"message.ingested", "turn.started", "turn.answered", "delivery.sent"} <= set(levels)
    assert set(levels.values()) == {"debug"}
