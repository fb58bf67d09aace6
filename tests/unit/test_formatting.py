"""Markdown rendered for each platform (PIPELINE §3.2)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postroom.core.formatting import (
    FORMAT_STYLES,
    format_for,
    to_discord,
    to_plain,
    to_slack_mrkdwn,
    to_telegram_html,
)

# ---------------------------------------------------------------------------------------------
# Telegram HTML.


@pytest.mark.parametrize(
    ("md", "html"),
    [
        pytest.param("plain words", "plain words", id="plain"),
        pytest.param("**bold** and __bold__", "<b>bold</b> and <b>bold</b>", id="bold"),
        pytest.param("*it* and _it_", "<i>it</i> and <i>it</i>", id="italic"),
        pytest.param("~~gone~~", "<s>gone</s>", id="strike"),
        pytest.param("***both***", "<i><b>both</b></i>", id="bold-italic"),
        pytest.param("*a **b** c*", "<i>a <b>b</b> c</i>", id="nested"),
        pytest.param("`x < y && z`", "<code>x &lt; y &amp;&amp; z</code>", id="code-escaped"),
        pytest.param("`**not bold**`", "<code>**not bold**</code>", id="code-untouched"),
        pytest.param("``a ` b``", "<code>a ` b</code>", id="code-with-backtick"),
        pytest.param("```inline```", "<code>inline</code>", id="triple-backtick-inline"),
        pytest.param("`` `x` ``", "<code>`x`</code>", id="code-span-padding"),
        pytest.param(
            "[docs](https://e.com/?a=1&b=2)",
            '<a href="https://e.com/?a=1&amp;b=2">docs</a>',
            id="link",
        ),
        pytest.param(
            '[q](https://e.com/"x")', '<a href="https://e.com/&quot;x&quot;">q</a>', id="quote-url"
        ),
        pytest.param(
            "[**b** x](https://e.com)", '<a href="https://e.com"><b>b</b> x</a>', id="b-link"
        ),
        pytest.param("[`c`](https://e.com)", '<a href="https://e.com">c</a>', id="no-code-in-link"),
        pytest.param(
            "[](https://e.com)", '<a href="https://e.com">https://e.com</a>', id="no-label"
        ),
        pytest.param("[rel](/docs/a)", "rel (/docs/a)", id="relative-link-as-text"),
        pytest.param("[js](javascript:alert(1))", "js (javascript:alert(1))", id="unsafe-link"),
        pytest.param("<https://e.com>", '<a href="https://e.com">https://e.com</a>', id="autolink"),
        pytest.param(
            "![cat](https://e.com/c.png)", '<a href="https://e.com/c.png">cat</a>', id="img"
        ),
        pytest.param("# Title", "<b>Title</b>", id="heading"),
        pytest.param("### Title ###", "<b>Title</b>", id="heading-closed"),
        pytest.param("## **Bold** title", "<b>Bold title</b>", id="heading-no-nested-b"),
        pytest.param("#hashtag", "#hashtag", id="hashtag-is-no-heading"),
        pytest.param("- one\n* two\n+ three", "• one\n• two\n• three", id="bullets"),
        pytest.param("  - nested *x*", "  • nested <i>x</i>", id="nested-bullet"),
        pytest.param("1. first\n2) second", "1. first\n2) second", id="numbered"),
        pytest.param(
            "> quoted *a*\n> more\nafter",
            "<blockquote>quoted <i>a</i>\nmore</blockquote>\nafter",
            id="quote",
        ),
        pytest.param("---", "---", id="rule"),
        pytest.param(
            "```python\nif a < b:\n    x = '&'\n```",
            "<pre><code class=\"language-python\">if a &lt; b:\n    x = '&amp;'</code></pre>",
            id="code-block",
        ),
        pytest.param("```\n**x**\n```", "<pre>**x**</pre>", id="code-block-no-language"),
        pytest.param("~~~ {weird}\nx\n~~~", "<pre>x</pre>", id="unusable-language"),
        pytest.param(
            "- a:\n  ```sh\n  ls\n  ```",
            '• a:\n<pre><code class="language-sh">ls</code></pre>',
            id="list-fence",
        ),
    ],
)
def test_telegram_html(md: str, html: str) -> None:
    assert to_telegram_html(md) == html


@pytest.mark.parametrize(
    ("md", "html"),
    [
        pytest.param("a < b > c & d", "a &lt; b &gt; c &amp; d", id="escape"),
        pytest.param("<b>not html</b>", "&lt;b&gt;not html&lt;/b&gt;", id="html-is-text"),
        pytest.param("&amp; stays literal", "&amp;amp; stays literal", id="entity-is-text"),
        pytest.param("**unclosed bold", "**unclosed bold", id="unclosed-bold"),
        pytest.param("bold**", "bold**", id="closer-only"),
        pytest.param("`unclosed code <x>", "`unclosed code &lt;x&gt;", id="unclosed-code"),
        pytest.param("[text](https://e.com", "[text](https://e.com", id="unclosed-link"),
        pytest.param("[text] (https://e.com)", "[text] (https://e.com)", id="not-a-link"),
        pytest.param("[text](<>)", "[text](&lt;&gt;)", id="empty-destination"),
        pytest.param("~~x and ~y~", "~~x and ~y~", id="tildes"),
        pytest.param("2 * 3 * 4 = 24", "2 * 3 * 4 = 24", id="spaced-asterisks"),
        pytest.param("snake_case_name", "snake_case_name", id="intraword-underscore"),
        pytest.param("**a *b** c*", None, id="crossed"),
        pytest.param("\\*not\\* \\<", "*not* &lt;", id="backslash-escapes"),
        pytest.param("```\nnever closed <x>", "<pre>never closed &lt;x&gt;</pre>", id="open-fence"),
        pytest.param("[" * 50 + "x](https://e.com)" * 50, None, id="deep-brackets"),
    ],
)
def test_telegram_html_degrades_to_escaped_text(md: str, html: str | None) -> None:
    out = to_telegram_html(md)
    assert_valid_telegram_html(out)
    if html is not None:
        assert out == html


_TAG = re.compile(
    r'<(/?)(b|i|s|u|code|pre|blockquote|a)((?: href="[^"<>]*")|(?: class="language-[^"<>]+"))?>'
)
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot);")


def assert_valid_telegram_html(out: str) -> None:
    """Only Telegram's tags, properly nested, and no bare < > & anywhere else."""
    stack: list[str] = []
    for tag in _TAG.finditer(out):
        closing, name = tag[1], tag[2]
        if closing:
            assert stack and stack[-1] == name, out
            stack.pop()
        else:
            stack.append(name)
    assert not stack, out
    rest = _ENTITY.sub("", _TAG.sub("", out))
    assert not set(rest) & set("<>&"), out


# Pieces of Markdown, so that markers meet each other far more often than in random text.
_MARKDOWNISH = st.lists(
    st.sampled_from([*"ab \n*_~`[]()<>&!#->\\1.:/", "https://e.com", "```", "~~", "**", "\n> "]),
    max_size=40,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(md=_MARKDOWNISH)
def test_any_markdown_gives_valid_telegram_html(md: str) -> None:
    assert_valid_telegram_html(to_telegram_html(md))


# ---------------------------------------------------------------------------------------------
# Slack mrkdwn.


@pytest.mark.parametrize(
    ("md", "mrkdwn"),
    [
        pytest.param("**bold** *it* _it_ ~~s~~", "*bold* _it_ _it_ ~s~", id="emphasis"),
        pytest.param("***both***", "_*both*_", id="bold-italic"),
        pytest.param("`a <b> & c`", "`a &lt;b&gt; &amp; c`", id="code-escaped"),
        pytest.param("a < b & c > d", "a &lt; b &amp; c &gt; d", id="escape"),
        pytest.param("<!channel> <@U123>", "&lt;!channel&gt; &lt;@U123&gt;", id="no-mentions"),
        pytest.param(
            "[docs](https://e.com/a?b=1&c=2)", "<https://e.com/a?b=1&amp;c=2|docs>", id="link"
        ),
        pytest.param("[x|y](https://e.com/p|q)", "<https://e.com/p%7Cq|x|y>", id="pipe-in-url"),
        pytest.param("[a > b](https://e.com)", "<https://e.com|a &gt; b>", id="label-escaped"),
        pytest.param("[https://e.com](https://e.com)", "<https://e.com>", id="label-is-url"),
        pytest.param("<https://e.com>", "<https://e.com>", id="autolink"),
        pytest.param("[rel](./a.md)", "rel (./a.md)", id="relative-link"),
        pytest.param("# Head **x**", "*Head x*", id="heading"),
        pytest.param("- one\n  - two", "• one\n  • two", id="bullets"),
        pytest.param("3. three", "3. three", id="numbered"),
        pytest.param("***", "***", id="rule"),
        pytest.param("> quote & *it*", "> quote &amp; _it_", id="quote"),
        pytest.param("```python\nx = a < b\n```", "```\nx = a &lt; b\n```", id="code-block"),
        pytest.param("**unclosed & <", "**unclosed &amp; &lt;", id="malformed"),
        pytest.param("```\nopen", "```\nopen\n```", id="open-fence"),
    ],
)
def test_slack_mrkdwn(md: str, mrkdwn: str) -> None:
    assert to_slack_mrkdwn(md) == mrkdwn


_SLACK_LINK = re.compile(
    r"<(?:https?|ftp|tg)://[^\s<>|]+(?:\|[^<>]*)?>|<mailto:[^\s<>|]+(?:\|[^<>]*)?>"
)


@settings(max_examples=150, deadline=None)
@given(md=_MARKDOWNISH)
def test_slack_never_leaves_a_bare_control_character(md: str) -> None:
    out = to_slack_mrkdwn(md)
    rest = _ENTITY.sub("", _SLACK_LINK.sub("", out))
    # A raw '>' is allowed only as the quote marker at the start of a line.
    rest = re.sub(r"(?m)^> ", "", rest)
    assert not set(rest) & set("<>&"), out


# ---------------------------------------------------------------------------------------------
# Discord and plain text.


@pytest.mark.parametrize(
    ("md", "out"),
    [
        pytest.param("**b** *i* ~~s~~ `c` <x> & [l](https://e.com)", None, id="identity"),
        pytest.param("# One\n## Two\n### Three", None, id="headings-kept"),
        pytest.param("> quote\n- item\n1. item", None, id="blocks-kept"),
        pytest.param("```py\nx = 1\n```", None, id="fence-kept"),
        pytest.param("#### Four\n###### Six", "**Four**\n**Six**", id="deep-headings-bold"),
        pytest.param("```\n#### not a heading\n```", None, id="code-untouched"),
        pytest.param("~~~sh\nls\n~~~", "```sh\nls\n```", id="tilde-fence"),
        pytest.param("~~~\n```\n~~~", None, id="tilde-fence-holding-backticks"),
        pytest.param("```\nopen", "```\nopen\n```", id="open-fence-closed"),
    ],
)
def test_discord(md: str, out: str | None) -> None:
    assert to_discord(md) == (md if out is None else out)


@pytest.mark.parametrize(
    ("md", "plain"),
    [
        pytest.param("**b** *i* _i_ ~~s~~ `c`", "b i i s c", id="markers-removed"),
        pytest.param("[docs](https://e.com)", "docs (https://e.com)", id="link"),
        pytest.param("[https://e.com](https://e.com)", "https://e.com", id="link-label-is-url"),
        pytest.param("<https://e.com>", "https://e.com", id="autolink"),
        pytest.param("# Title\ntext", "Title\ntext", id="heading"),
        pytest.param("- a\n  * b\n1. c", "• a\n  • b\n1. c", id="lists"),
        pytest.param("> q *x*", "> q x", id="quote"),
        pytest.param("a < b & c", "a < b & c", id="no-escaping"),
        pytest.param(
            "```python\ndef f():\n    return '**x**'\n```\nafter",
            "def f():\n    return '**x**'\nafter",
            id="code-block",
        ),
        pytest.param("`**x**`", "**x**", id="code-span"),
        pytest.param("**unclosed [x](", "**unclosed [x](", id="malformed"),
        pytest.param("a\\_b\\_c", "a_b_c", id="escapes"),
    ],
)
def test_plain(md: str, plain: str) -> None:
    assert to_plain(md) == plain


@settings(max_examples=100, deadline=None)
@given(md=st.text(alphabet=st.sampled_from(list("abc xyz,.?'\"\n")), max_size=80))
def test_text_without_markdown_is_unchanged(md: str) -> None:
    for render in (to_plain, to_discord, to_slack_mrkdwn, to_telegram_html):
        assert render(md) == md


@settings(max_examples=100, deadline=None)
@given(md=st.text(max_size=120))
def test_every_style_renders_any_text(md: str) -> None:
    for style in FORMAT_STYLES:
        assert isinstance(format_for(style, md), str)


# ---------------------------------------------------------------------------------------------
# Dispatch.


def test_format_for_dispatches() -> None:
    md = "# T\n**b** [l](https://e.com) <x>"
    assert format_for("telegram_html", md) == to_telegram_html(md)
    assert format_for("slack_mrkdwn", md) == to_slack_mrkdwn(md)
    assert format_for("discord", md) == to_discord(md)
    assert format_for("plain", md) == to_plain(md)
    assert format_for("markdown", md) == md
    assert {"telegram_html", "slack_mrkdwn", "discord", "plain", "markdown"} == FORMAT_STYLES


@pytest.mark.parametrize("style", ["html", "", "Telegram_HTML", "mrkdwn"])
def test_unknown_style_is_refused(style: str) -> None:
    with pytest.raises(ValueError, match="unknown format style"):
        format_for(style, "x")
