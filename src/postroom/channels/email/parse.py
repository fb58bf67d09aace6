"""A fetched RFC 5322 message as postroom sees it (ROUTING §1, the email row). Pure: no I/O.

* **Chat** ``email:thread/<first 16 hex of sha256(root Message-ID)>``. The root is the first
  Message-ID of ``References``, else of ``In-Reply-To``, else the message's own. A Message-ID is
  hashed as written between its angle brackets, brackets included (``<abc@example.org>``), so
  every message of a conversation lands in one chat whichever client wrote it.
* **Sender** ``email:address/<addr>``, the From address lowercased.
* **Text**: ``text/plain`` preferred, else the HTML part reduced to text; the quoted history
  below an ``On … wrote:`` line (one line, or wrapped onto a second one) or an ``-----Original
  Message-----`` line is cut, and lines starting with ``>`` are dropped. The subject is kept in
  metadata, not in the text.
* **Trust**: with ``allowed_senders`` set, a From outside it makes the verb ``untrusted``; so does
  an ``Authentication-Results`` header saying ``dkim=fail`` or ``spf=fail``.
* **Attachments**: images and audio within the size cap, other files (a PDF, a text file)
  within the file cap, inline as base64 (audio as a ``voice`` note, with ``[Voice message]`` as
  the text when the mail has none); a file over its cap by name only.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses, parsedate_to_datetime
from html.parser import HTMLParser
from typing import Any

from postroom.core.jid import encode_id_part
from postroom.core.messages import Attachment, InboundMessage, Verb

__all__ = [
    "ThreadPoint",
    "html_to_text",
    "message_ids",
    "parse_email",
    "sender_jid",
    "strip_quoted",
    "thread_jid",
    "trust_problems",
]

VOICE_PLACEHOLDER = "[Voice message]"
#: Longer Message-IDs (rare, and legal) are stored under a hash of themselves: ingest's id limit.
MAX_ID_LENGTH = 255
_MSG_ID = re.compile(r"<[^<>\s]+>")
_ATTRIBUTION = re.compile(r"^\s*On\s.*\bwrote:\s*$")
_ORIGINAL = re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}\s*$", re.IGNORECASE)
_AUTH_FAIL = re.compile(r"\b(dkim|spf)\s*=\s*fail\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ThreadPoint:
    """What an answer to one message needs: where it goes and how it threads."""

    chat_jid: str
    message_id: str
    reply_address: str
    subject: str
    #: The message's own ancestry (References, else In-Reply-To), without itself.
    references: tuple[str, ...]

    def answered_by(self, message_id: str) -> ThreadPoint:
        """The point an answer with *message_id* leaves the thread at."""
        return ThreadPoint(
            chat_jid=self.chat_jid,
            message_id=message_id,
            reply_address=self.reply_address,
            subject=self.subject,
            references=(*self.references, self.message_id),
        )


def message_ids(value: object) -> list[str]:
    """The ``<id>`` tokens of a header value, in order."""
    return _MSG_ID.findall(str(value)) if value else []


def thread_jid(root_message_id: str) -> str:
    return "email:thread/" + hashlib.sha256(root_message_id.encode()).hexdigest()[:16]


def sender_jid(address: str) -> str:
    return "email:address/" + encode_id_part(address.lower())


def strip_quoted(text: str) -> str:
    """*text* without the quoted history of the mail it answers (see the module doc)."""
    lines = text.splitlines()
    kept: list[str] = []
    for index, line in enumerate(lines):
        if _ATTRIBUTION.match(line) or _ORIGINAL.match(line):
            break
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line.lstrip().startswith("On ") and _ATTRIBUTION.match(f"{line} {following}"):
            break  # an attribution wrapped onto two lines
        if line.startswith(">"):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


class _TextOfHtml(HTMLParser):
    _BLOCKS = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre"}
    )
    _SKIP = frozenset({"script", "style", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(self._skipping - 1, 0)
        elif tag in self._BLOCKS and tag != "br":
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The readable text of an HTML body: tags dropped, blocks on their own lines."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def sender_allowed(address: str, allowed: Sequence[str]) -> bool:
    """An entry with ``@`` is one address; one without is a domain and its subdomains."""
    address = address.lower()
    domain = address.rpartition("@")[2]
    for entry in allowed:
        if "@" in entry:
            if address == entry:
                return True
        elif domain == entry or domain.endswith("." + entry):
            return True
    return False


def trust_problems(message: Message, address: str, allowed: Sequence[str]) -> list[str]:
    """Why a mail is untrusted; empty when it passes the sender checks."""
    problems: list[str] = []
    if allowed and not sender_allowed(address, allowed):
        problems.append(f"{address} is not in allowed_senders")
    for header in message.get_all("Authentication-Results") or []:
        for match in _AUTH_FAIL.finditer(str(header)):
            problem = f"{match.group(1).lower()}=fail"
            if problem not in problems:
                problems.append(problem)
    return problems


def _addresses(message: Message, *names: str) -> list[tuple[str, str]]:
    values = [str(v) for name in names for v in message.get_all(name) or []]
    return [(name, addr.lower()) for name, addr in getaddresses(values) if "@" in addr]


def _timestamp(message: Message, fallback: datetime) -> datetime:
    value = message.get("Date")
    if not value:
        return fallback
    try:
        parsed = parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return fallback
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=fallback.tzinfo)


def _text_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content: Any = part.get_content()
    except (LookupError, ValueError):  # an unknown charset or a broken transfer encoding
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    text = str(content) if not isinstance(content, bytes) else content.decode("utf-8", "replace")
    if part.get_content_subtype() == "html":
        text = html_to_text(text)
    return strip_quoted(text)


def _attachments(message: EmailMessage, cap_bytes: int, file_cap_bytes: int) -> list[Attachment]:
    found: list[Attachment] = []
    for part in message.iter_attachments():
        mime = part.get_content_type()
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        name = part.get_filename() or ""
        maintype = part.get_content_maintype()
        if maintype in ("image", "audio"):
            within = 0 < len(data) <= cap_bytes
            found.append(
                Attachment(
                    kind="image" if maintype == "image" else "voice",
                    mime=mime,
                    name=name,
                    size=len(data),
                    data=base64.b64encode(data).decode("ascii") if within else "",
                )
            )
        else:
            within = 0 < len(data) <= file_cap_bytes
            found.append(
                Attachment(
                    kind="file",
                    mime=mime,
                    name=name,
                    size=len(data),
                    data=base64.b64encode(data).decode("ascii") if within else "",
                )
            )
    return found


def parse_email(
    raw: bytes,
    *,
    bot_address: str,
    allowed_senders: Sequence[str],
    image_bytes: int,
    now: datetime,
    file_bytes: int = 0,
) -> tuple[InboundMessage, ThreadPoint]:
    """The message and what an answer to it needs. ``ValueError`` when it has no From address."""
    parsed = BytesParser(_class=EmailMessage, policy=policy.default).parsebytes(raw)
    senders = _addresses(parsed, "From")
    if not senders:
        raise ValueError("the mail has no From address")
    sender_name, address = senders[0]
    reply_addresses = _addresses(parsed, "Reply-To")
    reply_address = reply_addresses[0][1] if reply_addresses else address

    own = message_ids(parsed.get("Message-ID"))
    message_id = own[0] if own else "<" + hashlib.sha256(raw).hexdigest()[:32] + "@postroom>"
    references = message_ids(parsed.get("References"))
    in_reply_to = message_ids(parsed.get("In-Reply-To"))
    ancestry = references or in_reply_to
    root = ancestry[0] if ancestry else message_id
    chat_jid = thread_jid(root)
    subject = str(parsed.get("Subject") or "").strip()

    attachments = _attachments(parsed, image_bytes, file_bytes)
    text = _text_of(parsed)
    if not text and any(a.kind == "voice" and a.data for a in attachments):
        text = VOICE_PLACEHOLDER
    problems = trust_problems(parsed, address, allowed_senders)
    recipients = {addr for _, addr in _addresses(parsed, "To", "Cc")} - {bot_address, address}
    metadata: dict[str, Any] = {
        "email": {
            "subject": subject,
            "message_id": message_id,
            "references": ancestry,
            "to": [addr for _, addr in _addresses(parsed, "To")],
            "cc": [addr for _, addr in _addresses(parsed, "Cc")],
        }
    }
    if problems:
        metadata["untrusted"] = problems
    stored_id = message_id
    if len(stored_id) > MAX_ID_LENGTH:
        stored_id = "<" + hashlib.sha256(message_id.encode()).hexdigest() + "@postroom>"
    message = InboundMessage(
        id=stored_id,
        chat_jid=chat_jid,
        sender=sender_jid(address),
        content=text,
        timestamp=_timestamp(parsed, now),
        sender_name=sender_name or address,
        reply_to=in_reply_to[0] if in_reply_to else None,
        verb=Verb.UNTRUSTED if problems else Verb.MESSAGE,
        is_dm=not recipients,
        is_from_me=address == bot_address,
        attachments=tuple(attachments),
        metadata=metadata,
    )
    point = ThreadPoint(
        chat_jid=chat_jid,
        message_id=message_id,
        reply_address=reply_address,
        subject=subject,
        references=tuple(ancestry),
    )
    return message, point
