"""Markdown parsed once: the syntax tree every platform renderer walks.

The parser is ``markdown-it-py`` (CommonMark, plus GitHub's tables, ``~~strikethrough~~`` and
bare links), configured as the web chat configures ``markdown-it`` in the browser, so an answer
has one structure everywhere. Raw HTML in the answer is never HTML: it stays text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

__all__ = [
    "Node",
    "display_url",
    "is_bare",
    "is_openable",
    "link_target",
    "parse",
    "plain_inline",
    "table_rows",
]

Node = SyntaxTreeNode

# Links a platform can open; anything else (a relative path...) is shown as "text (url)".
_OPENABLE = re.compile(r"(?:(?:https?|ftp|tg)://|mailto:)\S+", re.IGNORECASE)
# How markdown-it names a table column's alignment (a cell's ``style`` attribute).
_ALIGN = re.compile(r"text-align:(left|right|center)")


@functools.cache
def _parser() -> MarkdownIt:
    # Built once: a MarkdownIt holds only its configuration, and every parse has its own state.
    options = {"html": False, "linkify": True, "typographer": False}
    return MarkdownIt("commonmark", options).enable(["table", "strikethrough", "linkify"])


def parse(md: str) -> Node:
    """The syntax tree of *md* (never raises: any text is some Markdown)."""
    return SyntaxTreeNode(_parser().parse(md))


def is_openable(url: str) -> bool:
    """Whether a chat client can open *url* (an absolute web, mail or Telegram link)."""
    return _OPENABLE.fullmatch(url) is not None


def display_url(url: str) -> str:
    """*url* as a person reads it (percent-escapes and punycode undone)."""
    return _parser().normalizeLinkText(url)


def is_bare(node: Node) -> bool:
    """Whether a link was written as its URL alone (``<https://…>`` or a bare address)."""
    return node.markup in ("autolink", "linkify")


def link_target(node: Node) -> str:
    """The URL of a ``link`` or ``image`` node."""
    return str(node.attrs.get("href") or node.attrs.get("src") or "")


def plain_inline(node: Node) -> str:
    """The text of an inline subtree, every marker dropped (links keep their label)."""
    return "".join(_plain_parts(node))


def _plain_parts(node: Node) -> Iterator[str]:
    for child in node.children:
        if child.type in ("text", "code_inline"):
            yield child.content
        elif child.type in ("softbreak", "hardbreak"):
            yield "\n"
        else:
            yield from _plain_parts(child)


def table_rows(table: Node) -> tuple[list[list[Node]], list[str]]:
    """The rows of a ``table`` node as lists of cells (``inline`` nodes; the header row first),
    and each column's alignment (``left``, ``right``, ``center`` or ``""``)."""
    rows: list[list[Node]] = []
    aligns: list[str] = []
    for section in table.children:
        for row in section.children:
            cells = [cell.children[0] if cell.children else cell for cell in row.children]
            if not rows:
                for cell in row.children:
                    match = _ALIGN.search(str(cell.attrs.get("style", "")))
                    aligns.append(match.group(1) if match else "")
            rows.append(cells)
    return rows, aligns
