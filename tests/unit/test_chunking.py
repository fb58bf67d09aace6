"""Chunking a reply to a platform's limit (PIPELINE §3.2)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postroom.core.chunking import (
    DEFAULT_LIMIT,
    MIN_LIMIT,
    PLATFORM_LIMITS,
    chunk_text,
    fenced_blocks,
    limit_for,
)

# ---------------------------------------------------------------------------------------------
# Helpers: an independent fence scanner and the "nothing lost" check.

_OPEN = re.compile(r"(`{3,}|~{3,})(.*)")


def balanced(chunk: str) -> bool:
    """Every fence the chunk opens, it closes (fences in these tests start their line)."""
    fence: str | None = None
    for line in chunk.split("\n"):
        stripped = line.strip()
        if fence is None:
            m = _OPEN.fullmatch(stripped)
            if m and not (m[1][0] == "`" and "`" in m[2]):
                fence = m[1]
        elif stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            fence = None
    return fence is None


def is_fence_line(line: str) -> bool:
    return _OPEN.fullmatch(line.strip()) is not None


def squeeze(text: str) -> str:
    return "".join(text.split())


def preserved(text: str, chunks: list[str]) -> bool:
    """The chunks hold the text's non-space characters in order, once the fence lines added at a
    chunk's start (reopening) or end (closing) are set aside."""
    want = squeeze(text)
    positions = {0}
    for chunk in chunks:
        lines = chunk.split("\n")
        variants = []
        for drop_first in (False, True):
            for drop_last in (False, True):
                if drop_first and not is_fence_line(lines[0]):
                    continue
                if drop_last and not is_fence_line(lines[-1]):
                    continue
                kept = lines[1 if drop_first else 0 : len(lines) - 1 if drop_last else len(lines)]
                variants.append(squeeze("\n".join(kept)))
        positions = {p + len(v) for p in positions for v in variants if want.startswith(v, p)}
        if not positions:
            return False
    return len(want) in positions


def check(text: str, limit: int) -> list[str]:
    chunks = chunk_text(text, limit)
    assert all(len(c) <= limit for c in chunks), [len(c) for c in chunks]
    assert all(c and c == c.strip() for c in chunks)
    assert all(balanced(c) for c in chunks)
    assert preserved(text, chunks)
    return chunks


# ---------------------------------------------------------------------------------------------
# Limits.


@pytest.mark.parametrize(
    ("platform", "limit"),
    [
        ("discord", 2000),
        ("telegram", 4096),
        ("slack", 3000),
        ("whatsapp", 4096),
        ("sms", 1600),
        ("mastodon", 500),
        ("matrix", 16000),
        ("email", 100000),
        ("web", 32000),
        ("tui", 32000),
        ("http", DEFAULT_LIMIT),
        ("somewhere-else", 4000),
    ],
)
def test_limit_for(platform: str, limit: int) -> None:
    assert limit_for(platform) == limit


def test_platform_limits_are_read_only() -> None:
    with pytest.raises(TypeError):
        PLATFORM_LIMITS["discord"] = 1  # type: ignore[index]


@pytest.mark.parametrize("limit", [-1, 0, 1, MIN_LIMIT - 1])
def test_tiny_limit_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="too small"):
        chunk_text("hello", limit)


# ---------------------------------------------------------------------------------------------
# Examples.


@pytest.mark.parametrize("text", ["", " ", "\n\n\t  \n", "\u00a0\u2003"])
def test_blank_text_gives_no_chunks(text: str) -> None:
    assert chunk_text(text, 100) == []


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("  hello  ", 16, ["hello"], id="fits-stripped"),
        pytest.param("one two three", 16, ["one two three"], id="exactly-fits"),
        pytest.param(
            "first para.\n\nsecond para.", 20, ["first para.", "second para."], id="paragraph"
        ),
        pytest.param(
            "aa bb\ncc dd ee\n\nff", 16, ["aa bb\ncc dd ee", "ff"], id="paragraph-over-line"
        ),
        pytest.param(
            "line one\nline two\nline three", 20, ["line one\nline two", "line three"], id="line"
        ),
        pytest.param(
            "alpha beta gamma delta epsilon", 16, ["alpha beta gamma", "delta epsilon"], id="word"
        ),
        pytest.param("x" * 40, 16, ["x" * 16, "x" * 16, "x" * 8], id="hard-cut"),
        pytest.param(
            "para one\n\n\n\n   para two  ", 16, ["para one", "para two"], id="strips-at-cuts"
        ),
        pytest.param("e\u0301" * 10, 16, ["e\u0301" * 8, "e\u0301" * 2], id="hard-cut-marks"),
    ],
)
def test_examples(text: str, limit: int, expected: list[str]) -> None:
    assert chunk_text(text, limit) == expected


def test_hard_cut_keeps_a_combining_mark_with_its_letter() -> None:
    text = "a" * 15 + "e\u0301" + "b" * 10
    chunks = chunk_text(text, 16)
    assert chunks[0] == "a" * 15
    assert chunks[1].startswith("e\u0301")


def test_ten_thousand_characters_for_discord() -> None:
    words = [f"word{i % 97}" for i in range(1700)]
    text = "\n\n".join(" ".join(words[i : i + 40]) for i in range(0, len(words), 40))
    assert len(text) > 10_000
    chunks = check(text, limit_for("discord"))
    assert len(chunks) >= 5
    assert all(len(c) <= 2000 for c in chunks)
    # Greedy: each chunk but the last is nearly full (paragraphs are ~300 characters).
    assert all(len(c) > 1600 for c in chunks[:-1])


def test_code_block_that_would_straddle_moves_whole() -> None:
    prose = "Some prose. " * 50  # 600 characters
    code = "```python\n" + "\n".join(f"x_{i:03d} = {i:5d}  # comment" for i in range(60)) + "\n```"
    assert 1400 < len(code) < 1600
    text = prose + "\n\n" + code + "\n\nAfter the code."
    chunks = check(text, 2000)
    assert chunks[0] == prose.strip()
    assert chunks[1] == code + "\n\nAfter the code."


def test_small_code_block_is_never_cut_even_if_lines_fit() -> None:
    text = "intro line\n```\n" + "code line\n" * 5 + "```\noutro"
    chunks = check(text, 60)
    assert "```\n" + "code line\n" * 5 + "```" in chunks


def test_oversized_code_block_is_split_with_fences_reopened() -> None:
    lines = [f"    value_{i:04d} = compute({i})" for i in range(170)]
    code = "```python\n" + "\n".join(lines) + "\n```"
    assert len(code) > 5000
    chunks = check("Here:\n\n" + code + "\n\nDone.", 2000)
    code_chunks = [c for c in chunks if "value_" in c]
    assert len(code_chunks) >= 3
    for chunk in code_chunks:
        assert chunk.startswith("```python\n    value_")
        assert chunk.endswith(("\n```", "\n```\n\nDone."))
    # Lines are never cut and keep their indentation.
    body = [line for c in code_chunks for line in c.split("\n") if line.startswith("    value_")]
    assert body == lines


def test_oversized_block_fills_the_chunk_before_it() -> None:
    code = "~~~\n" + "\n".join(f"line {i}" for i in range(400)) + "\n~~~"
    chunks = check("Intro:\n" + code, 500)
    # No blank line before the block: the intro shares the first chunk with code.
    assert chunks[0].startswith("Intro:\n~~~\nline 0")
    assert all(c.rstrip().endswith("~~~") for c in chunks)


def test_reopened_fence_keeps_marker_and_info_string() -> None:
    code = "````js title=app.js\n" + "\n".join(f"let v{i} = {i};" for i in range(200)) + "\n````"
    chunks = check(code, 600)
    assert len(chunks) > 3
    assert all(c.startswith("````js title=app.js\n") for c in chunks)
    assert all(c.endswith("\n````") for c in chunks)


def test_long_info_string_is_dropped_at_small_limits() -> None:
    code = "```python\n" + "\n".join(f"v{i}" for i in range(20)) + "\n```"
    chunks = check(code, 16)
    assert chunks[0].startswith("```python\n")
    assert all(c.startswith("```\n") for c in chunks[1:])


def test_code_line_longer_than_the_limit_is_cut_at_spaces_then_anywhere() -> None:
    code = "```\n" + "tok " * 30 + "\n" + "y" * 100 + "\n```"
    chunks = check(code, 40)
    assert all(c.startswith("```\n") and c.endswith("\n```") for c in chunks)


def test_block_of_blank_lines_keeps_its_fences() -> None:
    assert check("```py\n" + " \n" * 40 + "```\nafter", 30) == ["```py\n```", "after"]


@pytest.mark.parametrize(
    "text",
    [
        "```js title=x\n```\n",
        "``````````````` a very long info string\ncode\n```````````````",
        "```\n" + "x" * 100 + "\n```",
        "~~~\n" + "    " * 10 + "x\n~~~",
    ],
)
def test_fences_longer_than_the_limit_still_give_chunks_within_it(text: str) -> None:
    chunks = chunk_text(text, MIN_LIMIT)
    assert all(0 < len(c) <= MIN_LIMIT for c in chunks)
    assert preserved(text, chunks)


def test_unclosed_fence_is_closed_in_the_last_chunk() -> None:
    assert check("Look:\n\n```sh\nls -l", 100) == ["Look:\n\n```sh\nls -l\n```"]
    chunks = check("```sh\n" + "echo hi\n" * 50, 100)
    assert len(chunks) > 1
    assert chunks[-1].endswith("echo hi\n```")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "Use ``` to start a block of code please",
            ["Use ``` to start", "a block of code", "please"],
            id="fits-before-the-run",
        ),
        pytest.param("aaaa bbbbbbbbbb ```cc", ["aaaa", "bbbbbbbbbb ```cc"], id="earlier-space"),
        pytest.param("a ```" + "b" * 18, ["a ```" + "b" * 11, "b" * 7], id="no-other-space"),
        pytest.param("x" * 15 + "`````" + "y" * 5, ["x" * 14, "x`````yyyyy"], id="hard-cut"),
    ],
)
def test_inline_fence_runs_never_start_a_chunk(text: str, expected: list[str]) -> None:
    assert check(text, 16) == expected


def test_hard_cut_keeps_an_emoji_sequence_together() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    chunks = chunk_text("a" * 12 + family, 16)
    assert chunks == ["a" * 12, family]


def test_backticks_in_info_string_mean_inline_code() -> None:
    assert fenced_blocks("```x``` and more\ntext") == []


def test_fenced_blocks_locates_blocks() -> None:
    text = "a\n  ```py\n  code\n  ```\nb\n~~~\nopen"
    first, second = fenced_blocks(text)
    assert text[first.start : first.end] == "```py\n  code\n  ```"
    assert (first.opening, first.closing, first.info, first.indent) == ("```py", "```", "py", 2)
    assert text[first.body_start : first.body_end] == "  code\n"
    assert first.closed
    assert not second.closed
    assert text[second.body_start : second.body_end] == "open"
    assert second.closing == "~~~"


def test_closing_fence_must_match_the_opening() -> None:
    text = "````\n```\n~~~~\n    ````\n`````\nafter"
    (block,) = fenced_blocks(text)
    # A shorter run, the other character, or a fence indented four columns more do not close.
    assert text[block.body_start : block.body_end] == "```\n~~~~\n    ````\n"
    assert block.closing == "`````"


def test_chunking_a_megabyte_is_fast() -> None:
    paragraph = " ".join(f"w{i % 1000}" for i in range(150))
    code = "```\n" + "\n".join(f"line {i}" for i in range(400)) + "\n```"
    text = "\n\n".join([paragraph] * 1000 + [code] * 20)
    text += "\n" + "a\n" * 100_000 + "x " * 50_000
    assert len(text) > 1_000_000
    start = time.process_time()
    chunks = chunk_text(text, 2000)
    assert time.process_time() - start < 1.5  # about 0.1 s on a laptop
    assert all(len(c) <= 2000 for c in chunks)


# ---------------------------------------------------------------------------------------------
# Properties.

# A fixed vocabulary draws far faster than st.text and still has the awkward cases: long
# words, inline code, Markdown markers, wide and combining characters.
_VOCABULARY = [
    "a", "to", "word", "chunking", "x" * 37, "y" * 90, "`code`", "`a b`", "**bold**", "_it_",
    "#", ">", "-", "1.", "[link](https://e.com/a_b)", "é", "漢字", "🙂", "e\u0301", "(x)", "~",
]  # fmt: skip
_WORD_SPACE = st.tuples(
    st.sampled_from(_VOCABULARY), st.sampled_from([" ", " ", " ", "  ", "\t", "\u00a0"])
).map("".join)
_LINE = st.lists(_WORD_SPACE, max_size=8).map("".join)
_CODE_LINE = st.tuples(st.sampled_from(["", "  ", "    "]), _LINE).map("".join)


@st.composite
def _code_block(draw: st.DrawFn, closed: bool) -> str:
    marker = draw(st.sampled_from(["```", "````", "~~~"]))
    info = draw(st.sampled_from(["", "python", " sh", "js title=x"]))
    lines = draw(st.lists(_CODE_LINE, max_size=12))
    return "\n".join([marker + info, *lines, *([marker] if closed else [])])


_PARAGRAPH = st.lists(_LINE, min_size=1, max_size=5).map("\n".join)
_GAP = st.sampled_from(["\n", "\n\n", "\n \n", "\n\n\n"])


@st.composite
def _document(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(_PARAGRAPH, _code_block(closed=True)), max_size=6))
    if draw(st.booleans()):
        parts.append(draw(_code_block(closed=False)))
    return "".join(part + draw(_GAP) for part in parts)


# From 32 on, the fences generated here always fit in a chunk with a line of code.
@settings(max_examples=100, deadline=None)
@given(text=_document(), limit=st.integers(32, 400))
def test_chunks_fit_keep_everything_and_balance_fences(text: str, limit: int) -> None:
    check(text, limit)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300), limit=st.integers(MIN_LIMIT, 80))
def test_any_text_is_chunked_within_the_limit(text: str, limit: int) -> None:
    chunks = chunk_text(text, limit)
    assert all(0 < len(c) <= limit for c in chunks)
    assert (chunks == []) == (text.strip() == "")


@settings(max_examples=50, deadline=None)
@given(text=_document(), limit=st.integers(MIN_LIMIT, 400))
def test_chunking_is_deterministic(text: str, limit: int) -> None:
    assert chunk_text(text, limit) == chunk_text(text, limit)


@settings(max_examples=50, deadline=None)
@given(text=_document())
def test_text_that_fits_is_one_chunk(text: str) -> None:
    chunks = chunk_text(text, 100_000)
    assert len(chunks) <= 1
    if chunks and all(b.closed for b in fenced_blocks(text)):
        assert chunks == [text.strip()]
