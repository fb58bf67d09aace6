"""Fake mail servers for the email adapter's tests, served in the test's event loop.

* :class:`FakeImap`: aioimaplib's ``MockImapServer``, taught the two searches the adapter sends
  that the mock lacks (``UNSEEN`` and ``HEADER Message-ID "<id>"``), to refuse a wrong password
  (the mock accepts any), and told to push ``EXISTS`` to every idling connection of the
  mailbox's user. ``FakeImap(idle=False)`` is a server without IDLE.
* :class:`FakeSmtp`: aiosmtpd's ``SMTP`` protocol with AUTH over plain TCP, recording every mail
  and refusing recipients on demand (``refuse("450 …")``).

Plus the engine the adapter talks to: a real SQLite store with a folder ``main`` and routes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from aioimaplib.imap_testing_server import ImapProtocol, Mail, MockImapServer
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from postroom.channels.http import EventStreamSink
from postroom.core import MessageType, Trigger
from postroom.core.access import AccessPolicy, DmPolicy
from postroom.core.folders import FolderDefaults
from postroom.core.messages import InboundMessage
from postroom.engine import FolderSpec, IngestLimits, IngestResult, Services
from postroom.engine.delivery import DeliveryLoop, DeliverySettings, Sink, SinkRouter
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.store import SqliteStore
from postroom.store.records import DeliveryRecord, NewMessage

BOT = "bot@example.org"
PASSWORD = "s3cret-pass"

_COMMAND = re.compile(
    rb"((DONE)|(?P<tag>\w+) (?P<cmd>[\w]+)([\w \.#@:\*\"\(\)\{\}\[\]\+\-\\%=<>$]+)?$)"
)


class _Protocol(ImapProtocol):
    #: The fake this connection belongs to (counts the searches it answers).
    fake: FakeImap | None = None

    def login(self, tag: str, *args: str) -> None:
        if len(args) < 2 or args[1].strip('"') != PASSWORD:
            self.send_tagged_line(tag, "NO [AUTHENTICATIONFAILED] Invalid credentials")
            return
        super().login(tag, *args)

    def data_received(self, data: bytes) -> None:
        if self.append_literal_command is not None:
            super().data_received(data)
            return
        for line in data.splitlines():
            if _COMMAND.match(line) is None:
                self.send_untagged_line(f"BAD Error in IMAP command : Unknown command ({line!r}).")
                continue
            words = line.decode().rstrip().split()
            if self.state != "IDLE":
                self.exec_command(words[0], words[1:])
            else:
                self.exec_command(None, words)

    def search(self, tag: str, *args: str) -> None:
        if self.fake is not None:
            self.fake.searches += 1
        words = list(args)
        by_uid = words[:1] == ["uid"]
        rest = words[1:] if by_uid else words
        if rest[:1] and rest[0].upper() == "CHARSET":
            rest = rest[2:]
        mailbox = self.server_state.get_mailbox_messages(self.user_login, self.user_mailbox)
        if [w.upper() for w in rest] == ["UNSEEN"]:
            found = [m for m in mailbox if "\\Seen" not in m.flags]
        elif len(rest) == 3 and rest[0].upper() == "HEADER":
            wanted = rest[2].strip('"')
            found = [m for m in mailbox if wanted in str(m.email.get(rest[1], ""))]
        else:
            super().search(tag, *args)
            return
        ids = " ".join(str(m.uid if by_uid else m.id) for m in found)
        self.send_untagged_line(f"SEARCH {ids}".rstrip())
        self.send_tagged_line(tag, "OK SEARCH completed")


class FakeImap(MockImapServer):
    def __init__(self, user: str = BOT, *, idle: bool = True) -> None:
        capabilities = "IDLE UIDPLUS MOVE ENABLE NAMESPACE" if idle else "UIDPLUS NAMESPACE"
        super().__init__(capabilities=capabilities, loop=asyncio.get_running_loop())
        self.user = user
        self.port = 0
        #: How many SEARCH commands were answered (each look at the folder).
        self.searches = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> FakeImap:
        def protocol() -> _Protocol:
            made = _Protocol(self._server_state, 0, self.capabilities, self.loop)
            made.fake = self
            self._connections.append(made)
            return made

        self._server = await self.loop.create_server(protocol, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for connection in self._connections:
            if connection.transport is not None:
                connection.transport.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def deliver(self, mail: EmailMessage) -> int:
        """Put *mail* in the user's INBOX; idling clients hear ``EXISTS`` at once."""
        uid: int = self._server_state.add_mail(self.user, Mail(mail), "INBOX")
        for connection in self._connections:
            if connection.user_login == self.user and connection.idle_tag:
                connection.send_untagged_line(f"{uid} EXISTS")
        return uid

    def flags(self, uid: int) -> list[str]:
        for mail in self._server_state.get_mailbox_messages(self.user, "INBOX") or []:
            if mail.uid == uid:
                return list(mail.flags)
        raise KeyError(uid)

    def seen(self, uid: int) -> bool:
        return "\\Seen" in self.flags(uid)

    def idling(self) -> bool:
        return any(c.user_login == self.user and c.idle_tag for c in self._connections)


class FakeSmtp:
    """Records what arrives; ``refuse`` makes the next RCPT commands fail with given replies."""

    def __init__(self, *, username: str = BOT, password: str = PASSWORD) -> None:
        self.mails: list[EmailMessage] = []
        self.recipients: list[list[str]] = []
        self.logins: list[str] = []
        self.arrived = asyncio.Event()
        self._refusals: list[str] = []
        self._credentials = (username, password)
        self._server: asyncio.Server | None = None
        self.port = 0

    def refuse(self, *replies: str) -> None:
        self._refusals.extend(replies)

    async def start(self) -> FakeSmtp:
        def protocol() -> SMTP:
            return SMTP(
                self,
                hostname="fake-smtp.test",
                authenticator=self._authenticate,
                auth_require_tls=False,
            )

        self._server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword):
            login = (data.login.decode(), data.password.decode())
            if login == self._credentials:
                self.logins.append(login[0])
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self._refusals:
            return self._refusals.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        self.mails.append(BytesParser(_class=EmailMessage, policy=policy.default).parsebytes(raw))
        self.recipients.append(list(envelope.rcpt_tos))
        self.arrived.set()
        return "250 OK queued"

    async def wait_for(self, count: int, *, timeout_s: float = 10.0) -> list[EmailMessage]:
        async with asyncio.timeout(timeout_s):
            while len(self.mails) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.mails


def mail(
    *,
    sender: str = "Alice Example <Alice@Example.org>",
    to: str = BOT,
    subject: str = "Hello",
    body: str = "hi there",
    message_id: str = "<m1@example.org>",
    in_reply_to: str | None = None,
    references: str | None = None,
    headers: dict[str, str] | None = None,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = message_id
    message["Date"] = "Mon, 05 Jan 2026 12:00:00 +0000"
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    if references:
        message["References"] = references
    for name, value in (headers or {}).items():
        message[name] = value
    message.set_content(body)
    return message


# --------------------------------------------------------------------------- the engine


class Inbound:
    """The ingest sink, recording what each call returned."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self.results: list[IngestResult] = []
        self.messages: list[InboundMessage] = []
        #: Exceptions to raise instead of ingesting, in order (a store that fails).
        self.failures: list[Exception] = []
        self.attempts = 0
        self._ingested = asyncio.Event()

    async def __call__(self, message: InboundMessage) -> IngestResult:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        result = await self._services.ingest.ingest(message)
        self.messages.append(message)
        self.results.append(result)
        self._ingested.set()
        return result

    async def wait_for(self, count: int, *, timeout_s: float = 10.0) -> list[IngestResult]:
        async with asyncio.timeout(timeout_s):
            while len(self.results) < count:
                self._ingested.clear()
                await self._ingested.wait()
        return self.results


async def open_engine(
    tmp_path: Path,
    clock: Callable[[], datetime],
    *,
    routes: tuple[tuple[int, str, str], ...] = ((9999, "", "main"),),
    content_bytes: int = 65536,
) -> Services:
    store = await SqliteStore.open(tmp_path / "postroom.db")
    services = Services.build(
        store,
        folders_dir=tmp_path / "folders",
        trigger=Trigger(),
        defaults=FolderDefaults(),
        limits=IngestLimits(content_bytes=content_bytes, missing_notice_s=3600),
        clock=clock,
        # Adapter tests: every DM is answered (admission has tests of its own).
        access=AccessPolicy(dm_policy=DmPolicy.OPEN),
    )
    await services.folders.add_folder("main", FolderSpec(), actor="test")
    for seq, match, target in routes:
        await services.routes.add_route(seq, match, target, actor="test")
    return services


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], *, timeout_s: float = 10.0, what: str = ""
) -> None:
    """Poll *check* until it holds (deadline, never a fixed sleep)."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.02)


def delivery_loop(
    services: Services, clock: Callable[[], datetime], sinks: dict[str, Sink]
) -> DeliveryLoop:
    """The real delivery loop over *sinks*; tests drive it round by round (``deliver_due``)."""
    return DeliveryLoop(
        store=services.store,
        sinks=SinkRouter(fallback=EventStreamSink(), by_platform=sinks),
        catalog=services.catalog,
        defaults=services.defaults,
        signals=services.signals,
        clock=clock,
        settings=DeliverySettings(backoff_base_s=2.0, ttl_s=3600.0),
    )


async def put_answer(
    services: Services,
    clock: Callable[[], datetime],
    content: str,
    chat_jid: str,
    *,
    reply_to: str | None,
    message_id: str,
    folder: str = "main",
) -> None:
    """Store an assistant answer in *chat_jid* and write its outbox rows, as a turn does."""
    message = OutboundMessage(
        message_id=message_id,
        message_chat_jid=chat_jid,
        message_type=MessageType.ASSISTANT.value,
        content=content,
        folder=folder,
        reply_to=reply_to,
    )
    async with services.store.write() as tx:
        await tx.insert_message(
            NewMessage(
                id=message_id,
                chat_jid=chat_jid,
                sender="bot",
                sender_name="Postroom",
                content=content,
                timestamp=clock(),
                message_type=MessageType.ASSISTANT,
                is_from_me=True,
                reply_to=reply_to,
                routed_to=folder,
            )
        )
        await write_outbox(
            tx, plan_deliveries(message, [chat_jid], kind=DeliveryKind.REPLY, now=clock())
        )


async def deliveries(services: Services, message_id: str) -> list[DeliveryRecord]:
    rows = await services.history.deliveries(message_id=message_id, limit=1000)
    return sorted(rows, key=lambda row: row.chunk)
