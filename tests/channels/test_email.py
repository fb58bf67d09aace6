"""The email adapter through aioimaplib and aiosmtplib against fake IMAP and SMTP servers
(fake_email.py) in the test's event loop, over a real SQLite engine.

Inbound mail is put in the fake mailbox and read by the adapter's own IMAP loop; answers are
written to the real outbox and sent by the real delivery loop, driven round by round.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postroom.channels.base import ChannelContext
from postroom.channels.email import EmailChannel, EmailUnavailable, build
from postroom.core.chunking import limit_for
from postroom.core.errors import ConfigError
from postroom.engine import Services
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk

from fake_email import (
    BOT,
    PASSWORD,
    FakeImap,
    FakeSmtp,
    Inbound,
    deliveries,
    delivery_loop,
    eventually,
    mail,
    open_engine,
    put_answer,
)
from fakeclock import FakeClock

ALICE = "email:address/alice@example.org"


def thread(root: str) -> str:
    return "email:thread/" + hashlib.sha256(root.encode()).hexdigest()[:16]


@pytest.fixture
async def imap() -> AsyncIterator[FakeImap]:
    server = await FakeImap().start()
    yield server
    await server.stop()


@pytest.fixture
async def smtp() -> AsyncIterator[FakeSmtp]:
    server = await FakeSmtp().start()
    yield server
    await server.stop()


@pytest.fixture
async def services(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    engine = await open_engine(tmp_path, clock)
    yield engine
    await engine.close()


def section(imap: FakeImap, smtp: FakeSmtp, **extra: Any) -> dict[str, Any]:
    return {
        "imap_host": "127.0.0.1",
        "imap_port": imap.port,
        "imap_ssl": False,
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp.port,
        "smtp_starttls": False,
        "username": BOT,
        "password": PASSWORD,
        "poll_interval": "300ms",
        **extra,
    }


@contextlib.asynccontextmanager
async def running(
    channel: EmailChannel, inbound: Inbound, clock: FakeClock, *, image_bytes: int = 1024
) -> AsyncIterator[EmailChannel]:
    await channel.start(ChannelContext(inbound=inbound, clock=clock, image_bytes=image_bytes))
    try:
        yield channel
    finally:
        await channel.stop()


def chunk_for(chat_jid: str, *, reply_to: str | None, content: str = "hello") -> OutgoingChunk:
    return OutgoingChunk(
        delivery_id=1,
        message_id="a1",
        chat_jid=chat_jid,
        chunk=0,
        chunks=1,
        content=content,
        kind="reply",
        message_type="assistant",
        folder="main",
        topic="",
        reply_to=reply_to,
        attempt=1,
    )


# --------------------------------------------------------------------------- inbound


async def test_a_mail_becomes_its_thread_chat_with_canonical_addresses_and_is_then_seen(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    async with running(build(section(imap, smtp)), inbound, clock) as channel:
        await eventually(imap.idling, what="the adapter idles when the server offers IDLE")
        first = imap.deliver(mail(body="Hi there,\nhow are you?\n"))
        (result,) = await inbound.wait_for(1)
        await eventually(lambda: imap.seen(first))
        assert channel.status().state == "connected"

        second = imap.deliver(
            mail(
                sender="Bob <bob@example.org>",
                to=f"{BOT}, carol@example.org",
                subject="Re: Hello",
                message_id="<m3@example.org>",
                in_reply_to="<m2@example.org>",
                references="<m1@example.org> <m2@example.org>",
                body=(
                    "Sounds good.\n\nOn Mon, 5 Jan 2026 at 12:00, Alice Example "
                    "<alice@example.org>\nwrote:\n> Hi there,\n> how are you?\n"
                ),
            )
        )
        await inbound.wait_for(2)
        await eventually(lambda: imap.seen(second))

    one, two = inbound.messages
    assert one.id == "<m1@example.org>"
    assert one.chat_jid == thread("<m1@example.org>")
    assert one.sender == ALICE
    assert one.sender_name == "Alice Example"
    assert one.content == "Hi there,\nhow are you?"
    assert one.reply_to is None
    assert one.is_dm and not one.mentioned and not one.is_from_me
    assert one.metadata["email"]["subject"] == "Hello"
    assert result.decision.action.value == "fire"
    assert result.decision.verb == "message"

    # A reply joins the thread of the first Message-ID in References, whoever wrote it.
    assert two.chat_jid == one.chat_jid
    assert two.sender == "email:address/bob@example.org"
    assert two.reply_to == "<m2@example.org>"
    assert two.content == "Sounds good."  # the quoted history is cut
    assert not two.is_dm  # carol was addressed too
    assert two.metadata["email"]["subject"] == "Re: Hello"
    async with services.store.read() as tx:
        stored = await tx.get_message("<m3@example.org>", one.chat_jid)
    assert stored is not None and stored.sender == "email:address/bob@example.org"


async def test_a_thread_without_references_is_rooted_at_in_reply_to(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock):
        imap.deliver(mail(message_id="<r2@x.test>", in_reply_to="<r1@x.test>", body="> old\nnew"))
        await inbound.wait_for(1)
    (message,) = inbound.messages
    assert message.chat_jid == thread("<r1@x.test>")
    assert message.reply_to == "<r1@x.test>"
    assert message.content == "new"


async def test_senders_outside_allowed_senders_or_failing_dkim_or_spf_are_untrusted(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    config = section(imap, smtp, imap_idle=False, allowed_senders=["example.org", "eve@evil.test"])
    async with running(build(config), inbound, clock):
        imap.deliver(mail(message_id="<t1@x>"))
        imap.deliver(mail(sender="mallory@evil.test", message_id="<t2@x>"))
        imap.deliver(mail(sender="eve@evil.test", message_id="<t3@x>"))
        imap.deliver(
            mail(
                sender="bob@sub.example.org",
                message_id="<t4@x>",
                headers={
                    "Authentication-Results": (
                        "mx.example.org; dkim=fail header.d=example.org; spf=softfail"
                    )
                },
            )
        )
        results = await inbound.wait_for(4)
    verbs = {r.id: r.decision.verb for r in results}
    assert verbs == {
        "<t1@x>": "message",
        "<t2@x>": "untrusted",
        "<t3@x>": "message",
        "<t4@x>": "untrusted",
    }
    by_id = {m.id: m for m in inbound.messages}
    assert by_id["<t2@x>"].metadata["untrusted"] == ["mallory@evil.test is not in allowed_senders"]
    assert by_id["<t4@x>"].metadata["untrusted"] == ["dkim=fail"]  # softfail is not fail
    async with services.store.read() as tx:
        stored = await tx.get_message("<t2@x>", thread("<t2@x>"))
    assert stored is not None and stored.verb == "untrusted"


async def test_the_bots_own_mail_is_not_ingested_and_refused_mail_is_skipped(
    imap: FakeImap, smtp: FakeSmtp, tmp_path: Path, clock: FakeClock
) -> None:
    services = await open_engine(tmp_path, clock, content_bytes=64)
    inbound = Inbound(services)
    try:
        async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock):
            own = imap.deliver(mail(sender=f"Postroom <{BOT}>", message_id="<own@x>"))
            big = imap.deliver(mail(message_id="<big@x>", body="x" * 500))
            fine = imap.deliver(mail(message_id="<fine@x>", body="short"))
            await inbound.wait_for(1)
            await eventually(lambda: all(imap.seen(uid) for uid in (own, big, fine)))
        assert [m.id for m in inbound.messages] == ["<fine@x>"]
        async with services.store.read() as tx:
            assert await tx.get_message("<own@x>", thread("<own@x>")) is None
            assert await tx.get_message("<big@x>", thread("<big@x>")) is None
    finally:
        await services.close()


async def test_images_and_voice_notes_come_inline_within_the_cap(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100
    huge = b"\x89PNG\r\n\x1a\n" + b"\x01" * 5000
    ogg = b"OggS" + b"\x02" * 200
    with_image = mail(message_id="<img@x>", body="look at this")
    with_image.add_attachment(png, maintype="image", subtype="png", filename="cat.png")
    with_image.add_attachment(huge, maintype="image", subtype="png", filename="big.png")
    with_image.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="a.pdf")
    voice = mail(message_id="<voice@x>", body="")
    voice.add_attachment(ogg, maintype="audio", subtype="ogg", filename="note.ogg")
    inbound = Inbound(services)
    async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock):
        imap.deliver(with_image)
        imap.deliver(voice)
        await inbound.wait_for(2)
    image_mail, voice_mail = inbound.messages
    cat, big, pdf = image_mail.attachments
    assert (cat.kind, cat.mime, cat.name, cat.size) == ("image", "image/png", "cat.png", len(png))
    assert base64.b64decode(cat.data) == png
    assert (big.kind, big.size, big.data) == ("image", len(huge), "")  # over the 1 KiB cap
    assert (pdf.kind, pdf.name, base64.b64decode(pdf.data)) == ("file", "a.pdf", b"%PDF-1.4")
    assert image_mail.content == "look at this"
    (note,) = voice_mail.attachments
    assert (note.kind, note.mime) == ("voice", "audio/ogg")
    assert base64.b64decode(note.data) == ogg
    assert voice_mail.content == "[Voice message]"


async def test_a_failed_ingest_leaves_the_mail_unseen_until_it_is_committed(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    inbound.failures.append(sqlite3.OperationalError("database is locked"))
    async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock) as channel:
        uid = imap.deliver(mail())
        await eventually(lambda: channel.status().state == "error")
        assert not imap.seen(uid)  # not acknowledged: the store never committed it
        assert "database is locked" in (channel.status().last_error or "")
        await inbound.wait_for(1)  # the loop reconnects after its back-off and reads it again
        await eventually(lambda: imap.seen(uid))
        await eventually(lambda: channel.status().state == "connected")
    assert inbound.attempts == 2
    assert [m.id for m in inbound.messages] == ["<m1@example.org>"]


async def test_a_refused_imap_login_is_reported_and_nothing_is_read(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    uid = imap.deliver(mail())
    channel = build(section(imap, smtp, password="wrong-password"))
    async with running(channel, inbound, clock):
        await eventually(lambda: channel.status().state == "error")
    error = channel.status().last_error or ""
    assert "LOGIN" in error and "AUTHENTICATIONFAILED" in error
    assert inbound.attempts == 0 and not imap.seen(uid)


async def test_without_idle_on_the_server_the_folder_is_polled(
    smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    server = await FakeImap(idle=False).start()
    inbound = Inbound(services)
    try:
        async with running(build(section(server, smtp)), inbound, clock):
            # Looked at the folder once and is waiting: no IDLE to wait in.
            await eventually(lambda: server.searches >= 1)
            uid = server.deliver(mail())
            await inbound.wait_for(1)
            await eventually(lambda: server.seen(uid))
            assert not server.idling()
    finally:
        await server.stop()


async def test_a_mail_without_sender_is_skipped_and_html_mail_is_read_as_text(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    nobody = mail(message_id="<nobody@x>")
    del nobody["From"]
    html = mail(message_id="<html@x>", subject="")
    html.set_content(
        "<html><head><title>t</title></head><body><p>Hello <b>there</b></p>"
        "<ul><li>one</li><li>two</li></ul><script>ignored()</script></body></html>",
        subtype="html",
    )
    inbound = Inbound(services)
    channel = build(section(imap, smtp, imap_idle=False))
    async with running(channel, inbound, clock):
        skipped = imap.deliver(nobody)
        imap.deliver(html)
        await inbound.wait_for(1)
        await eventually(lambda: imap.seen(skipped))
        await channel.send(chunk_for(thread("<html@x>"), reply_to="<html@x>"))
        (sent,) = await smtp.wait_for(1)
    (message,) = inbound.messages
    assert message.content == "Hello there\n\none\n\ntwo"  # blocks on their own lines
    assert sent["Subject"] == "Re: (no subject)"


async def test_answers_thread_in_their_own_chat_and_keep_references_short(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    ancestry = " ".join(f"<a{n}@x>" for n in range(30))
    inbound = Inbound(services)
    channel = build(section(imap, smtp, imap_idle=False))
    async with running(channel, inbound, clock):
        imap.deliver(mail(message_id="<m1@example.org>"))
        imap.deliver(mail(message_id="<deep@x>", in_reply_to="<a29@x>", references=ancestry))
        await inbound.wait_for(2)
        # A mirror copy names a reply_to of another chat: it answers this chat's own thread.
        await channel.send(chunk_for(thread("<a0@x>"), reply_to="<m1@example.org>"))
        (sent,) = await smtp.wait_for(1)
    assert sent["In-Reply-To"] == "<deep@x>"
    references = sent["References"].split()
    assert len(references) == 20
    assert references[0] == "<a0@x>" and references[-1] == "<deep@x>"


async def test_an_smtp_login_refused_at_send_time_is_retried_later(
    imap: FakeImap, services: Services, clock: FakeClock
) -> None:
    other = await FakeSmtp(password="another-password").start()
    inbound = Inbound(services)
    channel = build(section(imap, other, imap_idle=False))
    try:
        async with running(channel, inbound, clock):
            imap.deliver(mail())
            await inbound.wait_for(1)
            with pytest.raises(DeliveryFailed, match="535") as refused:
                await channel.send(chunk_for(thread("<m1@example.org>"), reply_to=None))
        assert not refused.value.permanent  # a login problem an operator can still fix
    finally:
        await other.stop()


# --------------------------------------------------------------------------- outbound


async def test_an_answer_is_a_threaded_plain_text_reply_and_a_reply_to_it_follows_the_chain(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    channel = build(section(imap, smtp, imap_idle=False))
    loop = delivery_loop(services, clock, {"email": channel})
    chat = thread("<m1@example.org>")
    async with running(channel, inbound, clock):
        imap.deliver(mail(sender="Alice <alice@example.org>", headers={"Reply-To": "a@x.test"}))
        await inbound.wait_for(1)
        await put_answer(
            services,
            clock,
            "**Sure** — see [the docs](https://docs.test/a).",
            chat,
            reply_to="<m1@example.org>",
            message_id="answer-1",
        )
        assert await loop.deliver_due()
        (sent,) = await smtp.wait_for(1)
        assert smtp.logins == [BOT]
        assert smtp.recipients == [["a@x.test"]]  # Reply-To wins over From
        assert sent["To"] == "a@x.test"
        assert BOT in str(sent["From"])
        assert sent["Subject"] == "Re: Hello"
        assert sent["In-Reply-To"] == "<m1@example.org>"
        assert sent["References"] == "<m1@example.org>"
        assert sent["Auto-Submitted"] == "auto-replied"
        assert sent.get_content_type() == "text/plain"
        # Markdown rendered as plain text (the email style).
        assert sent.get_content().strip() == "Sure — see the docs (https://docs.test/a)."
        sent_id = str(sent["Message-ID"])
        (row,) = await deliveries(services, "answer-1")
        assert (row.status, row.platform_message_id) == ("sent", sent_id)

        # Alice answers the bot's mail: the reply chain leads back to the folder that answered.
        imap.deliver(
            mail(
                sender="Alice <alice@example.org>",
                subject="Re: Hello",
                message_id="<m2@example.org>",
                in_reply_to=sent_id,
                references=f"<m1@example.org> {sent_id}",
                body="Thanks!",
            )
        )
        results = await inbound.wait_for(2)
    assert inbound.messages[1].chat_jid == chat
    assert inbound.messages[1].reply_to == sent_id
    assert results[1].decision.layer.value == "reply_chain"
    assert results[1].decision.verb == "mention"  # it replies to a message the gateway sent
    assert results[1].decision.folder == "main"


async def test_a_long_answer_goes_in_chunks_each_threaded_under_the_previous(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    channel = build(section(imap, smtp, imap_idle=False))
    loop = delivery_loop(services, clock, {"email": channel})
    chat = thread("<m1@example.org>")
    paragraph = "word " * 199 + "end."
    text = "\n\n".join(f"{n}: {paragraph}" for n in range(110))
    assert len(text) > limit_for("email")
    async with running(channel, inbound, clock):
        imap.deliver(mail())
        await inbound.wait_for(1)
        await put_answer(
            services, clock, text, chat, reply_to="<m1@example.org>", message_id="long-1"
        )
        while await loop.deliver_due():
            pass
        first, second = await smtp.wait_for(2)
    assert len(first.get_content()) <= limit_for("email") + 1
    assert first["In-Reply-To"] == "<m1@example.org>"
    assert second["In-Reply-To"] == first["Message-ID"]
    # Compared token by token: how the header folds depends on the length of the generated id.
    assert second["References"].split() == ["<m1@example.org>", first["Message-ID"]]
    assert second["Subject"] == "Re: Hello"
    assert [row.status for row in await deliveries(services, "long-1")] == ["sent", "sent"]


async def test_smtp_4xx_is_retried_after_backoff_and_a_5xx_recipient_is_abandoned(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    channel = build(section(imap, smtp, imap_idle=False))
    loop = delivery_loop(services, clock, {"email": channel})
    chat = thread("<m1@example.org>")
    async with running(channel, inbound, clock):
        imap.deliver(mail())
        await inbound.wait_for(1)
        smtp.refuse("450 4.2.1 Mailbox busy, try again later")
        await put_answer(services, clock, "one", chat, reply_to="<m1@example.org>", message_id="a")
        await loop.deliver_due()
        (row,) = await deliveries(services, "a")
        assert (row.status, row.attempts) == ("pending", 1)
        assert row.last_error is not None and "450" in row.last_error
        assert not smtp.mails
        assert not await loop.deliver_due()  # not before the backoff
        clock.advance(seconds=2)
        assert await loop.deliver_due()
        await smtp.wait_for(1)
        (row,) = await deliveries(services, "a")
        assert row.status == "sent"

        smtp.refuse("550 5.1.1 No such user")
        await put_answer(services, clock, "two", chat, reply_to="<m1@example.org>", message_id="b")
        await loop.deliver_due()
        (row,) = await deliveries(services, "b")
        assert row.status == "abandoned"
        assert row.last_error is not None and "550" in row.last_error
    assert len(smtp.mails) == 1


async def test_after_a_restart_the_thread_is_looked_up_in_the_mailbox(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock):
        imap.deliver(mail(sender="Alice <alice@example.org>", subject="Invoice"))
        await inbound.wait_for(1)
    fresh = build(section(imap, smtp, imap_idle=False))  # remembers nothing
    async with running(fresh, inbound, clock):
        chat = thread("<m1@example.org>")
        result = await fresh.send(chunk_for(chat, reply_to="<m1@example.org>"))
        (sent,) = await smtp.wait_for(1)
        assert result.platform_message_id == sent["Message-ID"]
        assert (sent["To"], sent["Subject"]) == ("alice@example.org", "Re: Invoice")
        with pytest.raises(DeliveryFailed) as refused:
            await fresh.send(chunk_for(thread("<unknown@x>"), reply_to=None))
        assert refused.value.permanent


async def test_typing_is_a_no_op(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    inbound = Inbound(services)
    async with running(build(section(imap, smtp, imap_idle=False)), inbound, clock) as channel:
        await channel.typing(thread("<m1@example.org>"), True)
        await channel.typing(thread("<m1@example.org>"), False)
    assert smtp.mails == [] and smtp.logins == []


async def test_check_logs_in_to_both_servers(
    imap: FakeImap, smtp: FakeSmtp, services: Services, clock: FakeClock
) -> None:
    channel = build(section(imap, smtp))
    assert "logged in" in await channel.check()
    assert smtp.logins == [BOT]
    wrong = build(section(imap, smtp, password="wrong-password"))
    with pytest.raises(EmailUnavailable, match="refused LOGIN"):
        await wrong.check()
    closed = build({**section(imap, smtp), "imap_port": await free_port()})
    with pytest.raises(EmailUnavailable, match=r"IMAP 127\.0\.0\.1"):
        await closed.check()
    other = await FakeSmtp(password="another-password").start()
    try:
        with pytest.raises(EmailUnavailable, match=r"SMTP 127\.0\.0\.1"):
            await build(section(imap, other)).check()
    finally:
        await other.stop()


async def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"password": None}, "password is required"),
        ({"imap_host": None}, "imap_host is required"),
        ({"token": "x"}, "Unknown key 'token'"),
        ({"poll_interval": "soon"}, "poll_interval"),
        ({"smtp_port": 70000}, "smtp_port"),
        ({"username": "bot", "address": None}, "address is required"),
        ({"address": "bot"}, "address must be an e-mail address"),
    ],
)
def test_configuration_errors_name_the_key(change: dict[str, Any], words: str) -> None:
    config: dict[str, Any] = {
        "imap_host": "imap.example.org",
        "smtp_host": "smtp.example.org",
        "username": BOT,
        "password": PASSWORD,
    }
    for key, value in change.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    with pytest.raises(ConfigError, match=words) as raised:
        build(config)
    assert str(raised.value).endswith(".")


def test_configuration_defaults() -> None:
    channel = build(
        {"imap_host": "h", "smtp_host": "s", "username": "Bot@Example.org", "password": "p"}
    )
    config = channel.config
    assert (config.imap_port, config.imap_ssl, config.smtp_port, config.smtp_starttls) == (
        993,
        True,
        587,
        True,
    )
    assert (config.address, config.folder, config.poll_interval_s) == (
        "bot@example.org",
        "INBOX",
        30.0,
    )
    assert config.allowed_senders == ()
