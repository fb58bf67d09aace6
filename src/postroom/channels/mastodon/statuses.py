"""Statuses as postroom sees them: addresses, the text of a status's HTML, who wrote it, and
how an answer is cut into statuses. Pure functions over the API's JSON objects.

A chat is the account that wrote to the bot (ROUTING §1: ``mastodon:account/<id>``, the
same address as the sender), so one person's public mentions and direct messages share one
chat. ``<id>`` is the account's ``id`` on the bot's instance (e.g. ``109876543210``).
``acct`` — ``alice`` on the bot's instance, ``alice@other.example`` elsewhere — is what an
answer mentions to reach that person; it is shown and kept in the metadata, never an address.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

from postroom.core.chunking import MIN_LIMIT, chunk_text
from postroom.core.jid import decode_id_part, encode_id_part, split_jid
from postroom.core.messages import Attachment, InboundMessage, Verb

__all__ = [
    "PLATFORM",
    "STATUS_LIMIT",
    "VISIBILITIES",
    "BotAccount",
    "account_id_of_chat",
    "account_jid",
    "html_to_text",
    "inbound_of",
    "status_length",
    "status_texts",
    "strip_bot_mention",
    "text_of",
]

PLATFORM = "mastodon"
#: Mastodon's default length limit of a status, in its own way of counting (:func:`status_length`).
STATUS_LIMIT = 500
VISIBILITIES = frozenset({"public", "unlisted", "private", "direct"})
#: Every link counts as this many characters, however long it is.
URL_WEIGHT = 23

_URL = re.compile(r"https?://\S+", re.IGNORECASE)
# A remote mention counts only its local part: "@alice@other.example" weighs "@alice".
_REMOTE_MENTION = re.compile(r"(^|[^/\w])@(\w+)@[\w.-]*\w", re.IGNORECASE)
_LEADING_MENTION = re.compile(r"\s*@(\w[\w.-]*?)(?:@([\w.-]*\w))?(?=\s|$)")
_BLOCKS = frozenset({"p", "blockquote", "pre", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6"})


@dataclass(frozen=True, slots=True)
class BotAccount:
    """The account the access token belongs to (``verify_credentials``)."""

    id: str
    acct: str
    username: str
    #: Host names this account's mentions may carry (its profile's host, the API's host).
    domains: frozenset[str] = frozenset()

    @classmethod
    def of(cls, account: Mapping[str, Any], api_base_url: str) -> BotAccount:
        hosts = {urlsplit(str(account.get("url") or "")).hostname, urlsplit(api_base_url).hostname}
        return cls(
            id=str(account.get("id") or ""),
            acct=str(account.get("acct") or ""),
            username=str(account.get("username") or account.get("acct") or ""),
            domains=frozenset(h.lower() for h in hosts if h),
        )

    def is_me(self, username: str, domain: str | None) -> bool:
        if username.lower() != self.username.lower():
            return False
        return domain is None or domain.lower() in self.domains


def account_jid(account_id: str) -> str:
    """``mastodon:account/<id>``: the chat and the sender of a status from the account whose
    ``id`` is *account_id*."""
    return f"{PLATFORM}:account/{encode_id_part(account_id)}"


def account_id_of_chat(chat_jid: str) -> str | None:
    """The account id a chat address names, ``None`` when it is not a Mastodon account address."""
    platform, room = split_jid(chat_jid)
    kind, _, part = room.partition("/")
    if platform != PLATFORM or kind != "account" or not part or "/" in part:
        return None
    return decode_id_part(part)


class _TextOfHtml(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.parts.append("\n")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in _BLOCKS and self.parts:
            self.parts.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        # Link previews hide parts of a URL in invisible spans: the text keeps the whole URL.
        self.parts.append(data)


def html_to_text(html: str) -> str:
    """The plain text of a status's HTML: paragraphs as blank lines, links as their text."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def strip_bot_mention(text: str, bot: BotAccount) -> str:
    """*text* without the bot's own ``@name`` among its leading mentions (the address on the
    envelope, not part of the message); other people's mentions stay."""
    kept: list[str] = []
    rest = text
    while match := _LEADING_MENTION.match(rest):
        if not bot.is_me(match.group(1), match.group(2)):
            kept.append(match.group(0).strip())
        rest = rest[match.end() :]
    rest = rest.strip()
    return " ".join([*kept, rest]) if rest else " ".join(kept)


def text_of(status: Mapping[str, Any], bot: BotAccount) -> str:
    """What the person wrote: the status's text without the bot's name in front."""
    return strip_bot_mention(html_to_text(str(status.get("content") or "")), bot)


def status_length(text: str) -> int:
    """How long Mastodon counts *text*: links weigh 23, remote mentions their local part."""
    counted = _URL.sub("x" * URL_WEIGHT, text)
    counted = _REMOTE_MENTION.sub(r"\1@\2", counted)
    return len(counted)


def status_texts(text: str, acct: str, limit: int = STATUS_LIMIT) -> list[str]:
    """The statuses *text* becomes when addressed to *acct*: each opens with the mention (so
    it reaches the person whatever its visibility) and fits Mastodon's limit."""
    prefix = f"@{acct} "
    room = limit - status_length(prefix)
    budget = room
    while True:
        pieces = chunk_text(text, budget) or [""]
        longest = max(status_length(piece) for piece in pieces)
        if longest <= room or budget == MIN_LIMIT:
            return [(prefix + piece).rstrip() for piece in pieces]
        # Short links weigh more than they are long: cut again with proportionally less room.
        budget = max(MIN_LIMIT, min(budget - 1, budget * room // longest))


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _placeholder(attachments: Sequence[Attachment]) -> str:
    kinds = {a.kind for a in attachments}
    if "voice" in kinds:
        return "[Voice message]"
    if "image" in kinds:
        return "[Image]"
    return "[Media]" if attachments else ""


def inbound_of(
    notification: Mapping[str, Any],
    bot: BotAccount,
    attachments: Sequence[Attachment] = (),
) -> InboundMessage | None:
    """The message a ``mention`` notification carries; ``None`` when it has no status."""
    status = notification.get("status")
    account = (status or {}).get("account") if isinstance(status, Mapping) else None
    if not isinstance(status, Mapping) or not isinstance(account, Mapping):
        return None
    account_id = str(account.get("id") or "")
    acct = str(account.get("acct") or "")
    status_id = str(status.get("id") or "")
    if not account_id or not status_id:
        return None
    visibility = str(status.get("visibility") or "public")
    text = text_of(status, bot)
    if not text:  # only media, or only the bot's name
        text = _placeholder(attachments)
    reply_to = status.get("in_reply_to_id")
    jid = account_jid(account_id)
    return InboundMessage(
        id=status_id,
        chat_jid=jid,
        sender=jid,
        content=text,
        timestamp=_time(status.get("created_at")),
        sender_name=str(account.get("display_name") or account.get("username") or acct),
        reply_to=str(reply_to) if reply_to else None,
        # A status answering another is a reply; a new one naming the bot is a message. Both
        # become mentions in routing: the platform says the bot was mentioned.
        verb=Verb.REPLY if reply_to else Verb.MESSAGE,
        mentioned=True,
        is_dm=visibility == "direct",
        is_from_me=account_id == bot.id,
        attachments=tuple(attachments),
        metadata={
            "mastodon": {
                "notification_id": str(notification.get("id") or ""),
                "status_id": status_id,
                "account_id": account_id,
                "acct": acct,
                "visibility": visibility,
                "url": status.get("url"),
                "in_reply_to_account_id": status.get("in_reply_to_account_id"),
            }
        },
    )
