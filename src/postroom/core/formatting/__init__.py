"""Markdown as models write it, rendered for each platform (PIPELINE §3.2).

An answer is parsed once (:mod:`.tree`, CommonMark with tables, strikethrough and bare links)
and the tree is rendered in the style of the platform it goes to:

- ``telegram_html``, ``slack_mrkdwn``, ``whatsapp``, ``discord`` and ``plain`` lay blocks out
  as lines of text (:mod:`.lines`) and draw spans, links and code their own way
  (:mod:`.styles`);
- ``matrix_html`` is real HTML for a Matrix ``formatted_body`` (:mod:`.matrix`);
- ``markdown`` is the text unchanged.

Any text renders: a marker without its partner is a literal character, raw HTML is text, and
what a platform cannot show (a relative link, a table) is written so it reads well anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from postroom.core.chunking import MIN_LIMIT, chunk_text
from postroom.core.formatting.matrix import has_markup, to_matrix_html
from postroom.core.formatting.styles import (
    DiscordRenderer,
    PlainRenderer,
    SlackRenderer,
    TelegramRenderer,
    WhatsAppRenderer,
)

__all__ = [
    "FORMAT_STYLES",
    "format_for",
    "format_within",
    "has_markup",
    "to_discord",
    "to_matrix_html",
    "to_plain",
    "to_slack_mrkdwn",
    "to_telegram_html",
    "to_whatsapp",
]


def to_telegram_html(md: str) -> str:
    """*md* as Telegram Bot API HTML (``parse_mode="HTML"``)."""
    return TelegramRenderer().render(md)


def to_slack_mrkdwn(md: str) -> str:
    """*md* as Slack mrkdwn (the ``text`` of ``chat.postMessage`` or a mrkdwn text object)."""
    return SlackRenderer().render(md)


def to_whatsapp(md: str) -> str:
    """*md* with WhatsApp's text markup."""
    return WhatsAppRenderer().render(md)


def to_discord(md: str) -> str:
    """*md* as Discord Markdown."""
    return DiscordRenderer().render(md)


def to_plain(md: str) -> str:
    """*md* as plain text: the fallback when a platform rejects the formatted text."""
    return PlainRenderer().render(md)


def _markdown(md: str) -> str:
    return md


_RENDERERS: Mapping[str, Callable[[str], str]] = MappingProxyType(
    {
        "telegram_html": to_telegram_html,
        "slack_mrkdwn": to_slack_mrkdwn,
        "whatsapp": to_whatsapp,
        "discord": to_discord,
        "matrix_html": to_matrix_html,
        "plain": to_plain,
        "markdown": _markdown,
    }
)
#: The styles :func:`format_for` knows.
FORMAT_STYLES: frozenset[str] = frozenset(_RENDERERS)


def format_for(style: str, md: str) -> str:
    """*md* rendered in *style*, one of :data:`FORMAT_STYLES`; another style is a ValueError."""
    render = _RENDERERS.get(style)
    if render is None:
        known = ", ".join(sorted(FORMAT_STYLES))
        raise ValueError(f"unknown format style {style!r}; use one of {known}")
    return render(md)


def format_within(
    style: str, md: str, limit: int, *, measure: Callable[[str], int] = len
) -> list[str]:
    """*md* in *style* as messages that each *measure* at most *limit*.

    One message when it fits. Otherwise *md* is cut (:func:`chunk_text`) and each piece is
    formatted on its own, so no tag, entity or code block is ever split; the cut shrinks until
    every piece fits, since formatting can lengthen a text (escapes, a padded table).
    """
    text = format_for(style, md)
    if measure(text) <= limit:
        return [text]
    pieces = [text]
    size = min(limit, len(md))
    while size > MIN_LIMIT:
        size = max(MIN_LIMIT, size * 7 // 8)
        pieces = [format_for(style, piece) for piece in chunk_text(md, size)]
        if all(measure(piece) <= limit for piece in pieces):
            break
    return pieces
