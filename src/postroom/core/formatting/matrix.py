"""Markdown → the HTML of a Matrix message (``format: org.matrix.custom.html``).

Matrix clients draw real HTML, so blocks keep their structure: paragraphs, headings, lists,
quotes, code with its language, tables. Only tags from the spec's list of those a client
should show are written (``del`` for strikethrough; no ``style``, no images from the web: an
image is a link), attributes are quoted and escaped, and text is escaped.
"""

from __future__ import annotations

from postroom.core.formatting.lines import language_of
from postroom.core.formatting.tree import Node, display_url, is_openable, link_target, parse

__all__ = ["has_markup", "to_matrix_html"]

_SPAN_TAGS = {"strong": "strong", "em": "em", "s": "del"}
_PLAIN_NODES = frozenset({"paragraph", "inline", "text", "softbreak", "hardbreak"})


def _escape(text: str, *, quote: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if quote else text


def to_matrix_html(md: str) -> str:
    """*md* as Matrix ``formatted_body`` HTML."""
    return _blocks(parse(md).children)


def has_markup(md: str) -> bool:
    """Whether *md* has any formatting at all (else its plain text says everything)."""
    return _has_markup(parse(md))


def _has_markup(node: Node) -> bool:
    return any(c.type not in _PLAIN_NODES or _has_markup(c) for c in node.children)


def _blocks(nodes: list[Node]) -> str:
    return "\n".join(_block(node) for node in nodes)


def _block(node: Node) -> str:
    kind = node.type
    if kind == "paragraph":
        inner = _inline(node.children[0]) if node.children else ""
        return inner if node.hidden else f"<p>{inner}</p>"  # hidden: an item of a tight list
    if kind == "heading":
        return f"<{node.tag}>{_inline(node.children[0]) if node.children else ''}</{node.tag}>"
    if kind == "bullet_list":
        return f"<ul>\n{_blocks(node.children)}\n</ul>"
    if kind == "ordered_list":
        start = int(node.attrs.get("start", 1))
        opening = f'<ol start="{start}">' if start != 1 else "<ol>"
        return f"{opening}\n{_blocks(node.children)}\n</ol>"
    if kind == "list_item":
        return f"<li>{_blocks(node.children)}</li>"
    if kind == "blockquote":
        return f"<blockquote>\n{_blocks(node.children)}\n</blockquote>"
    if kind in ("fence", "code_block"):
        code = _escape(node.content.removesuffix("\n"))
        language = language_of(node.info)
        if language:
            return f'<pre><code class="language-{language}">{code}</code></pre>'
        return f"<pre><code>{code}</code></pre>"
    if kind == "table":
        return _table(node)
    if kind == "hr":
        return "<hr>"
    return _escape(node.content)


def _table(node: Node) -> str:
    parts = ["<table>"]
    for section in node.children:
        parts.append(f"<{section.type}>")
        cell_tag = "th" if section.type == "thead" else "td"
        for row in section.children:
            cells = "".join(
                f"<{cell_tag}>{_inline(cell.children[0]) if cell.children else ''}</{cell_tag}>"
                for cell in row.children
            )
            parts.append(f"<tr>{cells}</tr>")
        parts.append(f"</{section.type}>")
    parts.append("</table>")
    return "".join(parts)


def _inline(node: Node, in_link: bool = False) -> str:
    return "".join(_span(child, in_link) for child in node.children)


def _span(node: Node, in_link: bool) -> str:
    kind = node.type
    if kind == "text":
        return _escape(node.content)
    if kind in ("softbreak", "hardbreak"):
        return "<br>"
    if kind in _SPAN_TAGS:
        tag = _SPAN_TAGS[kind]
        return f"<{tag}>{_inline(node, in_link)}</{tag}>"
    if kind == "code_inline":
        return f"<code>{_escape(node.content)}</code>"
    if kind in ("link", "image"):
        return _link(node, in_link)
    return _inline(node, in_link) if node.children else _escape(node.content)


def _link(node: Node, in_link: bool) -> str:
    label = _inline(node, True)
    url = link_target(node)
    if in_link:
        return label
    shown = _escape(display_url(url))
    if is_openable(url):
        return f'<a href="{_escape(url, quote=True)}">{label or shown}</a>'
    return f"{label} ({shown})" if label and label != shown else shown
