"""Sending: where a chunk goes in Telegram, and what the Bot API's refusals mean for postroom.

The SDK's exceptions stop here (ARCHITECTURE: translated at the adapter edge, chained):

- 429 with ``parameters.retry_after`` → :class:`RateLimitedByPlatform` (``retry_after``);
- 400 ``can't parse entities`` → :class:`FormattingRejected` (sent again as plain text);
- 403 (blocked, kicked), 400 ``chat not found``, a group that became a supergroup →
  ``DeliveryFailed(permanent=True)``;
- any other 400 → ``DeliveryFailed(permanent=True)``: the same request cannot succeed later;
- network errors, timeouts, 5xx, a rejected token → ``DeliveryFailed`` (retried with backoff).

The outbox cuts replies to Telegram's 4,096 characters before they are formatted; the display
prefix (``🏠``…) comes on top. Telegram counts the text after reading the markup, so the tags of
``parse_mode=HTML`` do not count, but a prefixed full chunk can still be over: such a chunk is
cut again from its source and sent as several messages (:func:`split_overlong`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from telegram.error import BadRequest, ChatMigrated, Forbidden, TelegramError

from postroom.channels.base import FormattingRejected, RateLimitedByPlatform
from postroom.channels.telegram.request import FloodWait
from postroom.core.formatting import format_within
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk
from postroom.engine.outbox import DeliveryKind

__all__ = [
    "TEXT_LIMIT",
    "Placement",
    "is_missing_thread",
    "placement_of",
    "split_overlong",
    "translate_send_error",
    "visible_length",
]

#: ``sendMessage`` text limit, counted after the markup is read.
TEXT_LIMIT = 4096
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where in the chat a chunk lands: under which message, in which forum topic."""

    reply_to_message_id: int | None
    message_thread_id: int | None


def placement_of(chunk: OutgoingChunk) -> Placement:
    """Reply and topic of a chunk, when they are Telegram ids of *this* chat.

    A mirror copy carries ids from the chat it copies (meaningless here); a typed topic such as
    ``deploy`` is postroom's own, not a forum topic.
    """
    if chunk.kind == DeliveryKind.MIRROR:
        return Placement(None, None)
    reply = chunk.reply_to
    thread = chunk.topic
    return Placement(
        int(reply) if reply and reply.isdigit() else None,
        int(thread) if thread.isdigit() and int(thread) > 1 else None,
    )


def is_missing_thread(exc: TelegramError) -> bool:
    """The topic is gone (closed, deleted, or the group is no forum)."""
    return isinstance(exc, BadRequest) and "thread not found" in exc.message.lower()


def translate_send_error(exc: TelegramError, *, chat_jid: str) -> Exception:
    """The postroom error for a refused ``sendMessage`` (the caller raises it ``from exc``)."""
    text = exc.message
    lowered = text.lower()
    if isinstance(exc, FloodWait):
        return RateLimitedByPlatform(
            f"Telegram rate limit for {chat_jid}: {text}", retry_after=exc.retry_after_s
        )
    if isinstance(exc, ChatMigrated):
        return DeliveryFailed(
            f"{chat_jid} became a supergroup; it is now telegram:group/{abs(exc.new_chat_id)}",
            permanent=True,
        )
    if isinstance(exc, BadRequest) and "can't parse entities" in lowered:
        return FormattingRejected(f"Telegram refused the HTML of a message: {text}")
    if isinstance(exc, Forbidden) or "chat not found" in lowered:
        return DeliveryFailed(f"Telegram refused {chat_jid}: {text}", permanent=True)
    if isinstance(exc, BadRequest):
        return DeliveryFailed(f"Telegram refused a message to {chat_jid}: {text}", permanent=True)
    return DeliveryFailed(f"Telegram send to {chat_jid} failed: {type(exc).__name__}: {text}")


def visible_length(text: str, style: str) -> int:
    """The length Telegram checks: the text without its HTML tags and entities."""
    if style == "telegram_html":
        return len(html.unescape(_TAG.sub("", text)))
    return len(text)


def split_overlong(text: str, style: str, *, source: Callable[[], str]) -> list[str]:
    """*text* as the messages to send: itself when it fits, else *source* (the unformatted
    chunk) cut again and each piece formatted in *style* on its own, so no tag is split."""
    if visible_length(text, style) <= TEXT_LIMIT:
        return [text]
    return format_within(
        style, source(), TEXT_LIMIT, measure=lambda piece: visible_length(piece, style)
    )
