"""The pure side of skills (MESSAGES §4): the file format, validation, scoring, inheritance and
the budget of a run."""

from __future__ import annotations

import pytest

from postroom.core.errors import InvalidInput
from postroom.core.skills import (
    BODY_POINTS,
    DESCRIPTION_POINTS,
    KEYWORD_POINTS,
    Skill,
    choose_skills,
    parse_skill_file,
    render_skill,
    render_skill_file,
    score_skill,
    skill_text,
    visible_skills,
)

INVOICES = Skill(
    "acme",
    "invoices",
    description="How we write invoices",
    keywords=("invoice", "purchase order"),
    body="Number them INV-<year>-<n>; attach the timesheet.",
)


def test_a_skill_file_round_trips() -> None:
    text = render_skill_file(INVOICES)
    assert text == (
        '+++\nname = "invoices"\ndescription = "How we write invoices"\n'
        'keywords = ["invoice", "purchase order"]\n+++\n'
        "Number them INV-<year>-<n>; attach the timesheet.\n"
    )
    parsed = parse_skill_file(text, default_name="invoices", where="x")
    assert (parsed.name, parsed.description, parsed.keywords, parsed.body) == (
        "invoices",
        INVOICES.description,
        INVOICES.keywords,
        INVOICES.body,
    )
    plain = parse_skill_file("Just text.\n", default_name="notes", where="x")
    assert (plain.name, plain.keywords, plain.body) == ("notes", (), "Just text.")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("+++\nname = 'other'\n+++\nbody", "the file is invoices.md"),
        ("+++\nkeywords = [\n+++\nbody", "not valid TOML"),
        ("+++\nname = 'invoices'\nbody", "never closed"),
        ("+++\ntitle = 'x'\n+++\nbody", "unknown front matter key(s) title"),
        ("+++\nkeywords = 'a, b'\n+++\n", None),
        ("+++\nkeywords = [1]\n+++\n", "keywords must be a list"),
        ("+++\ndescription = 3\n+++\n", "description must be text"),
    ],
)
def test_bad_skill_files_are_refused_naming_the_file(text: str, fragment: str | None) -> None:
    if fragment is None:  # a comma-separated string is accepted as a list
        assert parse_skill_file(text, default_name="invoices", where="x").keywords == ("a", "b")
        return
    with pytest.raises(InvalidInput, match=r"skills/invoices\.md") as caught:
        parse_skill_file(text, default_name="invoices", where="skills/invoices.md")
    assert fragment in str(caught.value)


@pytest.mark.parametrize("name", ["", "Invoices", "a b", "-x", "x" * 65, "../up", None])
def test_a_skill_name_is_a_safe_file_name(name: object) -> None:
    with pytest.raises(InvalidInput):
        skill_text({"name": name})


def test_scoring_counts_keywords_then_description_then_body_words() -> None:
    assert score_skill(INVOICES, "Where is my INVOICE?") == KEYWORD_POINTS
    assert score_skill(INVOICES, "a purchase order came in") == KEYWORD_POINTS
    # A phrase matches only as a whole, and a keyword only as a whole word.
    assert score_skill(INVOICES, "the order of purchase") == 0
    assert score_skill(INVOICES, "invoiced yesterday") == 0
    assert score_skill(INVOICES, "they want invoices") == DESCRIPTION_POINTS
    assert score_skill(INVOICES, "the timesheet") == BODY_POINTS
    # Common words say nothing.
    assert score_skill(INVOICES, "how do we write them?") == DESCRIPTION_POINTS  # "write"
    assert score_skill(INVOICES, "hello, how are you") == 0
    assert score_skill(INVOICES, "") == 0


def test_a_folder_sees_its_own_and_its_ancestors_skills_the_nearest_winning() -> None:
    skills = [
        Skill("acme", "refunds"),
        Skill("acme", "shipping", body="parent"),
        Skill("acme/support", "shipping", body="child"),
        Skill("acme/support/vip", "perks"),
        Skill("other", "refunds"),
    ]
    seen = visible_skills(skills, "acme/support")
    assert [(s.name, s.folder, origin) for s, origin in seen] == [
        ("refunds", "acme", "acme"),
        ("shipping", "acme/support", None),
    ]
    assert [s.folder for s, _ in visible_skills(skills, "acme")] == ["acme", "acme"]


def test_a_run_takes_the_best_skills_within_count_and_characters() -> None:
    def skill(name: str, keywords: tuple[str, ...], body: str = "") -> tuple[Skill, None]:
        return Skill("f", name, keywords=keywords, body=body), None

    visible = [
        skill("a", ("tax", "vat")),
        skill("b", ("tax",)),
        skill("c", ("vat",)),
        skill("big", ("tax", "vat", "forms"), "x" * 300),
        skill("none", ("cats",)),
    ]
    chosen = choose_skills(visible, "tax vat forms", max_count=2, max_chars=100)
    assert [(c.skill.name, c.score) for c in chosen] == [("a", 20), ("b", 10)]
    assert sum(len(render_skill(c.skill)) for c in chosen) <= 100
    everything = choose_skills(visible, "tax vat forms", max_count=10, max_chars=10_000)
    assert [c.skill.name for c in everything] == ["big", "a", "b", "c"]
    assert choose_skills(visible, "tax", max_count=0, max_chars=10_000) == []
    assert everything[0].to_record() == {
        "name": "big",
        "folder": "f",
        "inherited_from": None,
        "score": 30,
        "chars": len(render_skill(visible[3][0])),
    }
