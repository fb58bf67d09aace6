"""The layout shared by chat platforms without block markup: a tree rendered as lines of text.

Telegram, Slack, WhatsApp, Discord and plain text draw no headings, lists or tables of their own
(or only some of them), so an answer is laid out the same way for all of them: blocks keep the
blank lines the author put between them, list items get a ``•`` or their number and nest by
indentation, block quotes are marked line by line, and a table becomes an aligned monospaced
block. A subclass says only how text, spans, links, code and headings look on its platform.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from postroom.core.formatting.tree import (
    Node,
    display_url,
    is_bare,
    is_openable,
    link_target,
    parse,
    plain_inline,
    table_rows,
)

__all__ = ["LineRenderer", "aligned_table", "language_of"]

_LISTS = frozenset({"bullet_list", "ordered_list"})
# Blocks copied as written: indenting their lines would change what they show.
_VERBATIM = frozenset({"fence", "code_block", "table"})
_SPANS = frozenset({"strong", "em", "s"})
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")


def language_of(info: str) -> str:
    """The language named by a fence's info string, or ``""`` when it names none usable."""
    word = info.split(maxsplit=1)[0] if info.strip() else ""
    return word if _LANGUAGE.fullmatch(word) else ""


def aligned_table(rows: Sequence[Sequence[str]], aligns: Sequence[str]) -> str:
    """*rows* (the header first) as columns padded to one width, a rule under the header."""
    count = max(len(row) for row in rows)
    cells = [[" ".join(cell.split()) for cell in row] + [""] * (count - len(row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(count)]
    columns = list(zip([*aligns, *[""] * (count - len(aligns))], widths, strict=True))

    def line(row: Sequence[str]) -> str:
        pairs = zip(row, columns, strict=True)
        parts = [_pad(cell, width, align) for cell, (align, width) in pairs]
        return " | ".join(parts).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _pad(cell: str, width: int, align: str) -> str:
    if align == "right":
        return cell.rjust(width)
    if align == "center":
        return cell.center(width)
    return cell.ljust(width)


class LineRenderer:
    """Markdown → a platform's text. Subclasses override the hooks below the line."""

    bullet: ClassVar[str] = "• "
    rule: ClassVar[str] = "———"

    def render(self, md: str) -> str:
        return self.blocks(parse(md).children, indent="", quoted=False)

    # -- blocks ------------------------------------------------------------------------------
    def blocks(self, nodes: Sequence[Node], *, indent: str, quoted: bool) -> str:
        return _join(nodes, [self.block(node, indent=indent, quoted=quoted) for node in nodes])

    def block(self, node: Node, *, indent: str, quoted: bool) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.paragraph(self.inline(node.children[0]) if node.children else "")
        if kind == "heading":
            return self.heading(int(node.tag[1:]), node.children[0]) if node.children else ""
        if kind in _LISTS:
            return self.list(node, indent=indent, quoted=quoted)
        if kind == "blockquote":
            return self.quote(self.blocks(node.children, indent="", quoted=True), nested=quoted)
        if kind in ("fence", "code_block"):
            return self.code_block(node.content.removesuffix("\n"), language_of(node.info))
        if kind == "table":
            rows, aligns = table_rows(node)
            cells = [[plain_inline(cell) for cell in row] for row in rows]
            return self.code_block(aligned_table(cells, aligns), "")
        if kind == "hr":
            return self.rule
        return self.text(node.content)  # raw HTML blocks: html is off, so never reached

    def list(self, node: Node, *, indent: str, quoted: bool) -> str:
        ordered = node.type == "ordered_list"
        start = int(node.attrs.get("start", 1)) if ordered else 1
        items: list[str] = []
        for index, item in enumerate(node.children):
            marker = f"{start + index}{node.markup} " if ordered else self.bullet
            pad = indent + " " * len(marker)
            body = self._item(item, pad=pad, quoted=quoted)
            items.append((indent + self.marker(marker) + body).rstrip())
        return _join(node.children, items)

    def _item(self, item: Node, *, pad: str, quoted: bool) -> str:
        parts: list[str] = []
        for child in item.children:
            text = self.block(child, indent=pad, quoted=quoted)
            if child.type in _LISTS:
                # A nested list indents its own lines; as an item's first block it follows
                # the marker.
                text = text if parts else text.removeprefix(pad)
            elif child.type not in _VERBATIM:
                text = _indent(text, pad, first=bool(parts))
            parts.append(text)
        return _join(item.children, parts)

    # -- inline ------------------------------------------------------------------------------
    def inline(self, node: Node, active: frozenset[str] = frozenset()) -> str:
        """The children of *node* rendered; *active* holds the spans already open around them
        (``strong``, ``em``, ``s``, and ``a`` inside a link's label)."""
        return "".join(self._inline(child, active) for child in node.children)

    def _inline(self, node: Node, active: frozenset[str]) -> str:
        kind = node.type
        if kind == "text":
            return self.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind in _SPANS:
            inner = self.inline(node, active | {kind})
            return inner if kind in active or not inner else self.span(kind, inner)
        if kind == "code_inline":
            return self.code_span(node.content, inside_link="a" in active)
        if kind in ("link", "image"):
            return self._link(node, active)
        return self.inline(node, active) if node.children else self.text(node.content)

    def _link(self, node: Node, active: frozenset[str]) -> str:
        if "a" in active:
            return self.inline(node, active)  # a link inside a link's label stays its text
        url = link_target(node)
        if is_openable(url):
            return self.link(url, node, active | {"a"})
        label = self.inline(node, active | {"a"})
        shown = self.text(display_url(url))
        return f"{label} ({shown})" if label and label != shown else shown

    # -- hooks -------------------------------------------------------------------------------
    def text(self, text: str) -> str:
        """Literal text, escaped as the platform needs."""
        return text

    def span(self, style: str, inner: str) -> str:
        """``strong``, ``em`` or ``s`` around already rendered *inner*."""
        return inner

    def code_span(self, code: str, *, inside_link: bool) -> str:
        return self.text(code)

    def link(self, url: str, node: Node, active: frozenset[str]) -> str:
        """A link the platform can open (*url* passed :func:`is_openable`)."""
        label = self.inline(node, active)
        if is_bare(node):
            return label
        shown = self.text(display_url(url))
        return f"{label} ({shown})" if label and label != shown else shown

    def heading(self, level: int, inline: Node) -> str:
        return self.inline(inline)

    def paragraph(self, text: str) -> str:
        return text

    def marker(self, marker: str) -> str:
        """A list marker (``• `` or ``3. ``) as written before an item."""
        return self.text(marker)

    def quote(self, inner: str, *, nested: bool) -> str:
        """A block quote around its rendered content; *nested* inside another quote."""
        return _prefix_lines(inner, self.text(">"))

    def code_block(self, code: str, language: str) -> str:
        return code


def _join(nodes: Sequence[Node], parts: Sequence[str]) -> str:
    """Rendered blocks, a blank line between two that had one between them in the source."""
    out: list[str] = []
    end: int | None = None
    for node, text in zip(nodes, parts, strict=True):
        if out:
            blank = node.map is not None and end is not None and node.map[0] > end
            out.append("\n\n" if blank else "\n")
        out.append(text)
        end = _last_line(node, end)
    return "".join(out)


def _last_line(node: Node, default: int | None) -> int | None:
    """The line after a block's last line of content (a list's own range takes in the blank
    lines after it; its last paragraph's does not)."""
    while node.children and node.children[-1].map is not None:
        node = node.children[-1]
    return node.map[1] if node.map is not None else default


def _indent(text: str, pad: str, *, first: bool) -> str:
    lines = text.split("\n")
    start = 0 if first else 1
    return "\n".join(pad + line if i >= start and line else line for i, line in enumerate(lines))


def _prefix_lines(text: str, mark: str) -> str:
    return "\n".join(f"{mark} {line}" if line else mark for line in text.split("\n"))
