"""Splitting a reply into messages a platform accepts (PIPELINE §3.2).

A reply longer than the platform's limit is cut into chunks of at most ``limit`` characters,
each as full as it can be. A cut goes at the last paragraph boundary (a blank line) that fits,
else at the last line boundary, else at the last space, else anywhere (a hard cut). Whitespace at
a cut is dropped; every other character is kept, in order.

A fenced code block (```` ``` ```` or ``~~~``, CommonMark rules) is never cut while it fits in one
chunk: a block that would straddle a cut moves whole to the next chunk. A block longer than the
limit is cut like the text around it — at its blank lines, lines, spaces — and each piece is
closed and reopened with the block's own fences (info string included), so every chunk renders as
valid Markdown on its own; the added fence lines count against the limit. An unclosed block runs
to the end of the text, as in CommonMark, and gets its closing fence in the last chunk.

Lengths are counted in code points (``len``), as the limits in :data:`PLATFORM_LIMITS` are.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, lt, sub
from types import MappingProxyType

__all__ = [
    "DEFAULT_LIMIT",
    "MIN_LIMIT",
    "PLATFORM_LIMITS",
    "FencedBlock",
    "chunk_text",
    "fenced_blocks",
    "limit_for",
]

#: Limit for the outbound HTTP webhook (INTERFACES: chunks of at most 4,000 characters) and
#: for any platform not listed in :data:`PLATFORM_LIMITS`.
DEFAULT_LIMIT = 4000
#: Below this a reopened fence pair leaves too little room for content to make progress.
MIN_LIMIT = 16

#: Message length limits in characters, by platform (the platform part of a chat JID).
PLATFORM_LIMITS: Mapping[str, int] = MappingProxyType(
    {
        "discord": 2000,
        "telegram": 4096,
        # Slack accepts far longer texts, but 3,000 is its limit for a section block and the
        # length it recommends for readable messages.
        "slack": 3000,
        "whatsapp": 4096,
        "sms": 1600,
        "mastodon": 500,
        "matrix": 16000,
        "email": 100000,
        "web": 32000,
        "tui": 32000,
    }
)


def limit_for(platform: str) -> int:
    """The message length limit of *platform*; :data:`DEFAULT_LIMIT` for any other."""
    return PLATFORM_LIMITS.get(platform, DEFAULT_LIMIT)


@dataclass(frozen=True, slots=True)
class FencedBlock:
    """One fenced code block of a text, located by offsets into that text."""

    #: The first character of the opening fence (its indentation excluded).
    start: int
    #: Just past the last non-blank character of the block: of the closing fence, or of the
    #: text when the block is never closed.
    end: int
    #: Start of the first line after the opening fence (the text's length when there is none).
    body_start: int
    #: Start of the closing fence's line, or the text's length when the block is never closed;
    #: the body is ``text[body_start:body_end]`` (ending with its last newline when closed).
    body_end: int
    #: The opening fence line, stripped: the fence run and the info string, as written.
    opening: str
    #: The closing fence line, stripped; the opening run when the block is never closed.
    closing: str
    #: The fence run: three or more backticks or tildes.
    marker: str
    #: The info string (``python`` in ```` ```python ````), stripped.
    info: str
    #: Columns of indentation before the opening fence.
    indent: int
    closed: bool


# A line that may open or close a fence. Any indentation is accepted (CommonMark allows three
# spaces at top level) because LLMs indent fences inside list items, and a fence we miss would be
# cut in the middle.
_FENCE_LINE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$", re.MULTILINE)
_WORD = re.compile(r"\S+")
# The last space preceded by a non-space: greedy ".*" backtracks from the window's end.
_LAST_SPACE = re.compile(r".*\S(\s)", re.DOTALL)
# Ranks of a boundary between lines: a blank line between them, or just a newline.
_LINE, _PARAGRAPH = 2, 3


def fenced_blocks(text: str) -> list[FencedBlock]:
    """The fenced code blocks of *text*, in order (CommonMark fences, any indentation).

    A backtick fence's info string may not contain a backtick (so ```` ```x``` ```` on one line
    is inline code); a closing fence uses the opening character, is at least as long, has
    nothing after it, and is indented at most three columns more than the opening.
    """
    blocks: list[FencedBlock] = []
    if "```" not in text and "~~~" not in text:
        return blocks  # the common case, at C speed
    opening: re.Match[str] | None = None
    for line in _FENCE_LINE.finditer(text):
        indent, run, rest = line.groups()
        if opening is None:
            if run[0] != "`" or "`" not in rest:
                opening = line
            continue
        open_indent, open_run, _ = opening.groups()
        if (
            run[0] == open_run[0]
            and len(run) >= len(open_run)
            and not rest.strip()
            and len(indent) <= len(open_indent) + 3
        ):
            blocks.append(_block(text, opening, line))
            opening = None
    if opening is not None:
        blocks.append(_block(text, opening, None))
    return blocks


def _block(text: str, opening: re.Match[str], closing: re.Match[str] | None) -> FencedBlock:
    indent, run, rest = opening.groups()
    start = opening.start() + len(indent)
    body_start = min(opening.end() + 1, len(text))
    if closing is None:
        end = start + len(text[start:].rstrip())
        return FencedBlock(
            start, end, body_start, len(text), text[start : opening.end()].strip(), run,
            run, rest.strip(), len(indent), closed=False,
        )  # fmt: skip
    closing_line = closing.group().strip()
    end = closing.start() + len(closing.group().rstrip())
    return FencedBlock(
        start, end, body_start, closing.start(), text[start : opening.end()].strip(),
        closing_line, run, rest.strip(), len(indent), closed=True,
    )  # fmt: skip


def chunk_text(text: str, limit: int) -> list[str]:
    """Cut *text* into chunks of at most *limit* characters, as described in the module doc.

    Empty or whitespace-only text gives no chunks. A *limit* below :data:`MIN_LIMIT` is a
    ``ValueError``. Runs in about linear time.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"a chunk limit of {limit} is too small; use at least {MIN_LIMIT}")
    plan = _Plan(text, limit)
    return plan.pack() if plan.ends else []


@dataclass(frozen=True, slots=True)
class _Wrap:
    """How the pieces of one oversized code block are closed and reopened."""

    start: int
    #: Lowest offset a cut may use in the piece holding the opening fence: past its first
    #: character of code, so the piece is more than a pair of fences.
    first_cut: int
    head: str
    tail: str


_PLAIN = (-1, "")


class _Plan:
    """The text seen as atoms — lines, whole code blocks, lines of an oversized block — with
    the rank of the boundary after each. A chunk is a run of whole atoms, except that an atom
    too long for a chunk is cut at a space found when needed, or anywhere.

    Lines rather than words are the atoms so that planning does one step of Python per line;
    cuts between words are looked for, inside one line, by a regular expression.
    """

    def __init__(self, text: str, limit: int) -> None:
        self.text = text
        self.limit = limit
        self.starts: list[int] = []
        self.ends: list[int] = []
        #: For the atoms of code blocks only: the index into ``wraps`` of an oversized block's
        #: atom (else -1), and what a chunk ending with the atom gets appended (a closing fence).
        self.special: dict[int, tuple[int, str]] = {}
        self.wraps: list[_Wrap] = []
        #: Per rank, the atoms followed by a boundary of that rank, and their ends (for bisect).
        self.cuts: dict[int, list[int]] = {_LINE: [], _PARAGRAPH: []}
        self.cut_ends: dict[int, list[int]] = {_LINE: [], _PARAGRAPH: []}
        # Whitespace before the next atom starts here: after a wrapped block's closing fence,
        # not after its last line of code.
        self._gap_from = 0
        pos = 0
        for block in fenced_blocks(text):
            self._add_prose(pos, block.start)
            self._add_block(block)
            pos = block.end
        self._add_prose(pos, len(text))

    def _add(self, starts: list[int], ends: list[int], blank: list[bool]) -> None:
        """Append atoms; ``blank[k]`` says whether a blank line precedes atom ``k`` (the first
        boundary, with the atoms already there, is measured here)."""
        if not starts:
            return
        base = len(self.ends)
        blank[0] = self.text.count("\n", self._gap_from, starts[0]) > 1
        lefts = [self.ends[-1] if base else -1, *ends[:-1]]
        first = 0 if base else 1
        # Atoms sit on different lines, so every boundary is a LINE at least.
        for rank, ranked in ((_PARAGRAPH, blank), (_LINE, [not b for b in blank])):
            self.cuts[rank].extend(
                compress(range(base - 1 + first, base - 1 + len(starts)), ranked[first:])
            )
            self.cut_ends[rank].extend(compress(lefts[first:], ranked[first:]))
        self.starts.extend(starts)
        self.ends.extend(ends)
        self._gap_from = ends[-1]

    def _add_prose(self, lo: int, hi: int) -> None:
        self._add(*_lines(self.text, lo, hi, keep_indent=False))

    def _add_block(self, block: FencedBlock) -> None:
        text, limit = self.text, self.limit
        tail = "" if block.closed else "\n" + block.closing
        if block.end - block.start + len(tail) <= limit:
            self.special[len(self.ends)] = (-1, tail)
            self._add([block.start], [block.end], [False])
            return
        tail = "\n" + block.closing
        head = block.opening + "\n"
        if len(head) + len(tail) > limit // 2:
            head = block.marker + "\n"  # drop a long info string rather than starve the pieces
        first_code = _WORD.search(text, block.body_start, block.body_end)
        if first_code is None and len(block.opening) + len(tail) <= limit:
            # Oversized by blank lines alone: keep the fences, drop the blank lines.
            self.special[len(self.ends)] = (-1, tail)
            self._add([block.start], [block.start + len(block.opening)], [False])
            self._gap_from = block.end
            return
        if (
            first_code is None
            or first_code.start() - block.start + 1 + len(tail) > limit
            or len(head) + 1 + len(tail) > limit
        ):
            # Fences too long to repeat in every piece: cut the block like plain text.
            self._add_prose(block.start, block.end)
            return
        wrap = len(self.wraps)
        self.wraps.append(_Wrap(block.start, first_code.start() + 1, head, tail))
        base = len(self.ends)
        starts, ends, blank = _lines(text, block.body_start, block.body_end, keep_indent=True)
        # The opening fence travels with the first line of code.
        starts[0] = block.start
        self._add(starts, ends, blank)
        self.special.update(dict.fromkeys(range(base, len(self.ends)), (wrap, tail)))
        self._gap_from = block.end

    def pack(self) -> list[str]:
        text, limit, starts, ends = self.text, self.limit, self.starts, self.ends
        last = len(ends) - 1
        chunks: list[str] = []
        i, s = 0, starts[0]
        while True:
            wrap = self._wrap(i)
            head = wrap.head if wrap is not None and s != wrap.start else ""
            room = s + limit - len(head)  # the chunk, its tail included, must end by here
            if self._end(last) <= room:
                chunks.append(head + text[s : ends[last]] + self._tail(last))
                return chunks
            # The last boundary of the highest rank that fits: a paragraph too long for the
            # room left moves whole to the next chunk, as a code block does.
            best = self._last_cut(_PARAGRAPH, i, room)
            if best < 0:
                best = self._last_cut(_LINE, i, room)
            if best >= 0:
                chunks.append(head + text[s : ends[best]] + self._tail(best))
                i, s = best + 1, starts[best + 1]
                continue
            # Not even atom i fits: cut inside it, at a space if it has one.
            lo = wrap.first_cut if wrap is not None and s == wrap.start else s + 1
            end = room - len(self._tail(i))
            cut = _space_cut(text, lo, end) or (_hard_cut(text, lo, end), 0)
            chunks.append(head + text[s : cut[0]] + self._tail(i))
            s = cut[0] + cut[1]

    def _wrap(self, atom: int) -> _Wrap | None:
        wrap = self.special.get(atom, _PLAIN)[0]
        return self.wraps[wrap] if wrap >= 0 else None

    def _tail(self, atom: int) -> str:
        return self.special.get(atom, _PLAIN)[1]

    def _end(self, atom: int) -> int:
        """Where a chunk ending with *atom* ends, counting the fence it gets appended."""
        return self.ends[atom] + len(self._tail(atom))

    def _last_cut(self, rank: int, first: int, room: int) -> int:
        """The last atom from *first* on, followed by a boundary of *rank*, that can end a
        chunk ending by *room*; -1 if there is none."""
        atoms = self.cuts[rank]
        k = bisect_right(self.cut_ends[rank], room) - 1
        # Only a closing fence (a few characters) can push an atom over: a short walk back.
        while k >= 0 and atoms[k] >= first:
            j = atoms[k]
            if self._end(j) <= room:
                return j
            k -= 1
        return -1


def _lines(
    text: str, lo: int, hi: int, *, keep_indent: bool
) -> tuple[list[int], list[int], list[bool]]:
    """The non-blank lines of ``text[lo:hi]`` as atoms: starts, ends (past the last non-space),
    and whether a blank line precedes each. A line of code keeps its indentation.

    Built with C-level ``map``/``compress`` rather than a Python loop, so that a text of half a
    million short lines still plans in a fraction of a second.
    """
    lines = text[lo:hi].split("\n")
    kept = list(map(len, map(str.rstrip, lines)))
    line_starts = list(accumulate(map(add, map(len, lines), repeat(1)), initial=lo))
    starts = list(compress(line_starts, kept))
    ends = list(map(add, starts, compress(kept, kept)))
    if not keep_indent:
        content = compress(lines, kept)
        starts = list(map(sub, ends, map(len, map(str.strip, content))))
    numbers = list(compress(range(len(lines)), kept))
    blank = [False, *map(lt, repeat(1), map(sub, numbers[1:], numbers[:-1]))]
    return starts, ends, blank


def _space_cut(text: str, lo: int, end: int) -> tuple[int, int] | None:
    """The last run of spaces in one line starting in ``[lo, end]`` after a non-space, as (its
    start, its length); ``None`` if there is none."""
    for _ in range(8):  # bounded: each retry rescans the window
        if end < lo:
            return None
        found = _LAST_SPACE.match(text, lo - 1, end + 1)
        if found is None:
            return None
        space = found.start(1)
        after = _WORD.search(text, space)
        resume = after.start() if after is not None else len(text)
        # A chunk starting with ``` or ~~~ mid-line would open a fence that is not there.
        if not _is_run(text, resume):
            return space, resume - space
        end = space - 1
    return None


def _hard_cut(text: str, lo: int, cut: int) -> int:
    """Where to cut inside a word: at *cut*, or a little before it, never before *lo*."""
    cut = max(cut, lo)
    # Keep a combining mark, joiner or variation selector with the character it modifies (a
    # few steps back at most, so a text of nothing but marks still fills its chunks).
    for step in range(cut, max(lo, cut - 8) - 1, -1):
        if not _clings(text, step):
            cut = step
            break
    char = text[cut : cut + 1]
    if char in ("`", "~") and text.startswith(char * 3, cut):
        # The next chunk would start with a fence run that is no fence; cut before the run.
        run_start = cut
        while run_start > lo and text[run_start - 1] == char:
            run_start -= 1
        if run_start - 1 >= lo:
            cut = run_start - 1
    return cut


def _is_run(text: str, start: int) -> bool:
    return text.startswith(("```", "~~~"), start)


def _clings(text: str, at: int) -> bool:
    """Whether the character at *at* belongs with the one before it."""
    char = text[at : at + 1]
    return bool(char) and (
        char in "\u200d\ufe0e\ufe0f"
        or unicodedata.combining(char) != 0
        or text[at - 1 : at] == "\u200d"
    )
