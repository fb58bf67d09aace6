"""Markdown as LLMs write it, rendered for each platform (PIPELINE §3.2).

The input is the CommonMark subset models produce: ``**bold**``, ``*italic*`` / ``_italic_``,
``~~strike~~``, ```` `code` ````, fenced code blocks, ``[links](url)``, ``#`` headings, ``-`` /
``1.`` lists and ``>`` quotes. Each style keeps what its platform understands and shows the rest
as literal text:

- ``telegram_html``: Bot API ``parse_mode=HTML`` — ``<b> <i> <s> <code> <pre> <a> <blockquote>``
  only, every other ``< > &`` escaped; headings become bold lines, bullets ``• ``.
- ``slack_mrkdwn``: ``*bold* _italic_ ~strike~``, ``<url|text>`` links, headings bold, bullets
  ``• ``; ``& < >`` escaped everywhere, code included, because Slack decodes them in every part
  of a message (unescaped, ``<...>`` inside code would still become a link).
- ``discord``: Discord's own Markdown, so the text passes through; only headings Discord does
  not draw (``####`` and deeper) become bold lines, and ``~~~`` fences become ```` ``` ````.
- ``plain``: the fallback when a platform rejects formatting: markers removed, links as
  ``text (url)``, code blocks as their content.
- ``markdown``: unchanged.

Parsing is forgiving and line by line (emphasis never spans lines): a marker without its partner
stays a literal character, escaped where the style needs it, so any input renders. A fence that
is never closed runs to the end of the text, as in CommonMark. Code spans and blocks are copied
untouched but for the escaping their platform requires.
"""

from __future__ import annotations

import re
import string
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

from postroom.core.chunking import FencedBlock, fenced_blocks

__all__ = [
    "FORMAT_STYLES",
    "format_for",
    "to_discord",
    "to_plain",
    "to_slack_mrkdwn",
    "to_telegram_html",
]

# ---------------------------------------------------------------------------------------------
# Inline syntax tree.


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Code:
    text: str


@dataclass(frozen=True, slots=True)
class _Span:
    style: str  # "strong", "em" or "strike"
    children: tuple[_Inline, ...]


@dataclass(frozen=True, slots=True)
class _Link:
    url: str
    children: tuple[_Inline, ...]


_Inline: TypeAlias = "_Text | _Code | _Span | _Link"


@dataclass(slots=True)
class _Delim:
    """A run of ``*``, ``_`` or ``~~`` that may still open or close emphasis."""

    char: str
    count: int
    can_open: bool
    can_close: bool


_SPECIAL = re.compile(r"[\\`*_~\[!<]")
_RUNS = {char: re.compile(re.escape(char) + "+") for char in "`*_~"}
_ESCAPABLE = frozenset(string.punctuation)
# The "(dest "title")" after a link's "]": one level of parentheses inside the destination.
_LINK_TAIL = re.compile(
    r"""\(\s*(<[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))*)"""
    r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*\)"""
)
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^\s<>]+|mailto:[^\s<>]+)>")
_UNESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Links a platform can open; anything else (a relative path...) is shown as "text (url)".
_OPENABLE = re.compile(r"(?:(?:https?|ftp|tg)://|mailto:)[^\s<>]+", re.IGNORECASE)
_STYLES = {("*", 1): "em", ("_", 1): "em", ("*", 2): "strong", ("_", 2): "strong"}
# Links inside link text are parsed this deep; deeper brackets stay text (no recursion limit).
_MAX_DEPTH = 4


def _parse_inline(s: str, depth: int = 0) -> tuple[_Inline, ...]:
    """Parse one line: code spans and links first, then emphasis by CommonMark's delimiter
    matching (a closer pairs with the nearest opener of its character)."""
    items: list[_Inline | _Delim] = []
    # Per character, the index below which no opener is left: keeps matching linear.
    floors: dict[str, int] = {}
    brackets = _match_brackets(s)
    backticks: dict[int, list[int]] = {}
    for run in _RUNS["`"].finditer(s):
        backticks.setdefault(len(run.group()), []).append(run.start())
    i = 0
    while i < len(s):
        found = _SPECIAL.search(s, i)
        if found is None:
            items.append(_Text(s[i:]))
            break
        j = found.start()
        if j > i:
            items.append(_Text(s[i:j]))
        char = s[j]
        if char == "\\":
            escaped = s[j + 1 : j + 2]
            if escaped and escaped in _ESCAPABLE:
                items.append(_Text(escaped))
                i = j + 2
            else:
                items.append(_Text("\\"))
                i = j + 1
        elif char == "`":
            n = _run_length(s, j)
            starts = backticks.get(n, [])
            k = bisect_left(starts, j + n)
            if k < len(starts):
                items.append(_Code(_code_span(s[j + n : starts[k]])))
                i = starts[k] + n
            else:
                items.append(_Text("`" * n))
                i = j + n
        elif char in "[!":
            link = _link_at(s, j, brackets, depth)
            if link is None:
                items.append(_Text(char))
                i = j + 1
            else:
                items.append(link[0])
                i = link[1]
        elif char == "<":
            auto = _AUTOLINK.match(s, j)
            items.append(_Link(auto[1], (_Text(auto[1]),)) if auto else _Text("<"))
            i = auto.end() if auto else j + 1
        else:
            n = _run_length(s, j)
            i = j + n
            if char == "~" and n != 2:
                items.append(_Text("~" * n))  # strikethrough is exactly two tildes
                continue
            delim = _Delim(char, n, *_flanking(s, j, i, char))
            if delim.can_close:
                _close(items, floors, delim)
            if delim.count:
                items.append(delim if delim.can_open else _Text(char * delim.count))
    return tuple(_literal(item) for item in items)


def _run_length(s: str, at: int) -> int:
    run = _RUNS[s[at]].match(s, at)
    assert run is not None
    return run.end() - at


def _code_span(content: str) -> str:
    # CommonMark: one space is stripped from each side, so `` `x` `` can show backticks.
    if len(content) > 2 and content[0] == content[-1] == " " and content.strip(" "):
        return content[1:-1]
    return content


def _match_brackets(s: str) -> dict[int, int]:
    """Each ``[`` to its matching ``]``, skipping backslash-escaped characters."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(s):
        char = s[i]
        if char == "\\":
            i += 1
        elif char == "[":
            stack.append(i)
        elif char == "]" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def _link_at(s: str, at: int, brackets: dict[int, int], depth: int) -> tuple[_Link, int] | None:
    """A ``[text](url)`` or ``![alt](url)`` at *at*, with the index after it."""
    open_at = at + 1 if s[at] == "!" else at
    close_at = brackets.get(open_at)
    if s[open_at : open_at + 1] != "[" or close_at is None:
        return None
    tail = _LINK_TAIL.match(s, close_at + 1)
    if tail is None:
        return None
    url = _UNESCAPE.sub(r"\1", tail[1].removeprefix("<").removesuffix(">"))
    if not url:
        return None
    label = s[open_at + 1 : close_at]
    children = _parse_inline(label, depth + 1) if depth < _MAX_DEPTH else (_Text(label),)
    return _Link(url, children), tail.end()


def _flanking(s: str, start: int, end: int, char: str) -> tuple[bool, bool]:
    """Whether the run ``s[start:end]`` can open and close emphasis (CommonMark 6.2)."""
    before = s[start - 1] if start else " "
    after = s[end] if end < len(s) else " "
    left = not after.isspace() and (not _is_punct(after) or before.isspace() or _is_punct(before))
    right = not before.isspace() and (not _is_punct(before) or after.isspace() or _is_punct(after))
    if char == "_":
        # Intraword underscores (snake_case) never make emphasis.
        return left and (not right or _is_punct(before)), right and (not left or _is_punct(after))
    return left, right


def _is_punct(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


def _close(items: list[_Inline | _Delim], floors: dict[str, int], closer: _Delim) -> None:
    """Pair *closer* with the openers before it, wrapping what lies between in spans."""
    while closer.count:
        k = len(items) - 1
        floor = floors.get(closer.char, 0)
        while k >= floor and not _opens(items[k], closer.char):
            k -= 1
        if k < floor:
            floors[closer.char] = len(items)
            return
        opener = items[k]
        assert isinstance(opener, _Delim)
        used = 2 if opener.count >= 2 and closer.count >= 2 else 1
        inner = tuple(_literal(item) for item in items[k + 1 :])
        del items[k + 1 :]
        opener.count -= used
        closer.count -= used
        if not opener.count:
            items.pop()
        style = "strike" if closer.char == "~" else _STYLES[closer.char, used]
        items.append(_Span(style, inner))
        for char, floor in floors.items():
            floors[char] = min(floor, len(items))


def _opens(item: _Inline | _Delim, char: str) -> bool:
    return isinstance(item, _Delim) and item.char == char and item.can_open


def _literal(item: _Inline | _Delim) -> _Inline:
    return _Text(item.char * item.count) if isinstance(item, _Delim) else item


# ---------------------------------------------------------------------------------------------
# Lines and blocks.

_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_QUOTE = re.compile(r" {0,3}> ?(.*)")
_BULLET = re.compile(r"([ \t]*)[-*+][ \t]+(.*)")
_ORDERED = re.compile(r"([ \t]*)(\d{1,9}[.)])[ \t]+(.*)")
_RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")

# A prose line, classified: (kind, prefix, content). The prefix is the indentation plus the
# marker of a numbered item, or the heading level as a string.
_Line: TypeAlias = tuple[str, str, str]


def _classify(line: str) -> _Line:
    if _RULE.fullmatch(line):
        return "rule", "", line
    if heading := _HEADING.fullmatch(line):
        return "heading", str(len(heading[1])), heading[2] or ""
    if quote := _QUOTE.fullmatch(line):
        return "quote", "", quote[1]
    if bullet := _BULLET.fullmatch(line):
        return "bullet", bullet[1], bullet[2]
    if ordered := _ORDERED.fullmatch(line):
        return "ordered", f"{ordered[1]}{ordered[2]} ", ordered[3]
    return "text", "", line


_CodeRenderer: TypeAlias = Callable[[FencedBlock, str, list[str]], str]
_ProseRenderer: TypeAlias = Callable[[list[str]], list[str]]


def _render(md: str, code: _CodeRenderer, prose: _ProseRenderer) -> str:
    """Split *md* into prose lines and fenced blocks and render each with its renderer; a
    code renderer gets the block, its body (dedented as CommonMark says) and its raw lines."""
    md = md.replace("\r\n", "\n")
    lines = md.split("\n")
    out: list[str] = []
    line_no = offset = 0
    for block in fenced_blocks(md):
        first = line_no + md.count("\n", offset, block.start)
        last = first + md.count("\n", block.start, block.end) if block.closed else len(lines) - 1
        out.extend(prose(lines[line_no:first]))
        body = md[block.body_start : block.body_end]
        body = body[:-1] if block.closed and body.endswith("\n") else body.rstrip("\n")
        if block.indent:
            body = "\n".join(_dedent(line, block.indent) for line in body.split("\n"))
        out.append(code(block, body, lines[first : last + 1]))
        line_no = last + 1
        newline = md.find("\n", block.end)
        offset = newline + 1 if block.closed and newline >= 0 else len(md)
    out.extend(prose(lines[line_no:]))
    return "\n".join(out)


def _dedent(line: str, indent: int) -> str:
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, indent) :]


def _language(info: str) -> str:
    word = info.split(maxsplit=1)[0] if info.strip() else ""
    return word if _LANGUAGE.fullmatch(word) else ""


# ---------------------------------------------------------------------------------------------
# Telegram HTML.

_TELEGRAM_TAGS = {"strong": "b", "em": "i", "strike": "s"}


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _telegram_inline(nodes: tuple[_Inline, ...], active: frozenset[str] = frozenset()) -> str:
    # Telegram refuses a link inside a link and code inside a link; a style already open is
    # not reopened (a heading's bold around **bold**).
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, _Text):
            parts.append(_html(node.text))
        elif isinstance(node, _Code):
            parts.append(_html(node.text) if "a" in active else f"<code>{_html(node.text)}</code>")
        elif isinstance(node, _Span):
            inner = _telegram_inline(node.children, active | {node.style})
            tag = _TELEGRAM_TAGS[node.style]
            parts.append(inner if node.style in active else f"<{tag}>{inner}</{tag}>")
        else:
            label = _telegram_inline(node.children, active | {"a"}) or _html(node.url)
            if "a" in active:
                parts.append(label)
            elif _OPENABLE.fullmatch(node.url):
                href = _html(node.url).replace('"', "&quot;")
                parts.append(f'<a href="{href}">{label}</a>')
            else:
                parts.append(f"{label} ({_html(node.url)})")
    return "".join(parts)


def _telegram_code(block: FencedBlock, body: str, raw: list[str]) -> str:
    language = _language(block.info)
    if language:
        return f'<pre><code class="language-{language}">{_html(body)}</code></pre>'
    return f"<pre>{_html(body)}</pre>"


def _telegram_prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    quote: list[str] = []
    for line in lines:
        kind, prefix, content = _classify(line)
        if kind == "quote":
            quote.append(_telegram_inline(_parse_inline(content)))
            continue
        if quote:
            out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote = []
        if kind == "heading":
            text = _telegram_inline(_parse_inline(content), frozenset({"strong"}))
            out.append(f"<b>{text}</b>" if text else "")
        elif kind == "bullet":
            out.append(_html(prefix) + "• " + _telegram_inline(_parse_inline(content)))
        elif kind == "ordered":
            out.append(_html(prefix) + _telegram_inline(_parse_inline(content)))
        elif kind == "rule":
            out.append(_html(content))
        else:
            out.append(_telegram_inline(_parse_inline(content)))
    if quote:
        out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
    return out


def to_telegram_html(md: str) -> str:
    """*md* as Telegram Bot API HTML (``parse_mode="HTML"``)."""
    return _render(md, _telegram_code, _telegram_prose)


# ---------------------------------------------------------------------------------------------
# Slack mrkdwn.

_SLACK_MARKS = {"strong": "*", "em": "_", "strike": "~"}


def _slack_inline(nodes: tuple[_Inline, ...], active: frozenset[str] = frozenset()) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, _Text):
            parts.append(_html(node.text))
        elif isinstance(node, _Code):
            parts.append(f"`{_html(node.text)}`")
        elif isinstance(node, _Span):
            inner = _slack_inline(node.children, active | {node.style})
            mark = _SLACK_MARKS[node.style]
            parts.append(inner if node.style in active else f"{mark}{inner}{mark}")
        else:
            label = _plain_inline(node.children)
            if not _OPENABLE.fullmatch(node.url):
                parts.append(f"{_html(label)} ({_html(node.url)})" if label else _html(node.url))
                continue
            # A "|" would end the URL inside <url|text>; percent-encoded, it means the same.
            url = _html(node.url).replace("|", "%7C")
            parts.append(f"<{url}|{_html(label)}>" if label and label != node.url else f"<{url}>")
    return "".join(parts)


def _slack_code(block: FencedBlock, body: str, raw: list[str]) -> str:
    # Slack has no language tag on code blocks; it would show as the first line of code.
    return f"```\n{_html(body)}\n```"


def _slack_prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        kind, prefix, content = _classify(line)
        if kind == "heading":
            text = _slack_inline(_parse_inline(content), frozenset({"strong"}))
            out.append(f"*{text}*" if text else "")
        elif kind == "quote":
            out.append("> " + _slack_inline(_parse_inline(content)))  # a raw ">" quotes
        elif kind == "bullet":
            out.append(prefix + "• " + _slack_inline(_parse_inline(content)))
        elif kind == "ordered":
            out.append(prefix + _slack_inline(_parse_inline(content)))
        elif kind == "rule":
            out.append(_html(content))
        else:
            out.append(_slack_inline(_parse_inline(content)))
    return out


def to_slack_mrkdwn(md: str) -> str:
    """*md* as Slack mrkdwn (the ``text`` of ``chat.postMessage`` or a mrkdwn text object)."""
    return _render(md, _slack_code, _slack_prose)


# ---------------------------------------------------------------------------------------------
# Discord, plain text, dispatch.


def _discord_code(block: FencedBlock, body: str, raw: list[str]) -> str:
    if block.marker[0] == "~" and "```" not in body:
        # Discord only knows backtick fences (and would draw "~~" as strikethrough).
        return f"```{block.info}\n{body}\n```"
    # Discord shows an unclosed fence as text; CommonMark, and the model, meant code.
    return "\n".join(raw if block.closed else [*raw, block.marker])


def _discord_prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        kind, level, content = _classify(line)
        # Discord draws "#" to "###" headings; deeper ones would show their hashes.
        out.append(f"**{content}**" if kind == "heading" and int(level) > 3 and content else line)
    return out


def to_discord(md: str) -> str:
    """*md* as Discord Markdown: unchanged but for headings and fences Discord cannot draw."""
    return _render(md, _discord_code, _discord_prose)


def _plain_inline(nodes: tuple[_Inline, ...]) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, _Text | _Code):
            parts.append(node.text)
        elif isinstance(node, _Span):
            parts.append(_plain_inline(node.children))
        else:
            label = _plain_inline(node.children)
            parts.append(f"{label} ({node.url})" if label and label != node.url else node.url)
    return "".join(parts)


def _plain_code(block: FencedBlock, body: str, raw: list[str]) -> str:
    return body


def _plain_prose(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        kind, prefix, content = _classify(line)
        text = content if kind == "rule" else _plain_inline(_parse_inline(content))
        if kind == "quote":
            text = "> " + text
        elif kind == "bullet":
            text = prefix + "• " + text
        elif kind == "ordered":
            text = prefix + text
        out.append(text)
    return out


def to_plain(md: str) -> str:
    """*md* as plain text: the fallback when a platform rejects the formatted text."""
    return _render(md, _plain_code, _plain_prose)


def _markdown(md: str) -> str:
    return md


_RENDERERS: Mapping[str, Callable[[str], str]] = MappingProxyType(
    {
        "telegram_html": to_telegram_html,
        "slack_mrkdwn": to_slack_mrkdwn,
        "discord": to_discord,
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
