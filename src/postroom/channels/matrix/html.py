"""Markdown → the HTML of ``format: org.matrix.custom.html``.

postroom's Telegram renderer already produces a small, safe HTML subset (``<b> <i> <s> <code>
<pre> <a> <blockquote>``, everything else escaped); Matrix clients draw the same tags, with two
differences handled here: line breaks are ``<br>`` outside ``<pre>`` (HTML collapses newlines)
and strikethrough is ``<del>`` (``<s>`` is not in the spec's list of allowed tags).
"""

from __future__ import annotations

import re

from postroom.core.formatting import to_plain, to_telegram_html

__all__ = ["plain_and_html"]

_PRE = re.compile(r"(<pre>.*?</pre>)", re.DOTALL)
_BLOCK_EDGE = re.compile(r"<br>(?=<blockquote>|<pre>)|(?<=</blockquote>)<br>|(?<=</pre>)<br>")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _breaks(html: str) -> str:
    parts = _PRE.split(html)
    # Odd indexes are the <pre> blocks, whose newlines are the code's own.
    joined = "".join(part if i % 2 else part.replace("\n", "<br>") for i, part in enumerate(parts))
    return _BLOCK_EDGE.sub("", joined)


def plain_and_html(markdown: str) -> tuple[str, str | None]:
    """The plain ``body`` and the ``formatted_body`` of *markdown*; the HTML is ``None`` when
    it would say nothing the plain text does not (no markup at all)."""
    plain = to_plain(markdown)
    html = to_telegram_html(markdown).replace("<s>", "<del>").replace("</s>", "</del>")
    if html == _escape(plain):
        return plain, None
    return plain, _breaks(html)
