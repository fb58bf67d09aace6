"""Glob patterns over path-like values, with the subtree rule (ROUTING §2.1).

Grammar: ``*`` is any run of characters except ``/`` (possibly empty); ``?`` is one character
except ``/``; ``[abc]``, ``[a-z]`` and the negations ``[!a-z]`` / ``[^a-z]`` are classes, which
never match ``/``; a ``]`` right after ``[``, ``[!`` or ``[^`` is literal; ``\\x`` is a literal
``x``, also inside a class. Matching is case-sensitive. Python's ``fnmatch`` differs (its ``*``
crosses ``/`` and ``[^`` is literal there), hence this module.

**Subtree rule.** A pattern holds for a value when it matches the whole value *or* a leading part
of it that ends just before a ``/``: a rule for a place covers everything inside it. Because no
construct matches ``/``, a pattern of *m* segments holds exactly when the value has at least *m*
segments and its first *m* segments match the pattern's segments one by one. Indexing
(:mod:`postroom.core.route_index`) and shadow detection (:mod:`postroom.core.annotate`) rely on
that segment view.

The empty pattern is special: it holds only on an empty value, and a non-empty pattern never
holds on an empty value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GlobError", "Pattern", "Segment", "compile_pattern"]


class GlobError(ValueError):
    """A malformed pattern; the message says where and why (callers wrap it)."""


# Token kinds of one pattern segment.
_LIT = 0
_STAR = 1
_ANY = 2
_CLASS = 3


@dataclass(frozen=True, slots=True)
class Segment:
    """One ``/``-separated part of a pattern."""

    source: str
    #: The unescaped text when the segment has no wildcard, else ``None``.
    literal: str | None
    #: Matches one whole value segment.
    regex: re.Pattern[str]
    #: The segment is only ``*`` wildcards, so it matches any one segment.
    any_segment: bool

    def includes(self, other: Segment) -> bool:
        """Whether every segment *other* matches is also matched by this one (when decidable).

        ``False`` means "not shown", not "shown to differ"; callers use it to report shadowed
        routes only when certain.
        """
        if self.any_segment or self.source == other.source:
            return True
        if other.literal is not None:
            return self.regex.fullmatch(other.literal) is not None
        return False


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled pattern. Use :meth:`holds` to test a value."""

    source: str
    segments: tuple[Segment, ...]
    #: The unescaped value when the whole pattern has no wildcard, else ``None``.
    literal: str | None
    _regex: re.Pattern[str] | None
    _literal_slash: str

    @property
    def is_empty(self) -> bool:
        return not self.source

    def holds(self, value: str) -> bool:
        """Whether the pattern holds for *value* under the subtree rule."""
        if not value or not self.source:
            # The empty pattern holds only on an empty value, and only it does.
            return not value and not self.source
        literal = self.literal
        if literal is not None:
            return value == literal or value.startswith(self._literal_slash)
        assert self._regex is not None
        return self._regex.match(value) is not None

    def leading_literal(self) -> str | None:
        """The longest run of fully literal segments at the start, joined by ``/``.

        Every value the pattern holds for starts with exactly these segments, so rows can be
        indexed under it. ``None`` when the first segment already has a wildcard.
        """
        parts: list[str] = []
        for seg in self.segments:
            if seg.literal is None:
                break
            parts.append(seg.literal)
        return "/".join(parts) if parts else None

    def includes(self, other: Pattern) -> bool:
        """Whether this pattern holds for every value *other* holds for (when decidable)."""
        if self.is_empty or other.is_empty:
            return self.is_empty and other.is_empty
        if len(self.segments) > len(other.segments):
            return False
        return all(a.includes(b) for a, b in zip(self.segments, other.segments, strict=False))


def compile_pattern(source: str) -> Pattern:
    """Parse and compile a glob; raise :class:`GlobError` naming the position of a mistake."""
    if source == "":
        return Pattern("", (), "", None, "/")
    raw_segments = _tokenize(source)
    if raw_segments[-1][1] == [] and len(raw_segments) > 1:
        raise GlobError(f"pattern {source!r} ends with '/'; drop it (the subtree rule covers it)")
    segments = tuple(_build_segment(text, tokens) for text, tokens in raw_segments)
    if all(seg.literal is not None for seg in segments):
        literal = "/".join(seg.literal for seg in segments if seg.literal is not None)
        return Pattern(source, segments, literal, None, literal + "/")
    body = "/".join(seg.regex.pattern for seg in segments)
    # \Z, not $: '$' would also match before a trailing newline.
    regex = re.compile(f"(?:{body})(?=/|\\Z)", re.DOTALL)
    return Pattern(source, segments, None, regex, "")


_Token = tuple[int, str]


def _tokenize(source: str) -> list[tuple[str, list[_Token]]]:
    """Split into segments of tokens. A class is kept as its finished regex text."""
    segments: list[tuple[str, list[_Token]]] = []
    tokens: list[_Token] = []
    seg_start = 0
    i = 0
    n = len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            if i + 1 >= n:
                raise GlobError(f"pattern {source!r} ends with a lone '\\' (escape what?)")
            nxt = source[i + 1]
            if nxt == "/":
                segments.append((source[seg_start:i], tokens))
                tokens = []
                seg_start = i + 2
            else:
                tokens.append((_LIT, nxt))
            i += 2
        elif c == "/":
            segments.append((source[seg_start:i], tokens))
            tokens = []
            seg_start = i + 1
            i += 1
        elif c == "*":
            tokens.append((_STAR, ""))
            i += 1
        elif c == "?":
            tokens.append((_ANY, ""))
            i += 1
        elif c == "[":
            regex_text, i = _parse_class(source, i)
            tokens.append((_CLASS, regex_text))
        else:
            tokens.append((_LIT, c))
            i += 1
    segments.append((source[seg_start:], tokens))
    return segments


def _parse_class(source: str, start: int) -> tuple[str, int]:
    """Parse ``[...]`` at *start*; return its regex (never matching ``/``) and the next index."""
    i = start + 1
    n = len(source)
    negated = False
    if i < n and source[i] in "!^":
        negated = True
        i += 1
    members: list[str] = []
    first = True
    while True:
        if i >= n:
            raise GlobError(f"pattern {source!r}: '[' at position {start} is never closed")
        c = source[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\":
            if i + 1 >= n:
                raise GlobError(f"pattern {source!r} ends with a lone '\\' inside a class")
            lo = source[i + 1]
            i += 2
        else:
            lo = c
            i += 1
        # A range needs a '-' followed by something other than the closing ']'.
        if i + 1 < n and source[i] == "-" and source[i + 1] != "]":
            hi = source[i + 1]
            i += 2
            if hi == "\\":
                if i >= n:
                    raise GlobError(f"pattern {source!r} ends with a lone '\\' inside a class")
                hi = source[i]
                i += 1
            if hi < lo:
                raise GlobError(
                    f"pattern {source!r}: range {lo}-{hi} in the class at position {start} "
                    "is reversed"
                )
            members.append(f"{_class_char(lo)}-{_class_char(hi)}")
        else:
            members.append(_class_char(lo))
    body = "".join(members)
    if negated:
        return f"[^{body}/]", i
    return f"(?!/)[{body}]", i


def _class_char(c: str) -> str:
    # Inside a regex class every non-alphanumeric character may be escaped safely.
    return c if c.isalnum() and c.isascii() else "\\" + c


def _build_segment(text: str, tokens: list[_Token]) -> Segment:
    if all(kind == _LIT for kind, _ in tokens):
        literal = "".join(value for _, value in tokens)
        return Segment(text, literal, re.compile(re.escape(literal), re.DOTALL), False)
    parts: list[str] = []
    for kind, value in tokens:
        if kind == _LIT:
            parts.append(re.escape(value))
        elif kind == _STAR:
            parts.append("[^/]*")
        elif kind == _ANY:
            parts.append("[^/]")
        else:
            parts.append(value)
    any_segment = all(kind == _STAR for kind, _ in tokens)
    return Segment(text, None, re.compile("".join(parts), re.DOTALL), any_segment)
