"""Markdown parsed once and rendered for each platform (PIPELINE §3.2).

One table per construct: each row is the Markdown and what every platform receives, so a reader
sees at a glance how one answer looks on Telegram, Slack, WhatsApp, Discord, Matrix and as plain
text. Malformed input has its own table; property tests feed arbitrary Markdown-ish text to every
renderer and check the HTML they produce is always well formed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postroom.core.chunking import chunk_text
from postroom.core.formatting import (
    FORMAT_STYLES,
    format_for,
    format_within,
    has_markup,
    to_telegram_html,
)

STYLES = ("telegram_html", "slack_mrkdwn", "whatsapp", "discord", "matrix_html", "plain")

# Each row: the Markdown, then its rendering in each of STYLES, in that order.
TABLE: dict[str, tuple[str, tuple[str, str, str, str, str, str]]] = {
    # -- headings
    "heading": (
        "# Title\n\ntext",
        (
            "<b>Title</b>\n\ntext",
            "*Title*\n\ntext",
            "*Title*\n\ntext",
            "# Title\n\ntext",
            "<h1>Title</h1>\n<p>text</p>",
            "Title\n\ntext",
        ),
    ),
    "heading-deep": (
        "#### Four",
        ("<b>Four</b>", "*Four*", "*Four*", "**Four**", "<h4>Four</h4>", "Four"),
    ),
    "heading-with-bold": (
        "## **Bold** title",
        (
            "<b>Bold title</b>",
            "*Bold title*",
            "*Bold title*",
            "## Bold title",
            "<h2><strong>Bold</strong> title</h2>",
            "Bold title",
        ),
    ),
    "hashtag-is-no-heading": (
        "#hashtag",
        ("#hashtag", "#hashtag", "#hashtag", "#hashtag", "<p>#hashtag</p>", "#hashtag"),
    ),
    # -- emphasis
    "emphasis": (
        "**b** *i* _i_ ~~s~~",
        (
            "<b>b</b> <i>i</i> <i>i</i> <s>s</s>",
            "*b* _i_ _i_ ~s~",
            "*b* _i_ _i_ ~s~",
            "**b** *i* *i* ~~s~~",
            "<p><strong>b</strong> <em>i</em> <em>i</em> <del>s</del></p>",
            "b i i s",
        ),
    ),
    "emphasis-nested": (
        "***both*** *a **b** c*",
        (
            "<i><b>both</b></i> <i>a <b>b</b> c</i>",
            "_*both*_ _a *b* c_",
            "_*both*_ _a *b* c_",
            "***both*** *a **b** c*",
            "<p><em><strong>both</strong></em> <em>a <strong>b</strong> c</em></p>",
            "both a b c",
        ),
    ),
    "underscores-bold-is-not-underline-on-discord": (
        "__bold__ snake_case",
        (
            "<b>bold</b> snake_case",
            "*bold* snake_case",
            "*bold* snake_case",
            "**bold** snake\\_case",
            "<p><strong>bold</strong> snake_case</p>",
            "bold snake_case",
        ),
    ),
    # -- lists
    "nested-list": (
        "- one\n  - two\n    1. three\n- four",
        (
            "• one\n  • two\n    1. three\n• four",
            "• one\n  • two\n    1. three\n• four",
            "• one\n  • two\n    1. three\n• four",
            "- one\n  - two\n    1. three\n- four",
            "<ul>\n<li>one\n<ul>\n<li>two\n<ol>\n<li>three</li>\n</ol></li>\n</ul></li>\n"
            "<li>four</li>\n</ul>",
            "• one\n  • two\n    1. three\n• four",
        ),
    ),
    "ordered-list-from-three": (
        "3. three\n4. *four*",
        (
            "3. three\n4. <i>four</i>",
            "3. three\n4. _four_",
            "3. three\n4. _four_",
            "3. three\n4. *four*",
            '<ol start="3">\n<li>three</li>\n<li><em>four</em></li>\n</ol>',
            "3. three\n4. four",
        ),
    ),
    "loose-list-keeps-its-blank-lines": (
        "- a\n\n- b\n\nafter",
        (
            "• a\n\n• b\n\nafter",
            "• a\n\n• b\n\nafter",
            "• a\n\n• b\n\nafter",
            "- a\n\n- b\n\nafter",
            "<ul>\n<li><p>a</p></li>\n<li><p>b</p></li>\n</ul>\n<p>after</p>",
            "• a\n\n• b\n\nafter",
        ),
    ),
    "list-item-with-code": (
        "- run:\n  ```sh\n  ls\n  ```",
        (
            '• run:\n<pre><code class="language-sh">ls</code></pre>',
            "• run:\n```\nls\n```",
            "• run:\n```\nls\n```",
            "- run:\n```sh\nls\n```",
            '<ul>\n<li>run:\n<pre><code class="language-sh">ls</code></pre></li>\n</ul>',
            "• run:\nls",
        ),
    ),
    # -- links
    "link": (
        "[docs](https://e.com/?a=1&b=2)",
        (
            '<a href="https://e.com/?a=1&amp;b=2">docs</a>',
            "<https://e.com/?a=1&amp;b=2|docs>",
            "docs (https://e.com/?a=1&b=2)",
            "[docs](https://e.com/?a=1&b=2)",
            '<p><a href="https://e.com/?a=1&amp;b=2">docs</a></p>',
            "docs (https://e.com/?a=1&b=2)",
        ),
    ),
    "link-with-bold-label": (
        "[**b** x](https://e.com)",
        (
            '<a href="https://e.com"><b>b</b> x</a>',
            "<https://e.com|b x>",
            "*b* x (https://e.com)",
            "[**b** x](https://e.com)",
            '<p><a href="https://e.com"><strong>b</strong> x</a></p>',
            "b x (https://e.com)",
        ),
    ),
    "bare-links": (
        "see https://e.com/a_b and <https://f.org>",
        (
            'see <a href="https://e.com/a_b">https://e.com/a_b</a> and '
            '<a href="https://f.org">https://f.org</a>',
            "see <https://e.com/a_b> and <https://f.org>",
            "see https://e.com/a_b and https://f.org",
            "see https://e.com/a_b and https://f.org",
            '<p>see <a href="https://e.com/a_b">https://e.com/a_b</a> and '
            '<a href="https://f.org">https://f.org</a></p>',
            "see https://e.com/a_b and https://f.org",
        ),
    ),
    "relative-link-as-text": (
        "[rel](/docs/a)",
        (
            "rel (/docs/a)",
            "rel (/docs/a)",
            "rel (/docs/a)",
            "rel (/docs/a)",
            "<p>rel (/docs/a)</p>",
            "rel (/docs/a)",
        ),
    ),
    "javascript-link-is-text": (
        "[js](javascript:alert(1))",
        (
            "[js](javascript:alert(1))",
            "[js](javascript:alert(1))",
            "[js](javascript:alert(1))",
            "\\[js\\](javascript:alert(1))",
            "<p>[js](javascript:alert(1))</p>",
            "[js](javascript:alert(1))",
        ),
    ),
    "parentheses-in-a-link": (
        "[Foo](https://e.org/wiki/Foo_(bar))",
        (
            '<a href="https://e.org/wiki/Foo_(bar)">Foo</a>',
            "<https://e.org/wiki/Foo_(bar)|Foo>",
            "Foo (https://e.org/wiki/Foo_(bar))",
            "[Foo](https://e.org/wiki/Foo_%28bar%29)",
            '<p><a href="https://e.org/wiki/Foo_(bar)">Foo</a></p>',
            "Foo (https://e.org/wiki/Foo_(bar))",
        ),
    ),
    "image-is-a-link": (
        "![cat](https://e.com/c.png)",
        (
            '<a href="https://e.com/c.png">cat</a>',
            "<https://e.com/c.png|cat>",
            "cat (https://e.com/c.png)",
            "[cat](https://e.com/c.png)",
            '<p><a href="https://e.com/c.png">cat</a></p>',
            "cat (https://e.com/c.png)",
        ),
    ),
    # -- code
    "inline-code": (
        "`x < y && **z**`",
        (
            "<code>x &lt; y &amp;&amp; **z**</code>",
            "`x &lt; y &amp;&amp; **z**`",
            "`x < y && **z**`",
            "`x < y && **z**`",
            "<p><code>x &lt; y &amp;&amp; **z**</code></p>",
            "x < y && **z**",
        ),
    ),
    "fenced-code": (
        "```python\nif a < b:\n    x = '&'\n```",
        (
            "<pre><code class=\"language-python\">if a &lt; b:\n    x = '&amp;'</code></pre>",
            "```\nif a &lt; b:\n    x = '&amp;'\n```",
            "```\nif a < b:\n    x = '&'\n```",
            "```python\nif a < b:\n    x = '&'\n```",
            "<pre><code class=\"language-python\">if a &lt; b:\n    x = '&amp;'</code></pre>",
            "if a < b:\n    x = '&'",
        ),
    ),
    "tilde-fence": (
        "~~~\n**x**\n~~~",
        (
            "<pre>**x**</pre>",
            "```\n**x**\n```",
            "```\n**x**\n```",
            "```\n**x**\n```",
            "<pre><code>**x**</code></pre>",
            "**x**",
        ),
    ),
    "fence-holding-backticks": (
        "~~~\n```\n~~~",
        (
            "<pre>```</pre>",
            "```\n``\u200b`\n```",
            "```\n``\u200b`\n```",
            "```\n``\u200b`\n```",
            "<pre><code>```</code></pre>",
            "```",
        ),
    ),
    # -- block quotes
    "quote": (
        "> quoted *a*\n> more\n\nafter",
        (
            "<blockquote>quoted <i>a</i>\nmore</blockquote>\n\nafter",
            "> quoted _a_\n> more\n\nafter",
            "> quoted _a_\n> more\n\nafter",
            "> quoted *a*\n> more\n\nafter",
            "<blockquote>\n<p>quoted <em>a</em><br>more</p>\n</blockquote>\n<p>after</p>",
            "> quoted a\n> more\n\nafter",
        ),
    ),
    "quote-in-quote": (
        "> a\n>> b",
        (
            "<blockquote>a\n&gt; b</blockquote>",
            "> a\n> > b",
            "> a\n> > b",
            "> a\n> > b",
            "<blockquote>\n<p>a</p>\n<blockquote>\n<p>b</p>\n</blockquote>\n</blockquote>",
            "> a\n> > b",
        ),
    ),
    # -- tables
    "table": (
        "| name | n |\n|:--|--:|\n| a & b | 10 |\n| **c** | 2 |",
        (
            "<pre>name  |  n\n------+---\na &amp; b | 10\nc     |  2</pre>",
            "```\nname  |  n\n------+---\na &amp; b | 10\nc     |  2\n```",
            "```\nname  |  n\n------+---\na & b | 10\nc     |  2\n```",
            "```\nname  |  n\n------+---\na & b | 10\nc     |  2\n```",
            "<table><thead><tr><th>name</th><th>n</th></tr></thead><tbody><tr><td>a &amp; b</td>"
            "<td>10</td></tr><tr><td><strong>c</strong></td><td>2</td></tr></tbody></table>",
            "name  |  n\n------+---\na & b | 10\nc     |  2",
        ),
    ),
    "rule": (
        "a\n\n---\n\nb",
        (
            "a\n\n———\n\nb",
            "a\n\n———\n\nb",
            "a\n\n———\n\nb",
            "a\n\n———\n\nb",
            "<p>a</p>\n<hr>\n<p>b</p>",
            "a\n\n———\n\nb",
        ),
    ),
}

# Input a model gets wrong: every renderer shows it as the text it is, and never fails.
MALFORMED: dict[str, tuple[str, tuple[str, str, str, str, str, str]]] = {
    "unclosed-bold": (
        "**unclosed bold",
        (
            "**unclosed bold",
            "**unclosed bold",
            "**unclosed bold",
            "\\*\\*unclosed bold",
            "<p>**unclosed bold</p>",
            "**unclosed bold",
        ),
    ),
    "stray-html-and-ampersands": (
        "a < b & c > d <b>x</b> <script>alert(1)</script>",
        (
            "a &lt; b &amp; c &gt; d &lt;b&gt;x&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;",
            "a &lt; b &amp; c &gt; d &lt;b&gt;x&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;",
            "a < b & c > d <b>x</b> <script>alert(1)</script>",
            "a < b & c > d <b>x</b> <script>alert(1)</script>",
            "<p>a &lt; b &amp; c &gt; d &lt;b&gt;x&lt;/b&gt; "
            "&lt;script&gt;alert(1)&lt;/script&gt;</p>",
            "a < b & c > d <b>x</b> <script>alert(1)</script>",
        ),
    ),
    "unbalanced-backticks": (
        "`open <x> and ``two",
        (
            "`open &lt;x&gt; and ``two",
            "`open &lt;x&gt; and ``two",
            "`open <x> and ``two",
            "\\`open <x> and \\`\\`two",
            "<p>`open &lt;x&gt; and ``two</p>",
            "`open <x> and ``two",
        ),
    ),
    "unclosed-fence-runs-to-the-end": (
        "```\nnever closed <x>",
        (
            "<pre>never closed &lt;x&gt;</pre>",
            "```\nnever closed &lt;x&gt;\n```",
            "```\nnever closed <x>\n```",
            "```\nnever closed <x>\n```",
            "<pre><code>never closed &lt;x&gt;</code></pre>",
            "never closed <x>",
        ),
    ),
    "unclosed-link": (
        "[text](https://e.com",
        (
            '[text](<a href="https://e.com">https://e.com</a>',
            "[text](<https://e.com>",
            "[text](https://e.com",
            "\\[text\\](https://e.com",
            '<p>[text](<a href="https://e.com">https://e.com</a></p>',
            "[text](https://e.com",
        ),
    ),
    "spaced-asterisks": (
        "2 * 3 * 4 = 24",
        (
            "2 * 3 * 4 = 24",
            "2 * 3 * 4 = 24",
            "2 * 3 * 4 = 24",
            "2 \\* 3 \\* 4 = 24",
            "<p>2 * 3 * 4 = 24</p>",
            "2 * 3 * 4 = 24",
        ),
    ),
    "mentions-stay-text-on-slack": (
        "<!channel> ping",
        (
            "&lt;!channel&gt; ping",
            "&lt;!channel&gt; ping",
            "<!channel> ping",
            "<!channel> ping",
            "<p>&lt;!channel&gt; ping</p>",
            "<!channel> ping",
        ),
    ),
    "backslash-escapes": (
        "\\*not\\* \\# \\<",
        (
            "*not* # &lt;",
            "*not* # &lt;",
            "*not* # <",
            "\\*not\\* # <",
            "<p>*not* # &lt;</p>",
            "*not* # <",
        ),
    ),
}


def _rows(
    table: dict[str, tuple[str, tuple[str, str, str, str, str, str]]],
) -> list[object]:
    return [
        pytest.param(md, style, out, id=f"{name}-{style}")
        for name, (md, outs) in table.items()
        for style, out in zip(STYLES, outs, strict=True)
    ]


@pytest.mark.parametrize(("md", "style", "expected"), _rows(TABLE))
def test_each_platform_renders_the_construct(md: str, style: str, expected: str) -> None:
    assert format_for(style, md) == expected


@pytest.mark.parametrize(("md", "style", "expected"), _rows(MALFORMED))
def test_malformed_markdown_shows_as_text(md: str, style: str, expected: str) -> None:
    out = format_for(style, md)
    assert out == expected
    if style == "telegram_html":
        assert_valid_telegram_html(out)
    if style == "matrix_html":
        assert_valid_matrix_html(out)


def test_markdown_style_is_the_text_unchanged() -> None:
    md = "# T\n**b** [l](https://e.com) <x>"
    assert format_for("markdown", md) == md
    assert {*STYLES, "markdown"} == FORMAT_STYLES


@pytest.mark.parametrize("style", ["html", "", "Telegram_HTML", "mrkdwn"])
def test_unknown_style_is_refused(style: str) -> None:
    with pytest.raises(ValueError, match="unknown format style"):
        format_for(style, "x")


@pytest.mark.parametrize(
    ("md", "markup"),
    [
        ("just words\nover two lines\n\nand a paragraph", False),
        ("a < b & c", False),
        ("**bold**", True),
        ("- item", True),
        ("see https://e.com", True),
    ],
)
def test_has_markup(md: str, markup: bool) -> None:
    assert has_markup(md) is markup


# ------------------------------------------------------------------------ well-formed output

_TELEGRAM_TAG = re.compile(
    r'<(/?)(b|i|s|code|pre|blockquote|a)((?: href="[^"<>]*")|(?: class="language-[^"<>]+"))?>'
)
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot);")


def assert_valid_telegram_html(out: str) -> None:
    """Only Telegram's tags, properly nested, no link or code in a link, no quote in a
    quote, and no bare < > & anywhere else."""
    stack: list[str] = []
    for tag in _TELEGRAM_TAG.finditer(out):
        closing, name = tag[1], tag[2]
        if closing:
            assert stack and stack[-1] == name, out
            stack.pop()
            continue
        if name in ("a", "code"):
            assert "a" not in stack, out
        if name == "blockquote":
            assert "blockquote" not in stack, out
        stack.append(name)
    assert not stack, out
    rest = _ENTITY.sub("", _TELEGRAM_TAG.sub("", out))
    assert not set(rest) & set("<>&"), out


_MATRIX_TAGS = {
    "p": set(),
    "h1": set(),
    "h2": set(),
    "h3": set(),
    "h4": set(),
    "h5": set(),
    "h6": set(),
    "ul": set(),
    "ol": {"start"},
    "li": set(),
    "blockquote": set(),
    "pre": set(),
    "code": {"class"},
    "table": set(),
    "thead": set(),
    "tbody": set(),
    "tr": set(),
    "th": set(),
    "td": set(),
    "strong": set(),
    "em": set(),
    "del": set(),
    "a": {"href"},
    "br": set(),
    "hr": set(),
}
_VOID = {"br", "hr"}


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _MATRIX_TAGS:
            self.problems.append(f"tag {tag}")
        for name, value in attrs:
            if name not in _MATRIX_TAGS.get(tag, set()):
                self.problems.append(f"attribute {name} on {tag}")
            if name == "href" and not re.match(r"(https?|ftp|tg)://|mailto:", value or ""):
                self.problems.append(f"href {value}")
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"unbalanced </{tag}>")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if set(data) & set("<>"):
            self.problems.append(f"raw text {data!r}")


def assert_valid_matrix_html(out: str) -> None:
    checker = _Checker()
    checker.feed(out)
    checker.close()
    assert not checker.problems and not checker.stack, (checker.problems, checker.stack, out)
    assert not set(_ENTITY.sub("", re.sub(r"<[^<>]*>", "", out))) & set("&<>"), out


# Pieces of Markdown, so that markers meet each other far more often than in random text.
_MARKDOWNISH = st.lists(
    st.sampled_from(
        [
            *"ab \n*_~`[]()<>&!#->|\\1.:/",
            "https://e.com",
            "```",
            "~~",
            "**",
            "\n> ",
            "\n- ",
            "\n1. ",
            "\n| a | b |\n|---|---|\n",
            "<script>",
            "&amp;",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(md=_MARKDOWNISH)
def test_any_markdown_gives_valid_telegram_and_matrix_html(md: str) -> None:
    assert_valid_telegram_html(format_for("telegram_html", md))
    assert_valid_matrix_html(format_for("matrix_html", md))


_SLACK_LINK = re.compile(
    r"<(?:https?|ftp|tg)://[^\s<>|]+(?:\|[^<>]*)?>|<mailto:[^\s<>|]+(?:\|[^<>]*)?>"
)


@settings(max_examples=150, deadline=None)
@given(md=_MARKDOWNISH)
def test_slack_never_leaves_a_bare_control_character(md: str) -> None:
    out = format_for("slack_mrkdwn", md)
    rest = _ENTITY.sub("", _SLACK_LINK.sub("", out))
    # A raw '>' is allowed only as a quote marker: at the start of a line or of a list item.
    rest = re.sub(r"(?m)^[ \t]*(?:(?:•|\d+[.)]) )?(?:> ?)+", "", rest)
    assert not set(rest) & set("<>&"), out


_WORDS = st.lists(
    st.lists(st.text(alphabet="abcxyz,?'\"", min_size=1, max_size=8), min_size=1, max_size=6).map(
        " ".join
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=100, deadline=None)
@given(lines=_WORDS, blank=st.booleans())
def test_text_without_markdown_is_unchanged(lines: list[str], blank: bool) -> None:
    md = ("\n\n" if blank else "\n").join(lines)
    for style in STYLES:
        if style != "matrix_html":
            assert format_for(style, md) == md, style


@settings(max_examples=100, deadline=None)
@given(md=st.text(max_size=200))
def test_every_style_renders_any_text(md: str) -> None:
    for style in FORMAT_STYLES:
        assert isinstance(format_for(style, md), str)


# ------------------------------------------------------------------ chunks and long messages


@settings(max_examples=60, deadline=None)
@given(md=_MARKDOWNISH.map(lambda s: s * 6), limit=st.integers(min_value=16, max_value=120))
def test_every_chunk_renders_as_valid_html_on_its_own(md: str, limit: int) -> None:
    # The outbox cuts the Markdown and each chunk is formatted on its own: a tag, an entity or
    # a code block can never be split between two messages.
    for piece in chunk_text(md, limit):
        assert_valid_telegram_html(to_telegram_html(piece))
        assert_valid_matrix_html(format_for("matrix_html", piece))


def test_format_within_cuts_a_text_that_formatting_lengthened() -> None:
    md = " ".join(["snake_case_name"] * 200)  # 3,199 characters; Discord escapes every "_"
    assert len(format_for("discord", md)) > 3200
    pieces = format_within("discord", md, 2000)
    assert len(pieces) >= 2
    assert all(len(piece) <= 2000 for piece in pieces)
    assert "".join(p.replace("\\", "") for p in pieces).replace(" ", "") == md.replace(" ", "")
    assert format_within("discord", "short", 2000) == ["short"]


def test_format_within_measures_as_the_platform_counts() -> None:
    md = "a & b " * 100
    visible = lambda text: len(text.replace("&amp;", "&"))  # noqa: E731
    assert format_within("telegram_html", md, 600, measure=visible) == [to_telegram_html(md)]
    assert len(format_within("telegram_html", md, 600)) > 1
