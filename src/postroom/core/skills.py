"""Skills (MESSAGES §4): Markdown documents a folder keeps for its runs, chosen per turn.

A skill file is Markdown with TOML front matter between ``+++`` lines, as ``AGENT.md``::

    +++
    name = "invoices"
    description = "How we write and send invoices"
    keywords = ["invoice", "billing", "vat"]
    +++
    Invoices are numbered INV-<year>-<n>...

A folder sees its own skills and those of every folder above it; a skill of the same name
nearer the folder wins. For each run the skills are scored against the turn's new messages:
each keyword (a word or a phrase, matched as whole words, case-insensitively) found there
counts :data:`KEYWORD_POINTS`; each other word of the messages (3 letters or more, not a
common word) counts :data:`DESCRIPTION_POINTS` when the skill's name or description holds it
and :data:`BODY_POINTS` when only its body does. Those scoring above zero, best first, are
appended to the system prompt — at most ``skills.max_per_run`` of them, within
``skills.max_chars`` (a skill that does not fit is passed over for a smaller one).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postroom.core.errors import InvalidInput
from postroom.core.folders import ancestors

__all__ = [
    "BODY_POINTS",
    "DESCRIPTION_POINTS",
    "KEYWORD_POINTS",
    "MAX_SKILL_BODY_CHARS",
    "SKILL_FIELDS",
    "ChosenSkill",
    "Skill",
    "SkillText",
    "check_skill_name",
    "choose_skills",
    "parse_skill_file",
    "render_skill",
    "render_skill_file",
    "score_skill",
    "skill_text",
    "visible_skills",
]

KEYWORD_POINTS = 10
DESCRIPTION_POINTS = 3
BODY_POINTS = 1
MAX_SKILL_NAME = 64
MAX_DESCRIPTION_CHARS = 1_000
MAX_KEYWORDS = 64
MAX_KEYWORD_CHARS = 100
MAX_SKILL_BODY_CHARS = 65_536
#: The front matter keys of a skill file.
SKILL_FIELDS = ("name", "description", "keywords")

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_WORD = re.compile(r"\w+", re.UNICODE)
_FENCE = "+++"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: Words too common to say anything about which skill a message needs.
_COMMON_WORDS = """
    about after again all also and any are because been before being between both boy but can
    can't come could day did does doing don't done each every few first for from get good had
    has have hello her here hey him his how i'm into it's its just know let let's like long
    make man many more most much new not now okay old one only other our out over own please
    put same say see she should some such take than thank thanks that the their them then
    there these they this those through time too two under use very want was way well were
    what when where which while who will with would yeah yes you your
"""
_COMMON = frozenset(_COMMON_WORDS.split())


@dataclass(frozen=True, slots=True)
class SkillText:
    """A skill as written: what a file, the CLI or the API gives."""

    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()
    body: str = ""


@dataclass(frozen=True, slots=True)
class Skill:
    """A stored skill of one folder."""

    folder: str
    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()
    body: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: The (mtime, size) of ``skills/<name>.md`` when the row and the file last agreed.
    file_stamp: str | None = None


@dataclass(frozen=True, slots=True)
class ChosenSkill:
    """A skill injected into a run, with the score that chose it."""

    skill: Skill
    score: int
    #: The folder it came from when that is not the run's own (inheritance).
    inherited_from: str | None

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.skill.name,
            "folder": self.skill.folder,
            "inherited_from": self.inherited_from,
            "score": self.score,
            "chars": len(render_skill(self.skill)),
        }


def check_skill_name(name: Any, *, where: str = "Skill") -> str:
    """*name* if it can name a skill (and its file ``skills/<name>.md``)."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}: the name is empty; use letters like invoices or tax-help.")
    if len(name) > MAX_SKILL_NAME:
        raise InvalidInput(f"{where}: the name is longer than {MAX_SKILL_NAME} characters.")
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{where}: the name {name!r} may use only a-z, 0-9, '_' and '-' (starting with a "
            "letter or digit)."
        )
    return name


def skill_text(values: Mapping[str, Any], *, where: str = "Skill") -> SkillText:
    """Validate a skill's fields (``name``, ``description``, ``keywords``, ``body``); a list
    of keywords may also be given as one comma-separated string."""
    unknown = sorted(set(values) - {*SKILL_FIELDS, "body"})
    if unknown:
        raise InvalidInput(
            f"{where}: unknown field(s) {', '.join(unknown)}; the fields are name, description, "
            "keywords and body."
        )
    name = check_skill_name(values.get("name"), where=where)
    description = _text(values.get("description"), "description", MAX_DESCRIPTION_CHARS, where)
    body = _text(values.get("body"), "body", MAX_SKILL_BODY_CHARS, where, multiline=True)
    return SkillText(name, description, _keywords(values.get("keywords"), where), body)


def _text(value: Any, key: str, limit: int, where: str, *, multiline: bool = False) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: {key} must be text.")
    text = value.strip() if multiline else " ".join(value.split())
    if len(text) > limit:
        raise InvalidInput(f"{where}: {key} is longer than {limit} characters.")
    if _CONTROL.search(text):
        raise InvalidInput(f"{where}: {key} contains control characters.")
    return text


def _keywords(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidInput(f"{where}: keywords must be a list of words or phrases.")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidInput(f"{where}: keywords must be a list of words or phrases.")
        keyword = " ".join(item.lower().split())
        if not keyword:
            continue
        if len(keyword) > MAX_KEYWORD_CHARS or _CONTROL.search(keyword):
            raise InvalidInput(
                f"{where}: the keyword {keyword[:40]!r} is longer than {MAX_KEYWORD_CHARS} "
                "characters or holds control characters."
            )
        if keyword not in out:
            out.append(keyword)
    if len(out) > MAX_KEYWORDS:
        raise InvalidInput(f"{where}: more than {MAX_KEYWORDS} keywords.")
    return tuple(out)


def parse_skill_file(
    text: str, *, default_name: str, where: str, named_by_file: bool = True
) -> SkillText:
    """A skill file's fields. Its name is *default_name* (the file's) unless the front matter
    gives one; in the ``skills/`` mirror (*named_by_file*) the two must agree. Raises
    InvalidInput naming *where*."""
    front: dict[str, Any] = {}
    body = text
    if text.startswith(_FENCE + "\n"):
        rest = text[len(_FENCE) + 1 :]
        if rest.startswith(_FENCE):
            raw, body = "", rest[len(_FENCE) :]
        else:
            end = rest.find("\n" + _FENCE)
            if end < 0:
                raise InvalidInput(f"{where}: the front matter opened by '+++' is never closed.")
            raw, body = rest[:end], rest[end + 1 + len(_FENCE) :]
        try:
            front = tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(f"{where}: the front matter is not valid TOML ({exc}).") from exc
        unknown = sorted(set(front) - set(SKILL_FIELDS))
        if unknown:
            raise InvalidInput(
                f"{where}: unknown front matter key(s) {', '.join(unknown)}; the keys are "
                f"{', '.join(SKILL_FIELDS)}."
            )
    name = front.get("name", default_name)
    if named_by_file and name != default_name:
        raise InvalidInput(
            f"{where}: the front matter names the skill {name!r} but the file is "
            f"{default_name}.md; a skill's file is named after it."
        )
    return skill_text({**front, "name": name, "body": body}, where=where)


def render_skill_file(skill: SkillText | Skill) -> str:
    """The text of ``skills/<name>.md`` mirroring a skill."""
    lines = [f"name = {_toml(skill.name)}"]
    if skill.description:
        lines.append(f"description = {_toml(skill.description)}")
    if skill.keywords:
        lines.append("keywords = [" + ", ".join(_toml(k) for k in skill.keywords) + "]")
    body = skill.body.rstrip("\n") + "\n" if skill.body else ""
    return f"{_FENCE}\n" + "\n".join(lines) + f"\n{_FENCE}\n" + body


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)


def visible_skills(skills: Iterable[Skill], folder: str) -> list[tuple[Skill, str | None]]:
    """The skills *folder* sees, each with the folder it is inherited from (``None`` for its
    own): its own, then its ancestors', a nearer skill hiding a farther one of the same name.
    Sorted by name."""
    nearness = {path: depth for depth, path in enumerate([folder, *reversed(ancestors(folder))])}
    best: dict[str, Skill] = {}
    for skill in skills:
        if skill.folder not in nearness:
            continue
        held = best.get(skill.name)
        if held is None or nearness[skill.folder] < nearness[held.folder]:
            best[skill.name] = skill
    return [
        (skill, None if skill.folder == folder else skill.folder)
        for _, skill in sorted(best.items())
    ]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _has_phrase(words: Sequence[str], phrase: Sequence[str]) -> bool:
    size = len(phrase)
    if not size:
        return False
    first = phrase[0]
    return any(
        words[i] == first and list(words[i : i + size]) == list(phrase)
        for i in range(len(words) - size + 1)
    )


def score_skill(skill: Skill, text: str) -> int:
    """How well *skill* fits a turn whose new messages are *text* (0: not at all)."""
    words = _words(text)
    if not words:
        return 0
    score = 0
    keyword_words: set[str] = set()
    for keyword in skill.keywords:
        phrase = _words(keyword)
        keyword_words.update(phrase)
        if _has_phrase(words, phrase):
            score += KEYWORD_POINTS
    described = set(_words(f"{skill.name.replace('-', ' ')} {skill.description}"))
    body = set(_words(skill.body))
    for word in set(words):
        if len(word) < 3 or word in _COMMON or word in keyword_words:
            continue
        if word in described:
            score += DESCRIPTION_POINTS
        elif word in body:
            score += BODY_POINTS
    return score


def render_skill(skill: Skill) -> str:
    """One skill as it appears in the system prompt."""
    head = f"## Skill: {skill.name}"
    if skill.description:
        head += f" — {skill.description}"
    return f"{head}\n{skill.body.strip()}" if skill.body.strip() else head


def choose_skills(
    visible: Sequence[tuple[Skill, str | None]],
    text: str,
    *,
    max_count: int,
    max_chars: int,
) -> list[ChosenSkill]:
    """The skills of a run: scoring above zero, best first (then by name), at most
    *max_count*, their rendered text within *max_chars* in all."""
    scored = [(score_skill(skill, text), skill, origin) for skill, origin in visible]
    ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1].name))
    chosen: list[ChosenSkill] = []
    used = 0
    for score, skill, origin in ranked:
        if len(chosen) >= max_count:
            break
        size = len(render_skill(skill))
        if used + size > max_chars:
            continue  # a smaller one further down may still fit
        used += size
        chosen.append(ChosenSkill(skill, score, origin))
    return chosen
