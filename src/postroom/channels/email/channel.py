"""E-mail through IMAP (inbound) and SMTP (outbound).

Inbound: a task polls the folder for ``UNSEEN`` mail (waiting with IMAP IDLE between rounds when
the server offers it), fetches each message with ``BODY.PEEK[]`` (which leaves it unread),
hands it to ingest and only then sets ``\\Seen`` — a crash in between redelivers the mail, and
ingest's dedupe on the Message-ID makes that harmless. A mail ingest refuses (too large, bad
input) or that does not parse is logged and marked seen too, so it is not fetched forever; when
the store itself fails, the mail stays unseen and the loop reconnects after a back-off.

Outbound: each chunk is one plain-text mail answering the message it replies to, with
``In-Reply-To``/``References`` and ``Re: <subject>``, to that message's Reply-To (else From).
Where the thread stands is remembered per chat and per Message-ID in bounded in-memory maps;
after a restart a reply to a known Message-ID is threaded by looking that message up over IMAP.
SMTP 4xx answers are retried by the delivery loop; a 5xx refusal of the recipient or of the
message is permanent. The sent Message-ID is the platform id, so a reply to it follows the
reply chain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from email.message import EmailMessage
from email.utils import format_datetime, formataddr, make_msgid
from typing import Any

import aioimaplib  # type: ignore[import-untyped]  # ships no type information
import aiosmtplib
import structlog

from postroom.channels.base import BaseChannel
from postroom.channels.email.config import EmailConfig, parse_config
from postroom.channels.email.parse import ThreadPoint, message_ids, parse_email
from postroom.channels.recent import Recent
from postroom.core.errors import InvalidInput, PostroomError
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["EmailChannel", "EmailUnavailable", "build"]

log = structlog.get_logger(__name__)

IMAP_TIMEOUT_S = 15.0
SMTP_TIMEOUT_S = 30.0
MAX_BACKOFF_S = 300.0
STOP_GRACE_S = 5.0
#: How many threads and Message-IDs are remembered for threading answers.
MEMORY = 4096
#: ``References`` keeps the root and the most recent ids (RFC 5322 §3.6.4 allows trimming).
MAX_REFERENCES = 20

_IMAP_ERRORS = (aioimaplib.AioImapException, OSError, TimeoutError)


class EmailUnavailable(PostroomError):
    """The IMAP or SMTP server refused us or could not be reached."""


class _IngestFailed(PostroomError):
    """Ingest failed for a reason other than the mail itself: leave it unseen, try again."""


def build(section: Mapping[str, Any]) -> EmailChannel:
    return EmailChannel(parse_config(section))


def reply_subject(subject: str) -> str:
    subject = subject.strip()
    if not subject:
        return "Re: (no subject)"
    return subject if subject.lower().startswith("re:") else f"Re: {subject}"


def _check(response: Any, what: str) -> None:
    if response.result != "OK":
        detail = b" ".join(bytes(line) for line in response.lines).decode("utf-8", "replace")
        raise EmailUnavailable(f"The IMAP server refused {what}: {detail.strip()}.")


def _uids(response: Any) -> list[str]:
    """UIDs of a SEARCH answer (the last line is the tagged completion)."""
    found: list[str] = []
    for line in response.lines[:-1]:
        found.extend(t for t in bytes(line).decode("ascii", "replace").split() if t.isdigit())
    return found


def _literal(response: Any) -> bytes | None:
    """The message of a FETCH answer: its one literal."""
    for line in response.lines:
        if isinstance(line, bytearray):
            return bytes(line)
    return None


class EmailChannel(BaseChannel):
    name = "email"
    platforms = ("email",)
    format_style = "plain"

    def __init__(self, config: EmailConfig) -> None:
        super().__init__()
        self._config = config
        self._task: asyncio.Task[None] | None = None
        self._by_chat: Recent[str, ThreadPoint] = Recent(MEMORY)
        self._by_message: Recent[str, ThreadPoint] = Recent(MEMORY)

    @property
    def config(self) -> EmailConfig:
        return self._config

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def single_connection(self) -> bool:
        # One IMAP reader per mailbox: several would fetch and flag the same mail.
        return True

    async def do_start(self) -> None:
        if self.listening:
            await self.do_listen()

    async def do_listen(self) -> None:
        self._task = asyncio.create_task(self._run(), name="email-imap")
        self._task.add_done_callback(self._ended)

    async def do_unlisten(self) -> None:
        await self.do_stop()

    async def do_stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, STOP_GRACE_S)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failed(task.exception() or "the IMAP loop ended")

    async def do_check(self) -> str:
        try:
            async with self._imap():
                pass
        except _IMAP_ERRORS as exc:
            raise EmailUnavailable(f"IMAP {self._config.imap_host}: {exc!r}.") from exc
        try:
            async with self._smtp():
                pass
        except aiosmtplib.SMTPException as exc:
            raise EmailUnavailable(f"SMTP {self._config.smtp_host}: {exc}.") from exc
        return (
            f"IMAP {self._config.imap_host}: logged in as {self._config.username}, "
            f"{self._config.folder} selected; SMTP {self._config.smtp_host}: logged in"
        )

    # -- IMAP --------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _imap(self) -> AsyncIterator[Any]:
        """A logged-in IMAP connection with the folder selected, closed on exit."""
        kind = aioimaplib.IMAP4_SSL if self._config.imap_ssl else aioimaplib.IMAP4
        client = kind(
            host=self._config.imap_host, port=self._config.imap_port, timeout=IMAP_TIMEOUT_S
        )
        try:
            await client.wait_hello_from_server()
            _check(await client.login(self._config.username, self._config.password), "LOGIN")
            _check(await client.select(self._config.folder), f"SELECT {self._config.folder}")
            yield client
        finally:
            await _close(client)

    async def _run(self) -> None:
        backoff_s = 1.0
        while True:
            try:
                async with self._imap() as client:
                    self.connected(f"{self._config.address} on {self._config.imap_host}")
                    backoff_s = 1.0
                    while True:
                        await self._fetch_unseen(client)
                        await self._wait_for_mail(client)
            except (*_IMAP_ERRORS, PostroomError) as exc:
                # Mail not yet marked seen is fetched again after the reconnect.
                self.failed(exc)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    async def _fetch_unseen(self, client: Any) -> None:
        search = await client.uid_search("UNSEEN", charset=None)
        _check(search, "SEARCH UNSEEN")
        for uid in _uids(search):
            fetched = await client.uid("fetch", uid, "(BODY.PEEK[])")
            _check(fetched, f"FETCH {uid}")
            raw = _literal(fetched)
            if raw is not None:
                await self._ingest(raw, uid)
            _check(await client.uid("store", uid, "+FLAGS", "(\\Seen)"), f"STORE {uid}")

    async def _ingest(self, raw: bytes, uid: str) -> None:
        try:
            message, point = parse_email(
                raw,
                bot_address=self._config.address,
                allowed_senders=self._config.allowed_senders,
                image_bytes=self.context.image_bytes,
                file_bytes=self.context.file_bytes,
                now=self.context.clock(),
            )
        except ValueError as exc:
            log.warning("email.unreadable", uid=uid, error=str(exc))
            return
        if not message.is_from_me:
            self._by_message.put(point.message_id, point)
            self._by_chat.put(point.chat_jid, point)
        try:
            await self.receive(message)
        except InvalidInput as exc:
            log.warning("email.refused", uid=uid, message_id=message.id, error=str(exc))
        except Exception as exc:
            # The store failed, not the mail: it stays unseen and comes again after the
            # reconnect (ingest drops a copy it already committed).
            raise _IngestFailed(f"ingest failed for {message.id}: {exc!r}") from exc

    async def _wait_for_mail(self, client: Any) -> None:
        wait_s = self._config.poll_interval_s
        if not (self._config.imap_idle and client.has_capability("IDLE")):
            await asyncio.sleep(wait_s)
            return
        idle = await client.idle_start(timeout=wait_s)
        try:
            await client.wait_server_push(timeout=wait_s + IMAP_TIMEOUT_S)
        finally:
            client.idle_done()
            await asyncio.wait_for(idle, IMAP_TIMEOUT_S)

    async def _look_up(self, message_id: str) -> ThreadPoint | None:
        """Where a message we no longer remember stands, read back from the mailbox."""
        try:
            async with self._imap() as client:
                search = await client.uid_search(
                    "HEADER", "Message-ID", f'"{message_id}"', charset=None
                )
                _check(search, "SEARCH HEADER Message-ID")
                uids = _uids(search)
                if not uids:
                    return None
                fetched = await client.uid("fetch", uids[-1], "(BODY.PEEK[])")
                _check(fetched, f"FETCH {uids[-1]}")
                raw = _literal(fetched)
        except (*_IMAP_ERRORS, EmailUnavailable) as exc:
            raise DeliveryFailed(f"cannot look up {message_id} over IMAP: {exc!r}") from exc
        if raw is None:
            return None
        try:
            _, point = parse_email(
                raw,
                bot_address=self._config.address,
                allowed_senders=(),
                image_bytes=0,
                now=self.context.clock(),
            )
        except ValueError:
            return None
        return point if point.message_id == message_id else None

    # -- SMTP --------------------------------------------------------------------------------
    def _smtp(self) -> aiosmtplib.SMTP:
        implicit = self._config.smtp_implicit_tls
        return aiosmtplib.SMTP(
            hostname=self._config.smtp_host,
            port=self._config.smtp_port,
            username=self._config.username,
            password=self._config.password,
            use_tls=implicit,
            start_tls=self._config.smtp_starttls and not implicit,
            timeout=SMTP_TIMEOUT_S,
        )

    async def _point_for(self, chunk: OutgoingChunk) -> ThreadPoint:
        point: ThreadPoint | None = None
        if chunk.reply_to:
            point = self._by_message.get(chunk.reply_to)
            if point is None and message_ids(chunk.reply_to) == [chunk.reply_to]:
                point = await self._look_up(chunk.reply_to)
            if point is not None and point.chat_jid != chunk.chat_jid:
                point = None  # a mirror copy: the id belongs to another chat
        point = point or self._by_chat.get(chunk.chat_jid)
        if point is None:
            raise DeliveryFailed(
                f"no known correspondent for {chunk.chat_jid}: no mail of this thread was "
                "received since the start and the message it answers is not in the mailbox",
                permanent=True,
            )
        return point

    def _compose(self, point: ThreadPoint, text: str) -> EmailMessage:
        domain = self._config.address.rpartition("@")[2]
        references = [*point.references, point.message_id]
        if len(references) > MAX_REFERENCES:
            references = [references[0], *references[-(MAX_REFERENCES - 1) :]]
        mail = EmailMessage()
        mail["From"] = formataddr((self.context.assistant_name, self._config.address))
        mail["To"] = point.reply_address
        mail["Subject"] = reply_subject(point.subject)
        mail["Date"] = format_datetime(self.context.clock())
        mail["Message-ID"] = make_msgid(domain=domain)
        mail["In-Reply-To"] = point.message_id
        mail["References"] = " ".join(references)
        # RFC 3834: an automatic answer, so well-behaved auto-responders do not answer back.
        mail["Auto-Submitted"] = "auto-replied"
        mail.set_content(text)
        return mail

    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        point = await self._point_for(chunk)
        mail = self._compose(point, text)
        try:
            async with self._smtp() as smtp:
                await smtp.send_message(mail)
        except aiosmtplib.SMTPException as exc:
            raise _delivery_failure(exc, point.reply_address) from exc
        except OSError as exc:
            raise DeliveryFailed(f"SMTP {self._config.smtp_host} unreachable: {exc}") from exc
        sent_id = str(mail["Message-ID"])
        answered = point.answered_by(sent_id)
        self._by_message.put(sent_id, answered)
        self._by_chat.put(point.chat_jid, answered)
        return SendResult(platform_message_id=sent_id)


def _delivery_failure(exc: aiosmtplib.SMTPException, recipient: str) -> DeliveryFailed:
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [refused.code for refused in exc.recipients]
        permanent = bool(codes) and all(code >= 500 for code in codes)
        detail = "; ".join(f"{r.code} {r.message}" for r in exc.recipients)
        return DeliveryFailed(f"{recipient} refused: {detail}", permanent=permanent)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        # A 5xx refusal of the recipient or of the message itself will not change on a retry;
        # a 5xx at login or MAIL FROM is our configuration, which an operator can still fix.
        permanent = exc.code >= 500 and isinstance(
            exc, aiosmtplib.SMTPRecipientRefused | aiosmtplib.SMTPDataError
        )
        return DeliveryFailed(f"SMTP answered {exc.code} {exc.message}", permanent=permanent)
    return DeliveryFailed(f"SMTP failed: {exc}")


async def _close(client: Any) -> None:
    """Log out politely when the connection allows it; close the socket in any case."""
    with contextlib.suppress(*_IMAP_ERRORS):
        if client.has_pending_idle():
            client.idle_done()
        if client.get_state() in ("AUTH", "SELECTED"):
            await asyncio.wait_for(client.logout(), 2.0)
    transport = client.protocol.transport
    if transport is not None:
        transport.close()
