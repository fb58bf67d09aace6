"""Glob patterns and the subtree rule (ROUTING §2.1)."""

from __future__ import annotations

import fnmatch

import pytest

from postroom.core import compile_pattern
from postroom.core.glob import GlobError


def holds(pattern: str, value: str) -> bool:
    return compile_pattern(pattern).holds(value)


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        # '*': any run of characters except '/', possibly empty.
        pytest.param("a*", "a", True, id="star-empty-run"),
        pytest.param("a*", "abc", True, id="star-run"),
        pytest.param("a*c", "abbbc", True, id="star-middle"),
        pytest.param("a*c", "ab/c", False, id="star-never-crosses-slash"),
        pytest.param("*d", "ab/cd", False, id="leading-star-never-crosses-slash"),
        pytest.param("guild*5", "guild/77/channel/5", False, id="star-not-across-segments"),
        pytest.param("**c", "a/bc", False, id="double-star-is-no-globstar"),
        pytest.param("*", "x", True, id="star-one-segment"),
        # '?': exactly one character except '/'.
        pytest.param("a?c", "abc", True, id="qmark-one"),
        pytest.param("a?c", "ac", False, id="qmark-not-zero"),
        pytest.param("a?c", "abbc", False, id="qmark-not-two"),
        pytest.param("a?c", "a/c", False, id="qmark-not-slash"),
        pytest.param("a?", "aé", True, id="qmark-non-ascii"),
        # Classes.
        pytest.param("[abc]x", "bx", True, id="class-member"),
        pytest.param("[abc]x", "dx", False, id="class-non-member"),
        pytest.param("[a-c]", "b", True, id="range-member"),
        pytest.param("[a-c]", "d", False, id="range-non-member"),
        pytest.param("[a-cx-z]", "y", True, id="two-ranges"),
        pytest.param("[!a-c]", "d", True, id="negation-bang-member"),
        pytest.param("[!a-c]", "b", False, id="negation-bang-non-member"),
        pytest.param("[^a-c]", "d", True, id="negation-caret-member"),
        pytest.param("[^a-c]", "a", False, id="negation-caret-non-member"),
        pytest.param("[^a-c]", "^", True, id="caret-is-negation-not-literal"),
        pytest.param("a[!x]b", "a/b", False, id="negated-class-never-matches-slash"),
        pytest.param("a[^x]b", "a/b", False, id="caret-class-never-matches-slash"),
        pytest.param("a[/]b", "a/b", False, id="class-with-slash-never-matches-slash"),
        pytest.param("a[!/]", "ab", True, id="negated-slash-class"),
        pytest.param("[-a]", "-", True, id="leading-dash-literal"),
        pytest.param("[a-]", "-", True, id="trailing-dash-literal"),
        # ']' right after '[', '[!' or '[^' is literal.
        pytest.param("[]]", "]", True, id="bracket-first-literal"),
        pytest.param("[]a]", "a", True, id="bracket-first-then-member"),
        pytest.param("[]a]", "]", True, id="bracket-first-member"),
        pytest.param("[!]]", "]", False, id="bang-bracket-literal-excluded"),
        pytest.param("[!]]", "a", True, id="bang-bracket-other"),
        pytest.param("[^]]", "]", False, id="caret-bracket-literal-excluded"),
        pytest.param("[^]]", "x", True, id="caret-bracket-other"),
        pytest.param("a]", "a]", True, id="lone-closing-bracket-literal"),
        # Escapes.
        pytest.param(r"\*", "*", True, id="escaped-star"),
        pytest.param(r"\*", "a", False, id="escaped-star-not-wildcard"),
        pytest.param(r"\?", "?", True, id="escaped-qmark"),
        pytest.param(r"\?", "a", False, id="escaped-qmark-not-wildcard"),
        pytest.param(r"\[a]", "[a]", True, id="escaped-open-bracket"),
        pytest.param(r"a\\b", "a\\b", True, id="escaped-backslash"),
        pytest.param(r"\a", "a", True, id="escaped-ordinary-char"),
        pytest.param(r"[\]]", "]", True, id="escape-inside-class"),
        pytest.param(r"[\!a]", "!", True, id="escaped-bang-is-member"),
        pytest.param(r"[\!a]", "b", False, id="escaped-bang-not-negation"),
        pytest.param(r"[a\-c]", "b", False, id="escaped-dash-no-range"),
        pytest.param(r"[a\-c]", "-", True, id="escaped-dash-member"),
        # Case-sensitive; no braces; no regex.
        pytest.param("Guild", "guild", False, id="case-sensitive"),
        pytest.param("guild", "Guild", False, id="case-sensitive-value"),
        pytest.param("{a,b}", "a", False, id="no-braces"),
        pytest.param("{a,b}", "{a,b}", True, id="braces-literal"),
        pytest.param("a.c", "abc", False, id="dot-literal"),
        pytest.param("a+", "aa", False, id="plus-literal"),
        pytest.param("(x)|y", "y", False, id="regex-literal"),
        pytest.param("^a$", "^a$", True, id="anchors-literal"),
    ],
)
def test_glob_semantics(pattern: str, value: str, expected: bool) -> None:
    assert holds(pattern, value) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        # The spec's own examples.
        pytest.param("guild/*", "guild/77/channel/5", True, id="room-guild-star"),
        pytest.param("slack:acme/eng", "slack:acme/eng/x", True, id="chat-subtree"),
        pytest.param("discord:dm/*", "discord:dm/42", True, id="dm-star-exact"),
        pytest.param("discord:dm/*", "discord:guild/1/channel/2", False, id="dm-star-not-guild"),
        # Around the rule.
        pytest.param("slack:acme/eng", "slack:acme/engineering", False, id="not-a-name-prefix"),
        pytest.param("slack:acme/eng", "slack:acme/eng", True, id="whole-value"),
        pytest.param("slack:acme/eng", "slack:acme", False, id="value-shorter"),
        pytest.param("a", "a/", True, id="trailing-slash-value"),
        pytest.param("guild/*", "guild", False, id="pattern-longer-than-value"),
        pytest.param("guild/*/channel", "guild/77/channel/5", True, id="middle-star"),
        pytest.param("guild/*/channel", "guild/77/chan/5", False, id="middle-star-mismatch"),
        pytest.param("a*", "ab/cd", True, id="leading-segment-glob"),
        pytest.param("user/1", "user/12", False, id="literal-segment-prefix-is-not-enough"),
        pytest.param("user/1?", "user/12/x", True, id="qmark-then-subtree"),
        pytest.param("dm/4", "dm/42", False, id="no-partial-segment"),
    ],
)
def test_subtree_rule(pattern: str, value: str, expected: bool) -> None:
    assert holds(pattern, value) is expected


def test_empty_pattern_holds_only_on_an_empty_value() -> None:
    empty = compile_pattern("")
    assert empty.holds("")
    assert not empty.holds("x")
    assert not empty.holds("user/1")


@pytest.mark.parametrize("value", ["/", "/x", "/user/1", "//"])
def test_empty_pattern_does_not_hold_on_a_value_starting_with_slash(value: str) -> None:
    # ROUTING §2.1: "`key=` (empty pattern) holds iff the field is empty."
    assert not compile_pattern("").holds(value)


@pytest.mark.parametrize("pattern", ["*", "?", "[a]", "a", "[!a]", "*/*"])
def test_non_empty_pattern_never_holds_on_an_empty_value(pattern: str) -> None:
    assert not compile_pattern(pattern).holds("")


def test_differs_from_fnmatch_where_the_spec_says_so() -> None:
    # fnmatch's '*' crosses '/' and its '[^' is literal; ours does neither.
    assert fnmatch.fnmatchcase("ab/cd", "*d")
    assert not holds("*d", "ab/cd")
    assert not fnmatch.fnmatchcase("d", "[^a-c]")
    assert holds("[^a-c]", "d")


@pytest.mark.parametrize(
    ("pattern", "piece"),
    [
        pytest.param("[ab", "[", id="unclosed-class"),
        pytest.param("a[!", "[", id="unclosed-negated-class"),
        pytest.param("[]", "[", id="bracket-only-literal-so-unclosed"),
        pytest.param("[]]x[", "[", id="second-class-unclosed"),
        pytest.param("ab\\", "\\", id="trailing-backslash"),
        pytest.param("[a\\", "\\", id="trailing-backslash-in-class"),
        pytest.param("guild/", "/", id="ends-with-slash"),
        pytest.param("a/b/", "/", id="ends-with-slash-deep"),
        pytest.param("/", "/", id="only-slash"),
    ],
)
def test_malformed_patterns_are_rejected(pattern: str, piece: str) -> None:
    with pytest.raises(GlobError) as info:
        compile_pattern(pattern)
    message = str(info.value)
    assert repr(pattern) in message
    assert piece in message


def test_literal_and_leading_literal() -> None:
    assert compile_pattern(r"a\*b").literal == "a*b"
    assert compile_pattern("a*b").literal is None
    assert compile_pattern("guild/*/channel").leading_literal() == "guild"
    assert compile_pattern("discord:guild/77/*").leading_literal() == "discord:guild/77"
    assert compile_pattern("*/x").leading_literal() is None


@pytest.mark.parametrize(
    ("wide", "narrow", "expected"),
    [
        ("guild/*", "guild/77", True),
        ("guild/*", "guild/77/channel/*", True),
        ("guild", "guild/*", True),
        ("guild/*", "guild", False),
        ("*", "anything", True),
        ("a*", "abc", True),
        ("abc", "a*", False),
        ("", "", True),
        ("", "x", False),
        ("x", "", False),
    ],
)
def test_pattern_inclusion(wide: str, narrow: str, expected: bool) -> None:
    assert compile_pattern(wide).includes(compile_pattern(narrow)) is expected
