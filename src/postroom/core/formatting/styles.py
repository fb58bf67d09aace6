"""How each chat platform draws text, spans, links and code (the layout is :mod:`.lines`).

- Telegram (``parse_mode=HTML``): ``<b> <i> <s> <code> <pre> <a href> <blockquote>`` only, and
  every other ``< > &`` escaped. Telegram nests no link or code inside a link, and no quote in a
  quote (an inner quote is marked with ``>``).
- Slack mrkdwn: ``*bold* _italic_ ~strike~``, ``<url|label>`` links. ``& < >`` are escaped
  everywhere, code included: Slack decodes them in every part of a message, and an unescaped
  ``<…>`` would become a link or a mention even inside code.
- WhatsApp: Slack's markers, but no entities (WhatsApp shows ``&amp;`` as written) and no link
  syntax (it links bare URLs itself): a link is ``label (url)``.
- Discord: its own Markdown. Literal characters that Discord would read as markup are escaped
  with a backslash (Discord hides it); ``__x__`` is underline there, so bold is always ``**``.
- Plain text: the fallback when a platform refuses formatting, every marker gone.
"""

from __future__ import annotations

import re
from typing import ClassVar

from postroom.core.formatting.lines import LineRenderer
from postroom.core.formatting.tree import Node, display_url, is_bare, plain_inline

__all__ = [
    "DiscordRenderer",
    "PlainRenderer",
    "SlackRenderer",
    "TelegramRenderer",
    "WhatsAppRenderer",
]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unfence(code: str) -> str:
    # A run of three backticks would end the block early; a zero-width space breaks the run.
    return code.replace("```", "``\u200b`")


class PlainRenderer(LineRenderer):
    """Plain text: links as ``label (url)``, code as written."""


class TelegramRenderer(LineRenderer):
    _TAGS: ClassVar[dict[str, str]] = {"strong": "b", "em": "i", "s": "s"}

    def text(self, text: str) -> str:
        return _html(text)

    def span(self, style: str, inner: str) -> str:
        tag = self._TAGS[style]
        return f"<{tag}>{inner}</{tag}>"

    def code_span(self, code: str, *, inside_link: bool) -> str:
        return _html(code) if inside_link else f"<code>{_html(code)}</code>"

    def link(self, url: str, node: Node, active: frozenset[str]) -> str:
        label = self.inline(node, active) or _html(display_url(url))
        href = _html(url).replace('"', "&quot;")
        return f'<a href="{href}">{label}</a>'

    def heading(self, level: int, inline: Node) -> str:
        text = self.inline(inline, frozenset({"strong"}))
        return f"<b>{text}</b>" if text else ""

    def quote(self, inner: str, *, nested: bool) -> str:
        if nested:
            return super().quote(inner, nested=nested)
        return f"<blockquote>{inner}</blockquote>"

    def code_block(self, code: str, language: str) -> str:
        if language:
            return f'<pre><code class="language-{language}">{_html(code)}</code></pre>'
        return f"<pre>{_html(code)}</pre>"


class _MarkerRenderer(LineRenderer):
    """Spans drawn with paired characters around them, code with backticks."""

    _MARKS: ClassVar[dict[str, str]] = {"strong": "*", "em": "_", "s": "~"}

    def span(self, style: str, inner: str) -> str:
        mark = self._MARKS[style]
        return f"{mark}{inner}{mark}"

    def code_span(self, code: str, *, inside_link: bool) -> str:
        return f"`{self.text(code)}`"

    def heading(self, level: int, inline: Node) -> str:
        text = self.inline(inline, frozenset({"strong"}))
        return self.span("strong", text) if text else ""

    def code_block(self, code: str, language: str) -> str:
        # Slack and WhatsApp show no language: it would read as the first line of code.
        return f"```\n{self.text(_unfence(code))}\n```"


class SlackRenderer(_MarkerRenderer):
    def text(self, text: str) -> str:
        return _html(text)

    def link(self, url: str, node: Node, active: frozenset[str]) -> str:
        label = plain_inline(node)
        # A "|" would end the URL inside <url|label>; percent-encoded, it means the same.
        target = _html(url).replace("|", "%7C")
        if not label or label == display_url(url):
            return f"<{target}>"
        return f"<{target}|{_html(label)}>"

    def quote(self, inner: str, *, nested: bool) -> str:
        # A raw ">" starts a quote in Slack; the escaped one in text does not.
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))


class WhatsAppRenderer(_MarkerRenderer):
    """Slack's markers without its escapes; links as ``label (url)`` (the base's way)."""


# Characters Discord reads as markup anywhere in a line, and what starts a block at a line's
# start; a backslash before punctuation shows the character itself.
_DISCORD_SPECIAL = re.compile(r"([\\*_~`|\[\]])")
_DISCORD_LINE_START = re.compile(
    r"^(\d*)((?<!\d)(?:#{1,3}|-#|>|>>>|[-+])(?= )|(?<=\d)[.)](?= ))", re.MULTILINE
)


class DiscordRenderer(LineRenderer):
    bullet = "- "
    _MARKS: ClassVar[dict[str, str]] = {"strong": "**", "em": "*", "s": "~~"}

    def text(self, text: str) -> str:
        return _DISCORD_SPECIAL.sub(r"\\\1", text)

    def marker(self, marker: str) -> str:
        return marker

    def span(self, style: str, inner: str) -> str:
        mark = self._MARKS[style]
        return f"{mark}{inner}{mark}"

    def code_span(self, code: str, *, inside_link: bool) -> str:
        if "`" not in code:
            return f"`{code}`"
        return f"`` {code} ``" if "``" not in code else self.text(code)

    def link(self, url: str, node: Node, active: frozenset[str]) -> str:
        label = self.inline(node, active)
        if is_bare(node):
            return plain_inline(node)  # as written: Discord links a bare URL itself
        if not label or label == self.text(url):
            return url
        # Parentheses would end the target early; percent-encoded, they mean the same.
        return f"[{label}]({url.replace('(', '%28').replace(')', '%29')})"

    def paragraph(self, text: str) -> str:
        return _DISCORD_LINE_START.sub(r"\1\\\2", text)

    def heading(self, level: int, inline: Node) -> str:
        text = self.inline(inline, frozenset({"strong"}))
        if not text:
            return ""
        # Discord draws "#" to "###"; deeper ones would show their hashes.
        return f"{'#' * level} {text}" if level <= 3 else f"**{text}**"

    def quote(self, inner: str, *, nested: bool) -> str:
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))

    def code_block(self, code: str, language: str) -> str:
        return f"```{language}\n{_unfence(code)}\n```"
