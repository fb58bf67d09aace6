"""The Matrix adapter through the real matrix-nio client against a fake homeserver that speaks
the client-server API (``fake_matrix``): inbound events become canonical messages, the sync
token advances only after ingest, invites, answers with HTML, threads and replies, the plain
fallback, rate limits, typing, ``doctor``'s check and the configuration's errors.

Ingest is the real one, over a SQLite file; the routing decisions it returns are asserted.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.matrix import MatrixChannel, MatrixError, build
from postroom.channels.matrix.events import strip_reply_fallback
from postroom.core import Trigger
from postroom.core.access import AccessPolicy, DmPolicy
from postroom.core.errors import ConfigError, InvalidInput
from postroom.core.folders import FolderDefaults
from postroom.core.messages import InboundMessage
from postroom.core.steering import normalize_topic
from postroom.engine import FolderSpec, IngestLimits, Services
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk
from postroom.engine.ingest import IngestResult
from postroom.store import SqliteStore

from fake_matrix import BOT, PASSWORD, TOKEN, FakeHomeserver, running

GROUP = "!group:fake.test"
DM = "!dm:fake.test"
ALICE = "@alice:fake.test"
BOB = "@bob:fake.test"
CAROL = "@carol:fake.test"
GROUP_JID = f"matrix:room/{GROUP}"
DM_JID = f"matrix:room/{DM}"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Harness:
    homeserver: FakeHomeserver
    services: Services
    channel: MatrixChannel
    received: list[InboundMessage] = field(default_factory=list)
    results: list[IngestResult] = field(default_factory=list)
    #: Exceptions to raise from the next inbound calls, in order (a failing store).
    failures: list[BaseException] = field(default_factory=list)

    #: Inbound calls that returned or raised (a message counts once ingest is done with it).
    handled: int = 0

    async def inbound(self, message: InboundMessage) -> IngestResult:
        self.received.append(message)
        try:
            if self.failures:
                raise self.failures.pop(0)
            result = await self.services.ingest.ingest(message)
            self.results.append(result)
            return result
        finally:
            self.handled += 1

    async def next_message(self, count: int = 1) -> list[InboundMessage]:
        """The next *count* messages, once ingest has committed (or refused) each of them."""
        start = len(self.received)
        await self.homeserver.wait_for(lambda: self.handled >= start + count)
        return self.received[start : start + count]

    def start(self, channel: MatrixChannel, *, image_bytes: int = 1024 * 1024) -> Awaitable[None]:
        return channel.start(
            ChannelContext(inbound=self.inbound, clock=_now, image_bytes=image_bytes)
        )


def section(homeserver: FakeHomeserver, **extra: Any) -> dict[str, Any]:
    return {
        "homeserver": homeserver.url,
        "user_id": BOT,
        "password": PASSWORD,
        "device_id": "POSTROOM1",
        "sync_timeout": "1s",
        **extra,
    }


async def open_services(tmp_path: Path) -> Services:
    store = await SqliteStore.open(tmp_path / "postroom.db")
    services = Services.build(
        store,
        folders_dir=tmp_path / "folders",
        trigger=Trigger(),
        defaults=FolderDefaults(),
        limits=IngestLimits(),
        clock=_now,
        # Adapter tests: every DM is answered (admission has tests of its own).
        access=AccessPolicy(dm_policy=DmPolicy.OPEN),
    )
    await services.folders.add_folder("main", FolderSpec(), actor="test")
    # ROUTING §5: in a group, answer only when called but keep the context.
    await services.routes.add_route(20, "platform=matrix verb=mention", "main", actor="test")
    await services.routes.add_route(30, "platform=matrix", "main#observe", actor="test")
    return services


@pytest.fixture
async def homeserver() -> AsyncIterator[FakeHomeserver]:
    fake = FakeHomeserver()
    fake.add_room(GROUP, {ALICE: "Alice", BOB: "Bob"})
    fake.add_room(DM, {CAROL: "Carol"})
    async with running(fake):
        yield fake


@pytest.fixture
async def harness(homeserver: FakeHomeserver, tmp_path: Path) -> AsyncIterator[Harness]:
    services = await open_services(tmp_path)
    channel = build(section(homeserver, allowed_inviters=[ALICE]))
    h = Harness(homeserver, services, channel)
    # Old history: the initial sync must not replay it as new input.
    homeserver.text(GROUP, ALICE, "said before postroom started")
    await h.start(channel)
    await homeserver.wait_for(lambda: len(homeserver.sync_sinces) >= 2)
    try:
        yield h
    finally:
        await channel.stop()
        await services.close()


def chunk(
    chat_jid: str = GROUP_JID,
    content: str = "hello",
    *,
    reply_to: str | None = None,
    topic: str = "",
    message_type: str = "assistant",
    delivery_id: int = 1,
) -> OutgoingChunk:
    return OutgoingChunk(
        delivery_id=delivery_id,
        message_id=f"answer-{delivery_id}",
        chat_jid=chat_jid,
        chunk=0,
        chunks=1,
        content=content,
        kind="reply",
        message_type=message_type,
        folder="main",
        topic=topic,
        reply_to=reply_to,
        attempt=1,
    )


# --------------------------------------------------------------------------- inbound


async def test_login_and_initial_sync_skip_old_history(harness: Harness) -> None:
    homeserver = harness.homeserver
    (login,) = homeserver.logins
    assert login["password"] == PASSWORD
    assert login["device_id"] == "POSTROOM1"
    assert homeserver.sync_sinces[0] is None  # the initial sync...
    assert homeserver.sync_sinces[1] == f"s{len(homeserver.log)}"  # ...then from its token
    assert harness.received == []  # the history before the start is not new input
    status = harness.channel.status()
    assert status.state == "connected"
    assert BOT in status.detail


async def test_group_message_becomes_canonical_fields(harness: Harness) -> None:
    event_id = harness.homeserver.text(GROUP, ALICE, "lunch anyone?")
    (message,) = await harness.next_message()
    assert message.id == event_id
    assert message.chat_jid == GROUP_JID
    assert message.sender == f"matrix:user/{ALICE}"
    assert message.sender_name == "Alice"
    assert message.content == "lunch anyone?"
    assert message.reply_to is None
    assert message.topic == ""
    assert not message.mentioned
    assert not message.is_dm
    assert not message.is_from_me
    assert message.timestamp.tzinfo is not None
    # Not a mention: the #observe row keeps it as context.
    await harness.homeserver.wait_for(lambda: len(harness.results) == 1)
    decision = harness.results[0].decision
    assert decision.action.value == "observe"
    assert decision.folder == "main"
    assert harness.channel.status().last_event_at is not None


async def test_direct_room_is_a_dm(harness: Harness) -> None:
    harness.homeserver.text(DM, CAROL, "hi there")
    (message,) = await harness.next_message()
    assert message.chat_jid == DM_JID
    assert message.sender == f"matrix:user/{CAROL}"
    assert message.sender_name == "Carol"
    assert message.is_dm


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ({"body": "can you help?", "m.mentions": {"user_ids": [BOT]}}, "m.mentions"),
        ({"body": "Postbot: can you help?"}, "display name"),
        ({"body": f"{BOT} can you help?"}, "mxid"),
        (
            {
                "body": "bot: can you help?",
                "format": "org.matrix.custom.html",
                "formatted_body": f'<a href="https://matrix.to/#/{BOT}">bot</a>: can you help?',
            },
            "pill",
        ),
    ],
)
async def test_a_mention_fires_with_verb_mention(
    harness: Harness, content: dict[str, Any], why: str
) -> None:
    harness.homeserver.post(GROUP, BOB, {"msgtype": "m.text", **content})
    (message,) = await harness.next_message()
    assert message.mentioned, why
    await harness.homeserver.wait_for(lambda: len(harness.results) == 1)
    decision = harness.results[0].decision
    assert decision.verb == "mention"
    assert decision.action.value == "fire"
    assert decision.layer.value == "route"
    assert decision.folder == "main"


async def test_reply_strips_the_fallback_and_sets_reply_to(harness: Harness) -> None:
    original = harness.homeserver.text(GROUP, BOB, "the plan is ready")
    reply = harness.homeserver.text(
        GROUP,
        ALICE,
        "> <@bob:fake.test> the plan is ready\n> second line\n\nlooks good",
        **{"m.relates_to": {"m.in_reply_to": {"event_id": original}}},
    )
    _, message = await harness.next_message(2)
    assert message.id == reply
    assert message.reply_to == original
    assert message.content == "looks good"
    assert message.topic == ""


async def test_thread_message_has_the_root_as_topic(harness: Harness) -> None:
    root = harness.homeserver.text(GROUP, BOB, "deploy thread")
    harness.homeserver.text(
        GROUP,
        ALICE,
        "in the thread",
        **{
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": root},
            }
        },
    )
    earlier = harness.homeserver.text(GROUP, BOB, "earlier in the thread")
    harness.homeserver.text(
        GROUP,
        ALICE,
        "a real reply inside the thread",
        **{
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": False,
                "m.in_reply_to": {"event_id": earlier},
            }
        },
    )
    _, threaded, _, replied = await harness.next_message(4)
    assert threaded.topic == root
    assert threaded.reply_to == root  # a fallback is not a reply: the thread's root is
    assert threaded.chat_jid == GROUP_JID  # the thread is not part of the chat
    assert replied.topic == root
    assert replied.reply_to == earlier
    await harness.homeserver.wait_for(lambda: len(harness.results) == 4)
    assert harness.results[1].decision.topic == normalize_topic(root)


async def test_edits_and_other_events_are_not_messages(harness: Harness) -> None:
    original = harness.homeserver.text(GROUP, ALICE, "typo")
    harness.homeserver.post(
        GROUP,
        ALICE,
        {
            "msgtype": "m.text",
            "body": "* fixed",
            "m.new_content": {"msgtype": "m.text", "body": "fixed"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": original},
        },
    )
    harness.homeserver.post(GROUP, ALICE, {"topic": "new topic"}, event_type="m.room.topic")
    harness.homeserver.post(GROUP, ALICE, {"algorithm": "x"}, event_type="m.room.encrypted")
    after = harness.homeserver.text(GROUP, ALICE, "after")
    await harness.homeserver.wait_for(lambda: any(m.id == after for m in harness.received))
    assert [m.content for m in harness.received] == ["typo", "after"]


async def test_own_echo_is_not_ingested(harness: Harness) -> None:
    result = await harness.channel.send(chunk(content="my own words"))
    assert result.platform_message_id == harness.homeserver.sent[0].event_id
    # The homeserver echoes the bot's event back through /sync; then a user writes.
    marker = harness.homeserver.text(GROUP, ALICE, "after the echo")
    (message,) = await harness.next_message()
    assert message.id == marker  # the echo never reached ingest
    rows = await harness.services.history.messages(chat_jid=GROUP_JID, after_seq=0, limit=10)
    assert [r.content for r in rows] == ["after the echo"]


async def test_image_and_voice_are_fetched_within_the_cap(
    homeserver: FakeHomeserver, tmp_path: Path
) -> None:
    services = await open_services(tmp_path)
    channel = build(section(homeserver))
    h = Harness(homeserver, services, channel)
    await h.start(channel, image_bytes=1000)
    await homeserver.wait_for(lambda: len(homeserver.sync_sinces) >= 2)
    try:
        homeserver.media["cat"] = (b"\x89PNG small", "image/png")
        homeserver.media["big"] = (b"x" * 5000, "image/png")
        homeserver.media["note"] = (b"OggS voice", "audio/ogg")
        homeserver.media["doc"] = (b"%PDF-1.7 minutes", "application/pdf")
        homeserver.post(
            GROUP,
            ALICE,
            {
                "msgtype": "m.image",
                "body": "look at this",
                "filename": "cat.png",
                "url": "mxc://fake.test/cat",
                "info": {"mimetype": "image/png", "size": 10},
            },
        )
        homeserver.post(
            GROUP,
            ALICE,
            {
                "msgtype": "m.image",
                "body": "big.png",
                "url": "mxc://fake.test/big",
                "info": {"mimetype": "image/png"},  # no size: the download is cut at the cap
            },
        )
        homeserver.post(
            GROUP,
            ALICE,
            {
                "msgtype": "m.audio",
                "body": "Voice message",
                "url": "mxc://fake.test/note",
                "info": {"mimetype": "audio/ogg", "size": 10},
                "org.matrix.msc3245.voice": {},
            },
        )
        homeserver.post(
            GROUP,
            ALICE,
            {
                "msgtype": "m.file",
                "body": "minutes.pdf",
                "filename": "minutes.pdf",
                "url": "mxc://fake.test/doc",
                "info": {"mimetype": "application/pdf", "size": 16},
            },
        )
        image, big, voice, document = await h.next_message(4)
        (attachment,) = image.attachments
        assert image.content == "look at this"  # a caption
        assert attachment.kind == "image"
        assert attachment.mime == "image/png"
        assert base64.b64decode(attachment.data) == b"\x89PNG small"
        assert big.content == "[Image: big.png]"
        assert big.attachments[0].data == ""  # over the cap: kept as its URL only
        assert big.attachments[0].url == "mxc://fake.test/big"
        assert voice.content == "[Voice message]"
        assert voice.attachments[0].kind == "voice"
        assert base64.b64decode(voice.attachments[0].data) == b"OggS voice"
        # A file, within the file cap, comes with its bytes (a PDF reaches the model).
        assert document.content == "[File: minutes.pdf]"
        (pdf,) = document.attachments
        assert (pdf.kind, pdf.mime, base64.b64decode(pdf.data)) == (
            "file",
            "application/pdf",
            b"%PDF-1.7 minutes",
        )
    finally:
        await channel.stop()
        await services.close()


async def test_invites_from_allowed_inviters_are_joined(harness: Harness) -> None:
    homeserver = harness.homeserver
    homeserver.invite("!stranger:fake.test", "@mallory:fake.test")
    homeserver.invite("!team:fake.test", ALICE)
    await homeserver.wait_for(lambda: "!team:fake.test" in homeserver.joins)
    assert "!stranger:fake.test" not in homeserver.joins
    homeserver.text("!team:fake.test", ALICE, "welcome")
    homeserver.text("!stranger:fake.test", "@mallory:fake.test", "psst")
    (message,) = await harness.next_message()
    assert message.chat_jid == "matrix:room/!team:fake.test"


async def test_the_token_advances_only_after_ingest(harness: Harness) -> None:
    homeserver = harness.homeserver
    harness.failures.append(OSError("database is locked"))
    event_id = homeserver.text(GROUP, ALICE, "important")
    since = f"s{len(homeserver.log) - 1}"
    await homeserver.wait_for(lambda: len(harness.results) == 1)
    # The failed batch was asked for again from the same token, then ingested once.
    assert homeserver.sync_sinces.count(since) >= 2
    assert [m.id for m in harness.received] == [event_id, event_id]
    assert harness.results[0].id == event_id
    assert harness.channel.status().last_error is not None
    await homeserver.wait_for(lambda: harness.channel.status().state == "connected")


async def test_refused_input_is_skipped_not_retried(harness: Harness) -> None:
    harness.failures.append(InvalidInput("The content is too long."))
    harness.homeserver.text(GROUP, ALICE, "refused")
    ok = harness.homeserver.text(GROUP, ALICE, "accepted")
    await harness.homeserver.wait_for(lambda: len(harness.results) == 1)
    assert harness.results[0].id == ok
    assert [m.content for m in harness.received] == ["refused", "accepted"]


# --------------------------------------------------------------------------- outbound


async def test_answer_is_html_with_a_plain_body_and_a_reply(harness: Harness) -> None:
    question = harness.homeserver.text(GROUP, ALICE, "format please")
    await harness.next_message()
    result = await harness.channel.send(
        chunk(content="**Done**, see `x`\n- one\n- two", reply_to=question)
    )
    (sent,) = harness.homeserver.sent
    assert result.platform_message_id == sent.event_id
    assert sent.room_id == GROUP
    content = sent.content
    assert content["msgtype"] == "m.text"
    assert content["body"] == "Done, see x\n• one\n• two"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == (
        "<p><strong>Done</strong>, see <code>x</code></p>\n<ul>\n<li>one</li>\n<li>two</li>\n</ul>"
    )
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": question}}


async def test_plain_text_has_no_html_and_notices_are_m_notice(harness: Harness) -> None:
    await harness.channel.send(chunk(content="just words", message_type="host"))
    (sent,) = harness.homeserver.sent
    assert sent.content["msgtype"] == "m.notice"
    assert "formatted_body" not in sent.content
    assert "m.relates_to" not in sent.content


async def test_answer_in_a_thread_goes_back_into_the_thread(harness: Harness) -> None:
    root = harness.homeserver.text(GROUP, BOB, "thread root", event_id="$RootEvent_AbC")
    asked = harness.homeserver.text(
        GROUP,
        ALICE,
        "question in thread",
        **{"m.relates_to": {"rel_type": "m.thread", "event_id": root, "is_falling_back": True}},
    )
    await harness.next_message(2)
    topic = normalize_topic(root)  # what the outbox holds: lowercase, no "$"
    assert topic == "rootevent_abc"
    await harness.channel.send(chunk(content="answer", topic=topic, reply_to=asked))
    await harness.channel.send(chunk(content="more", topic=topic, delivery_id=2))
    first, second = harness.homeserver.sent
    assert first.content["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": asked},
    }
    assert second.content["m.relates_to"]["event_id"] == root
    assert second.content["m.relates_to"]["is_falling_back"] is True
    # A topic that names no thread (a pinned topic) is not a thread.
    await harness.channel.send(chunk(content="pinned", topic="deploy", delivery_id=3))
    assert "m.relates_to" not in harness.homeserver.sent[2].content


async def test_thread_root_is_found_again_after_a_restart(harness: Harness, tmp_path: Path) -> None:
    root = harness.homeserver.text(GROUP, BOB, "root", event_id="$OldRoot_Q")
    asked = harness.homeserver.text(
        GROUP,
        ALICE,
        "asked before the restart",
        **{"m.relates_to": {"rel_type": "m.thread", "event_id": root, "is_falling_back": True}},
    )
    fresh = build(section(harness.homeserver))  # knows no thread
    await harness.start(fresh)
    try:
        await fresh.send(chunk(content="late answer", topic=normalize_topic(root), reply_to=asked))
    finally:
        await fresh.stop()
    assert harness.homeserver.event_requests == [(GROUP, asked)]
    assert harness.homeserver.sent[-1].content["m.relates_to"]["event_id"] == root


async def test_rejected_formatting_falls_back_to_plain_text(harness: Harness) -> None:
    harness.homeserver.reject_formatted = True
    result = await harness.channel.send(chunk(content="**bold** words"))
    (sent,) = harness.homeserver.sent
    assert "formatted_body" not in sent.content
    assert sent.content["body"] == "bold words"
    assert result.platform_message_id == sent.event_id


async def test_rate_limit_carries_retry_after(harness: Harness) -> None:
    harness.homeserver.rate_limits.append(1500)
    with pytest.raises(DeliveryFailed) as caught:
        await harness.channel.send(chunk())
    assert caught.value.retry_after == 1.5
    assert not caught.value.permanent
    assert harness.homeserver.sent == []  # nio did not sleep and retry by itself
    await harness.channel.send(chunk())
    assert len(harness.homeserver.sent) == 1


async def test_forbidden_room_is_permanent(harness: Harness) -> None:
    harness.homeserver.forbidden_rooms.add(GROUP)
    with pytest.raises(DeliveryFailed) as caught:
        await harness.channel.send(chunk())
    assert caught.value.permanent
    with pytest.raises(DeliveryFailed) as bad_chat:
        await harness.channel.send(chunk(chat_jid="telegram:user/1"))
    assert bad_chat.value.permanent


async def test_typing_starts_and_stops(harness: Harness) -> None:
    await harness.channel.typing(GROUP_JID, True)
    await harness.channel.typing(GROUP_JID, False)
    start, stop = harness.homeserver.typing
    assert start == (GROUP, BOT, {"typing": True, "timeout": 8000})
    assert stop[0] == GROUP
    assert stop[2]["typing"] is False


async def test_a_server_error_is_retried_and_refused_typing_is_harmless(
    harness: Harness,
) -> None:
    harness.homeserver.server_errors = 1
    with pytest.raises(DeliveryFailed, match="M_UNKNOWN") as caught:
        await harness.channel.send(chunk())
    assert not caught.value.permanent and caught.value.retry_after is None
    harness.homeserver.forbidden_rooms.add(GROUP)
    await harness.channel.typing(GROUP_JID, True)  # refused, logged, never raised
    assert harness.homeserver.typing[-1][0] == GROUP


async def test_emotes_are_marked_and_an_invite_that_cannot_be_joined_is_left(
    harness: Harness,
) -> None:
    homeserver = harness.homeserver
    homeserver.add_room("!locked:fake.test", {}, joined=False)
    homeserver.forbidden_rooms.add("!locked:fake.test")
    homeserver.invite("!locked:fake.test", ALICE)
    await homeserver.wait_for(lambda: "!locked:fake.test" in homeserver.joins)
    homeserver.post(GROUP, ALICE, {"msgtype": "m.emote", "body": "waves"})
    (message,) = await harness.next_message()
    assert message.content == "* waves"
    assert harness.channel.status().state == "connected"


async def test_a_revoked_token_makes_the_adapter_log_in_again(harness: Harness) -> None:
    homeserver = harness.homeserver
    assert len(homeserver.logins) == 1
    homeserver.token_valid = False
    await homeserver.wait_for(lambda: len(homeserver.logins) == 2)
    after = homeserver.text(GROUP, ALICE, "still there?")
    (message,) = await harness.next_message()
    assert message.id == after
    assert harness.channel.status().state == "connected"


# --------------------------------------------------------------------------- lifecycle


async def test_stop_leaves_no_task_behind(homeserver: FakeHomeserver, tmp_path: Path) -> None:
    services = await open_services(tmp_path)
    baseline = {t.get_name() for t in asyncio.all_tasks()}
    channel = build(section(homeserver, access_token=TOKEN, password=None))
    await Harness(homeserver, services, channel).start(channel)
    assert "matrix-sync" in {t.get_name() for t in asyncio.all_tasks()}
    assert homeserver.logins == []  # the access token is used as it is
    await homeserver.wait_for(lambda: channel.status().state == "connected")
    await channel.stop()
    await services.close()
    assert {t.get_name() for t in asyncio.all_tasks()} <= baseline
    assert channel.status().state == "stopped"


async def test_wrong_password_fails_the_start(homeserver: FakeHomeserver, tmp_path: Path) -> None:
    channel = build(section(homeserver, password="wrong"))
    services = await open_services(tmp_path)
    try:
        with pytest.raises(MatrixError, match="log in"):
            await Harness(homeserver, services, channel).start(channel)
        status = channel.status()
        assert status.state == "error"
        assert status.last_error is not None and "M_FORBIDDEN" in status.last_error
    finally:
        await channel.stop()
        await services.close()


async def test_an_unreachable_homeserver_is_retried(tmp_path: Path) -> None:
    fake = FakeHomeserver()
    channel = build(
        {"homeserver": "http://127.0.0.1:9", "user_id": BOT, "password": PASSWORD}
    )  # the discard port: nothing listens
    services = await open_services(tmp_path)
    try:
        await Harness(fake, services, channel).start(channel)
        assert channel.status().state == "error"
        with pytest.raises(DeliveryFailed):
            await channel.send(chunk())
        await channel.typing(GROUP_JID, True)  # best-effort: no error
    finally:
        await channel.stop()
        await services.close()


async def test_check_proves_the_credentials(homeserver: FakeHomeserver) -> None:
    detail = await build(section(homeserver)).check()
    assert BOT in detail
    assert homeserver.logins[-1].get("device_id") is None  # never the server's device
    assert homeserver.logouts == 1
    assert BOT in await build(section(homeserver, access_token=TOKEN, password=None)).check()
    with pytest.raises(MatrixError):
        await build(section(homeserver, access_token="nope", password=None)).check()
    with pytest.raises(MatrixError, match="unreachable"):
        await build({"homeserver": "http://127.0.0.1:9", "access_token": "x"}).check()


async def test_check_while_running_uses_the_session(harness: Harness) -> None:
    logins = len(harness.homeserver.logins)
    assert BOT in await harness.channel.check()
    assert len(harness.homeserver.logins) == logins


async def test_access_token_without_user_id_asks_whoami(
    homeserver: FakeHomeserver, tmp_path: Path
) -> None:
    services = await open_services(tmp_path)
    channel = build({"homeserver": homeserver.url, "access_token": TOKEN, "sync_timeout": "1s"})
    try:
        await Harness(homeserver, services, channel).start(channel)
        assert channel.user_id == BOT
    finally:
        await channel.stop()
        await services.close()


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"user_id": BOT, "password": "x"}, "homeserver"),
        ({"homeserver": "matrix.org", "access_token": "x"}, "homeserver"),
        ({"homeserver": "https://m.org"}, "password"),
        ({"homeserver": "https://m.org", "password": "x"}, "user_id"),
        (
            {"homeserver": "https://m.org", "password": "x", "access_token": "y", "user_id": BOT},
            "either",
        ),
        ({"homeserver": "https://m.org", "access_token": "x", "user_id": "bot"}, "user_id"),
        (
            {"homeserver": "https://m.org", "access_token": "x", "allowed_inviters": ["al"]},
            "allowed_inviters",
        ),
        ({"homeserver": "https://m.org", "access_token": "x", "token": "y"}, "'token'"),
        ({"homeserver": "https://m.org", "access_token": "x", "sync_timeout": 5}, "sync_timeout"),
    ],
)
def test_bad_configuration_names_the_key(config: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build(config)


def test_good_configuration() -> None:
    channel = build(
        {
            "homeserver": "https://matrix.example.org/",
            "access_token": "x",
            "allowed_inviters": ["*"],
            "sync_timeout": "10s",
        }
    )
    assert channel.config.base_url == "https://matrix.example.org"
    assert channel.config.accepts_invite_from("@anyone:x.org")
    assert channel.config.sync_timeout_s == 10
    assert channel.platforms == ("matrix",)


def test_reply_fallback_strips_only_a_quote_of_a_sender() -> None:
    assert strip_reply_fallback("> <@a:x> quoted\n\nanswer") == "answer"
    assert strip_reply_fallback("> * <@a:x> waves\n> more\n\nhi\n\nthere") == "hi\n\nthere"
    assert strip_reply_fallback("> a quote of my own\n\ntext") == "> a quote of my own\n\ntext"
