"""Tags in a model's answer (PIPELINE §5): memory, state, conductor actions and delegations.

:func:`process_tags` reads the raw answer once and returns what the tags ask for together with
the text the user receives, every recognized tag removed. Nothing is applied here; the engine
applies the result. The grammar:

- ``[MEMORY:<category>] fact`` and ``[STATE:<key>] value`` are *line tags*: the value runs up to
  ``[/MEMORY]`` (``[/STATE]``) when that closing tag comes before any other tag opens, and may
  then span lines; otherwise it runs to the end of the line, or to the next tag on that line.
- ``[DELEGATE:<folder>] task [/DELEGATE]`` and, for conductors only, ``[CREATE_AGENT]``,
  ``[UPDATE_AGENT:<folder>]``, ``[CREATE_CRON]`` and ``[CREATE_HEARTBEAT]`` are *block tags*:
  the body runs to the first closing tag, and a block opened again before it closes is unclosed.
  A body is opaque: a tag written inside it belongs to the body (a persona may teach
  ``[MEMORY:…]``, a task may quote a tag) and is not processed.
- Conductor bodies are ``key: value`` lines; blank lines are ignored. A ``persona`` value goes
  on over the following lines indented deeper than its ``persona:`` line, which are stripped
  and joined with newlines; any other line must be ``key: value``.

Tags inside fenced code blocks and inline code spans are not tags. Tag names are
case-sensitive; conductor tags are plain text for a folder whose role is not ``conductor``.
A tag that is refused applies nothing, is still removed from the text, and gives one sentence in
:attr:`TagResult.problems`; an unclosed block tag stays in the text.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from postroom.core.chunking import fenced_blocks
from postroom.core.durations import parse_duration
from postroom.core.errors import InvalidInput
from postroom.core.folders import is_within, validate_folder
from postroom.core.jid import parse_jid
from postroom.core.schedule import ScheduleError, parse_schedule

__all__ = [
    "ActionKind",
    "ConductorAction",
    "Delegation",
    "MemoryTag",
    "StateTag",
    "TagResult",
    "partial_text",
    "process_tags",
]

ActionKind = Literal["create_agent", "update_agent", "create_cron", "create_heartbeat"]


@dataclass(frozen=True, slots=True)
class MemoryTag:
    """A fact to remember for the folder: ``[MEMORY:<category>] fact``."""

    category: str
    fact: str


@dataclass(frozen=True, slots=True)
class StateTag:
    """An upsert of the folder's state: ``[STATE:<key>] value``; an empty value clears it."""

    key: str
    value: str


@dataclass(frozen=True, slots=True)
class ConductorAction:
    """A validated conductor tag.

    ``create_agent``: ``path`` and the keys written. ``update_agent``: ``folder`` (the target)
    and the keys written. ``create_cron``: ``schedule`` (normalized cron), ``tz``, ``prompt``,
    ``folder`` and ``chat_jid``; ``create_heartbeat`` the same with ``schedule`` as
    ``every <N><unit>``, ``tz`` ``None`` and ``every`` as ``<N><unit>``. ``folder`` defaults to
    the conductor's folder; ``chat_jid`` is ``None`` when not written (the engine fills in the
    chat). Every other value is the stripped text as written.
    """

    kind: ActionKind
    fields: Mapping[str, str | None] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Delegation:
    """A task for a folder below this one: ``[DELEGATE:<folder>] task [/DELEGATE]``."""

    folder: str
    task: str


@dataclass(frozen=True, slots=True)
class TagResult:
    """What the tags of one answer ask for, each kind in the order written, and the answer
    without them."""

    text: str
    memories: tuple[MemoryTag, ...] = ()
    states: tuple[StateTag, ...] = ()
    actions: tuple[ConductorAction, ...] = ()
    delegations: tuple[Delegation, ...] = ()
    problems: tuple[str, ...] = ()


_Item = MemoryTag | StateTag | ConductorAction | Delegation

_ROLES = ("agent", "conductor", "admin")
_SESSIONS = ("per-chat", "shared")
_NAMES = "MEMORY|STATE|DELEGATE|CREATE_AGENT|UPDATE_AGENT|CREATE_CRON|CREATE_HEARTBEAT"
# The argument may not hold a bracket or a newline, so prose like "[MEMORY: see below" with no
# "]" on its line stays prose.
_OPENING = re.compile(rf"\[({_NAMES})(?::([^\[\]\n]*))?\]")
_CLOSING = re.compile(rf"\[/({_NAMES})\]")
# The end of a text still being written that may be a tag begun: "[", "[MEM", "[STATE:ke".
_UNFINISHED = re.compile(r"\[/?[A-Z_]*(?::[^\[\]\n]*)?\Z")
_LINE_TAGS = frozenset({"MEMORY", "STATE"})
_CONDUCTOR_TAGS = frozenset({"CREATE_AGENT", "UPDATE_AGENT", "CREATE_CRON", "CREATE_HEARTBEAT"})
# Block tags that take no argument; with one ("[CREATE_AGENT:x]") they are not tags at all.
_BARE_TAGS = frozenset({"CREATE_AGENT", "CREATE_CRON", "CREATE_HEARTBEAT"})
_CATEGORY = re.compile(r"[a-z_]+")
_STATE_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:(.*)")
_BACKTICKS = re.compile(r"`+")
_LINE = re.compile(r"[^\n]+")
# Punctuation that follows a word directly: "Noted [STATE:k] v [/STATE]." reads "Noted.".
_CLINGS = frozenset(".,;:!?)]}")

_AGENT_KEYS = (
    "persona",
    "provider",
    "model",
    "role",
    "engagement_ttl",
    "session",
    "busy_policy",
    "budget_per_day",
)


@dataclass(frozen=True, slots=True)
class _Spec:
    kind: ActionKind
    required: tuple[str, ...]
    allowed: tuple[str, ...]


_SPECS: Mapping[str, _Spec] = MappingProxyType(
    {
        "CREATE_AGENT": _Spec("create_agent", ("path",), ("path", *_AGENT_KEYS)),
        "UPDATE_AGENT": _Spec("update_agent", (), _AGENT_KEYS),
        "CREATE_CRON": _Spec(
            "create_cron",
            ("schedule", "prompt"),
            ("schedule", "prompt", "folder", "chat_jid", "tz"),
        ),
        "CREATE_HEARTBEAT": _Spec(
            "create_heartbeat", ("every", "prompt"), ("every", "prompt", "folder", "chat_jid")
        ),
    }
)


def process_tags(text: str, *, folder: str, role: str) -> TagResult:
    """Find the tags of a model's answer, validate them, and strip them from the text.

    *folder* is the answering folder and bounds every target (delegations, new agents, tasks)
    to its tree; *role* (``agent``, ``conductor`` or ``admin``) decides whether conductor tags
    are tags. Each refused tag adds one sentence to ``problems`` and applies nothing. The
    returned text has the tags removed and the lines they leave empty dropped, and is otherwise
    unchanged. Never raises on any *text*; an invalid *folder* or *role* is a ``ValueError``.
    """
    if role not in _ROLES:
        raise ValueError(f"role must be one of {', '.join(_ROLES)}, not {role!r}")
    try:
        validate_folder(folder)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
    if "[" not in text:
        return TagResult(text)
    items: list[_Item] = []
    problems: list[str] = []
    first = True
    while True:
        # Removing a tag can change what is code: a line "[STATE:k] v [/STATE]```" loses its
        # tag and becomes a fence, which shifts every later fence. Going again until nothing
        # is removed keeps the promise that the text the user sees holds no tag outside code
        # (and that processing it again finds nothing).
        new_text, found, refused, removed = _one_pass(
            text, folder=folder, conductor=role == "conductor"
        )
        items.extend(found)
        # A tag left in the text (unclosed) is seen again by the next pass: say it once.
        problems.extend(p for p in refused if first or p not in problems)
        if not removed:
            break
        text, first = new_text, False
    return TagResult(
        text=text,
        memories=tuple(i for i in items if isinstance(i, MemoryTag)),
        states=tuple(i for i in items if isinstance(i, StateTag)),
        actions=tuple(i for i in items if isinstance(i, ConductorAction)),
        delegations=tuple(i for i in items if isinstance(i, Delegation)),
        problems=tuple(problems),
    )


def partial_text(text: str, *, folder: str, role: str) -> str:
    """What a reader may see of an answer still being written (a stream).

    The text :func:`process_tags` gives for what has arrived, cut before a tag still being
    written and before a block tag whose closing tag has not arrived: its body (a delegated
    task, a new agent's settings) is no more for the reader than the finished tag would be.
    """
    unfinished = _UNFINISHED.search(text)
    if unfinished is not None:
        text = text[: unfinished.start()]
    visible = process_tags(text, folder=folder, role=role).text
    if "[" not in visible:
        return visible
    conductor = role == "conductor"
    code = _code_regions(visible)
    for m in _OPENING.finditer(visible):
        if m.group(1) in _LINE_TAGS or not _is_tag(m, conductor) or _covers(code, m.start()):
            continue
        return visible[: m.start()]
    return visible


# --- finding the tags ---------------------------------------------------------------------------


def _one_pass(
    text: str, *, folder: str, conductor: bool
) -> tuple[str, list[_Item], list[str], bool]:
    """One left-to-right reading: the text without its tags, what they ask for, the refusals,
    and whether anything was removed."""
    code = _code_regions(text)
    openings = [
        m for m in _OPENING.finditer(text) if _is_tag(m, conductor) and not _covers(code, m.start())
    ]
    if not openings:
        return text, [], [], False
    closers: dict[str, list[int]] = {}
    for c in _CLOSING.finditer(text):
        if not _covers(code, c.start()):
            closers.setdefault(c.group(1), []).append(c.start())
    starts: dict[str, list[int]] = {}
    for m in openings:
        starts.setdefault(m.group(1), []).append(m.start())

    spans: list[tuple[int, int]] = []
    items: list[_Item] = []
    problems: list[str] = []
    done = 0  # everything before this offset belongs to a tag already read
    for index, m in enumerate(openings):
        if m.start() < done:
            continue  # inside the body of an earlier tag
        name, tag = m.group(1), _shown_tag(m.group(0))
        closing = f"[/{name}]"
        close_at = _first_from(closers.get(name, []), m.end())
        if name in _LINE_TAGS:
            next_tag = openings[index + 1].start() if index + 1 < len(openings) else len(text)
            if close_at is not None and close_at < next_tag:
                value, end = text[m.end() : close_at], close_at + len(closing)
            else:
                end = min(_line_end(text, m.end()), next_tag)
                value = text[m.end() : end]
        else:
            reopened = _first_from(starts[name], m.end())
            if close_at is None or (reopened is not None and reopened < close_at):
                # Swallowing the rest of the message would hide it from the user; leave it.
                problems.append(
                    f"{tag} was not applied: it has no closing {closing}, so it was left in the "
                    "text."
                )
                continue
            value, end = text[m.end() : close_at], close_at + len(closing)
        spans.append((m.start(), end))
        done = end
        outcome = _interpret(name, m.group(2), value, tag=tag, folder=folder)
        if isinstance(outcome, str):
            problems.append(outcome)
        else:
            items.append(outcome)
    return _remove(text, spans), items, problems, bool(spans)


def _is_tag(m: re.Match[str], conductor: bool) -> bool:
    name, arg = m.group(1), m.group(2)
    if name in _CONDUCTOR_TAGS and not conductor:
        return False
    if name in _LINE_TAGS:
        return arg is not None
    return not (name in _BARE_TAGS and arg is not None)


def _first_from(positions: list[int], start: int) -> int | None:
    i = bisect_left(positions, start)
    return positions[i] if i < len(positions) else None


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    if end < 0:
        return len(text)
    # A CRLF line keeps its "\r" with the line, not inside the value.
    return end - 1 if end > start and text[end - 1] == "\r" else end


def _code_regions(text: str) -> tuple[list[int], list[int]]:
    """Starts and ends of the fenced blocks and inline code spans, merged and sorted."""
    regions = [(b.start, b.end) for b in fenced_blocks(text)]
    if "`" in text:
        for line in _LINE.finditer(text):
            if "`" in line.group():
                regions.extend(_code_spans(line.group(), line.start()))
    regions.sort()
    starts: list[int] = []
    ends: list[int] = []
    for start, end in regions:
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _code_spans(line: str, offset: int) -> list[tuple[int, int]]:
    """Inline code spans of one line (CommonMark: a run of n backticks up to the next run of
    exactly n; an unmatched run is literal). Spans stay on their line so that one stray
    backtick cannot hide the tags of a whole answer."""
    runs = list(_BACKTICKS.finditer(line))
    following: list[int | None] = [None] * len(runs)
    last: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        size = runs[i].end() - runs[i].start()
        following[i] = last.get(size)
        last[size] = i
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        j = following[i]
        if j is None:
            i += 1
            continue
        spans.append((offset + runs[i].start(), offset + runs[j].end()))
        i = j + 1
    return spans


def _covers(code: tuple[list[int], list[int]], pos: int) -> bool:
    starts, ends = code
    i = bisect_right(starts, pos) - 1
    return i >= 0 and pos < ends[i]


# --- removing them ------------------------------------------------------------------------------


def _remove(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """*text* without *spans*, tidied only where something was removed.

    Text on both sides of a span on one line is joined with one space (none before clinging
    punctuation); a span that crosses lines leaves the text around it on separate lines. A line
    left blank goes, and the blank lines around it collapse to the longest run that was there
    (to none at the start or end of the text).
    """
    lines: list[tuple[str, bool]] = []  # (content, touched by a removal)
    pieces = [""]
    touched = False

    def end_line() -> None:
        nonlocal pieces, touched
        lines.append((_join_pieces(pieces) if touched else pieces[0], touched))
        pieces, touched = [""], False

    def keep(chunk: str) -> None:
        nonlocal pieces
        first, *rest = chunk.split("\n")
        pieces[-1] += first
        for piece in rest:
            end_line()
            pieces = [piece]

    done = 0
    for start, end in spans:
        keep(text[done:start])
        touched = True
        pieces.append("")
        if "\n" in text[start:end]:
            end_line()
            pieces, touched = ["", ""], True
        done = end
    keep(text[done:])
    end_line()
    result = "\n".join(_tidy_blank_lines(lines))
    # A final newline is the answer's own, not a blank line left by a tag.
    if text.endswith("\n") and result and not result.endswith("\n"):
        result += "\n"
    return result


def _join_pieces(pieces: list[str]) -> str:
    joined = pieces[0]
    for right in pieces[1:]:
        if not joined.strip():
            joined += right.lstrip()  # only indentation so far: keep it
            continue
        left, stripped = joined.rstrip(), right.lstrip()
        gap = left != joined or stripped != right
        space = gap and not (stripped and stripped[0] in _CLINGS)
        joined = left + (" " if space else "") + stripped
    return joined.rstrip() if not pieces[-1].strip() else joined


def _tidy_blank_lines(lines: list[tuple[str, bool]]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i][0].strip():
            out.append(lines[i][0])
            i += 1
            continue
        j = i
        while j < len(lines) and not lines[j][0].strip():
            j += 1
        run = lines[i:j]
        if not any(touched for _, touched in run):
            out.extend(content for content, _ in run)
        elif i > 0 and j < len(lines):
            longest = current = 0
            for _, touched in run:
                current = 0 if touched else current + 1
                longest = max(longest, current)
            out.extend([""] * longest)
        i = j
    return out


# --- what each tag asks for ---------------------------------------------------------------------


def _interpret(name: str, arg: str | None, value: str, *, tag: str, folder: str) -> _Item | str:
    """The result of one tag, or the sentence that refuses it."""
    if name == "MEMORY":
        category, fact = (arg or "").strip(), value.strip()
        reasons = []
        if not _CATEGORY.fullmatch(category):
            reasons.append(
                f"the category {_shown(category)} is not lowercase letters and '_' "
                "(like sticky or user_preference)"
            )
        if not fact:
            reasons.append("it has no fact")
        return _refused(tag, reasons) if reasons else MemoryTag(category, fact)
    if name == "STATE":
        key = (arg or "").strip()
        if not _STATE_KEY.fullmatch(key):
            return _refused(
                tag, [f"the key {_shown(key)} may use only letters, digits, '_', '.' and '-'"]
            )
        return StateTag(key, value.strip())
    if name == "DELEGATE":
        target, task = (arg or "").strip(), value.strip()
        reasons = []
        if not target:
            reasons.append("it names no folder; write [DELEGATE:<folder>] task [/DELEGATE]")
        else:
            reasons.extend(_outside(target, folder, what="Delegation target", strict=True))
        if not task:
            reasons.append("it has no task")
        return _refused(tag, reasons) if reasons else Delegation(target, task)
    return _conductor(name, arg, value, tag=tag, folder=folder)


def _conductor(name: str, arg: str | None, body: str, *, tag: str, folder: str) -> _Item | str:
    spec = _SPECS[name]
    reasons: list[str] = []
    fields: dict[str, str | None] = {}
    if name == "UPDATE_AGENT":
        target = (arg or "").strip()
        if not target:
            reasons.append("it names no folder; write [UPDATE_AGENT:<folder>]")
        elif target == folder:
            reasons.append(f"the conductor cannot update itself ({target!r} is this folder)")
        else:
            reasons.extend(_outside(target, folder, what="Target", strict=True))
        fields["folder"] = target
    values, body_reasons = _parse_body(body, spec.allowed)
    reasons.extend(body_reasons)
    missing = [key for key in spec.required if key not in values]
    if missing:
        reasons.append("it lacks the required " + " and ".join(repr(k) for k in missing))
    if name == "UPDATE_AGENT" and not values and not body_reasons:
        reasons.append(f"it changes nothing; give at least one of {', '.join(spec.allowed)}")
    tz = values.get("tz") or None
    if tz is not None:
        tz_problem = _bad_tz(tz)
        if tz_problem:
            reasons.append(tz_problem)
            tz = None  # said once; the schedule is checked in UTC
    for key, raw in values.items():
        normalized, problem = _check(key, raw, folder=folder, tz=tz)
        if problem:
            reasons.append(problem)
        fields[key] = normalized
    if reasons:
        return _refused(tag, reasons)
    if spec.kind in ("create_cron", "create_heartbeat"):
        fields.setdefault("folder", folder)
        fields.setdefault("chat_jid", None)
        fields.setdefault("tz", None)
        if spec.kind == "create_heartbeat":
            fields["schedule"] = f"every {fields['every']}"
    return ConductorAction(spec.kind, MappingProxyType(fields))


def _parse_body(body: str, allowed: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """The ``key: value`` lines of a conductor body, and what is wrong with them."""
    values: dict[str, str] = {}
    reasons: list[str] = []
    persona_indent: int | None = None  # set while lines may continue a persona
    keep_persona = False  # False while skipping the continuation of a refused persona
    for line in body.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if persona_indent is not None and indent > persona_indent:
            if keep_persona:
                values["persona"] = f"{values['persona']}\n{stripped}".lstrip("\n")
            continue
        persona_indent = None
        m = _KEY_LINE.fullmatch(stripped)
        if m is None:
            reasons.append(
                f"the line {_shown(stripped)} is not a 'key: value' line (a persona goes on "
                "over lines indented deeper than its 'persona:')"
            )
            continue
        key, value = m.group(1), m.group(2).strip()
        accepted = False
        if key not in allowed:
            reasons.append(f"{key!r} is not one of its keys ({', '.join(allowed)})")
        elif key in values:
            reasons.append(f"the key {key!r} is given twice")
        else:
            values[key], accepted = value, True
        if key == "persona":
            persona_indent, keep_persona = indent, accepted
    reasons.extend(f"the key {key!r} has no value" for key, value in values.items() if not value)
    return values, reasons


def _check(key: str, value: str, *, folder: str, tz: str | None) -> tuple[str, str | None]:
    """The normalized value of one conductor key and, when it is refused, why."""
    if not value:
        return value, None  # reported by _parse_body
    try:
        if key == "path":
            return value, _first(_outside(value, folder, what="New agent", strict=True))
        if key == "folder":
            return value, _first(_outside(value, folder, what="Task folder", strict=False))
        if key == "role" and value not in _ROLES:
            return value, f"role {_shown(value)} is not one of {', '.join(_ROLES)}"
        if key == "session" and value not in _SESSIONS:
            return value, f"session {_shown(value)} is not one of {', '.join(_SESSIONS)}"
        if key == "engagement_ttl":
            return value, _bad_duration(value)
        if key == "schedule":
            schedule = parse_schedule(value, tz)
            if schedule.kind != "cron":
                return value, (
                    f"schedule {_shown(value)} is not a 5-field cron expression "
                    "(use [CREATE_HEARTBEAT] with 'every:' for an interval)"
                )
            return schedule.text, None
        if key == "every":
            # "every: every 5m" says the same thing twice; accept it.
            interval = value.removeprefix("every").strip()
            return parse_schedule(f"every {interval}").text.removeprefix("every "), None
        if key == "chat_jid":
            return str(parse_jid(value, what="chat_jid")), None
    except InvalidInput as exc:  # schedules and addresses
        return value, _clause(str(exc))
    return value, None


def _bad_duration(value: str) -> str | None:
    try:
        parse_duration(value)
    except ValueError as exc:
        return f"engagement_ttl {exc}"
    return None


def _bad_tz(tz: str) -> str | None:
    # parse_schedule is the one place that knows time zones; any valid cron will do.
    try:
        parse_schedule("0 0 * * *", tz)
    except ScheduleError as exc:
        return _clause(str(exc))
    return None


def _outside(target: str, folder: str, *, what: str, strict: bool) -> list[str]:
    """Why *target* is not a folder of *folder*'s tree (below it when *strict*), if it is not."""
    try:
        validate_folder(target, what=what)
    except InvalidInput as exc:
        return [_clause(str(exc))]
    noun = f"{what.lower()} path {_shown(target)}"
    if strict and target == folder:
        return [f"{noun} is this folder itself; it must be below {folder!r}"]
    if not is_within(target, folder):
        below = "below" if strict else "in or below"
        return [f"{noun} is outside this folder's tree; it must be {below} {folder!r}"]
    return []


def _first(reasons: list[str]) -> str | None:
    return reasons[0] if reasons else None


def _refused(tag: str, reasons: Sequence[str]) -> str:
    return f"{tag} was not applied: {'; '.join(reasons)}."


def _clause(message: str) -> str:
    # Errors from other modules are whole sentences; here they become part of one.
    message = message.strip().rstrip(".")
    return message[:1].lower() + message[1:]


def _shown(value: str) -> str:
    # Messages echo what the model wrote; a pasted essay should not flood the notice.
    return repr(value if len(value) <= 60 else value[:57] + "...")


def _shown_tag(tag: str) -> str:
    return tag if len(tag) <= 60 else tag[:56] + "...]"
