"""Tags in a model's answer (PIPELINE §5): every tag form, what is stripped and how the text is
tidied, code left alone, role gating, tree confinement, and every refusal with its sentence."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from postroom.core.chunking import fenced_blocks
from postroom.core.tags import (
    ConductorAction,
    Delegation,
    MemoryTag,
    StateTag,
    TagResult,
    partial_text,
    process_tags,
)

HOME = "atlas"


def run(text: str, role: str = "agent", folder: str = HOME) -> TagResult:
    return process_tags(text, folder=folder, role=role)


def conduct(text: str) -> TagResult:
    return run(text, role="conductor")


def block(name: str, *lines: str, arg: str = "") -> str:
    """``[NAME(:arg)]`` + body lines + ``[/NAME]``, one per line."""
    opening = f"[{name}:{arg}]" if arg else f"[{name}]"
    return "\n".join([opening, *lines, f"[/{name}]"])


def only_problem(result: TagResult) -> str:
    assert (result.memories, result.states, result.actions, result.delegations) == ((), (), (), ())
    assert len(result.problems) == 1, result.problems
    return result.problems[0]


# --- memory and state ---------------------------------------------------------------------------

M = MemoryTag
S = StateTag

LINE_TAG_CASES = [
    # end-of-line form
    ("[MEMORY:sticky] Never forget this", "", [M("sticky", "Never forget this")], []),
    ("[MEMORY:user_preference] Likes tea\nHello", "Hello", [M("user_preference", "Likes tea")], []),
    # closing-tag form, on one line and across lines
    ("[MEMORY:sticky] fact [/MEMORY] Hello", "Hello", [M("sticky", "fact")], []),
    (
        "[MEMORY:project_context] uses\nDjango [/MEMORY]\nOK",
        "OK",
        [M("project_context", "uses\nDjango")],
        [],
    ),
    # any lowercase category; spaces around the argument are tolerated
    ("[MEMORY:learned_pattern] a", "", [M("learned_pattern", "a")], []),
    ("[MEMORY:my_own] a", "", [M("my_own", "a")], []),
    ("[MEMORY: sticky ] a", "", [M("sticky", "a")], []),
    # a closing tag only counts before the next tag opens
    (
        "[MEMORY:a] one\n[MEMORY:b] two\nlines [/MEMORY] end",
        "end",
        [M("a", "one"), M("b", "two\nlines")],
        [],
    ),
    # two line tags on one line: the first stops where the second starts
    ("[MEMORY:a] one [MEMORY:b] two", "", [M("a", "one"), M("b", "two")], []),
    ("[STATE:mood] happy [MEMORY:a] one", "", [M("a", "one")], [S("mood", "happy")]),
    # a fact may hold inline code and brackets that are not tags
    ("[MEMORY:a] run `make [x]` first", "", [M("a", "run `make [x]` first")], []),
    # state
    ("[STATE:mood] happy", "", [], [S("mood", "happy")]),
    ("[STATE:build.v2-x_Y] 3 [/STATE] ok", "ok", [], [S("build.v2-x_Y", "3")]),
    ("[STATE:mood]", "", [], [S("mood", "")]),  # an empty value clears the key
    ("[STATE:mood] [/STATE]", "", [], [S("mood", "")]),
    ("[STATE:a] 1\n[STATE:b] 2\n[STATE:a] 3", "", [], [S("a", "1"), S("b", "2"), S("a", "3")]),
    # CRLF line endings: the "\r" stays with its line, not in the value
    ("Hi\r\n[STATE:k] v\r\nBye", "Hi\r\nBye", [], [S("k", "v")]),
]


@pytest.mark.parametrize(("text", "shown", "memories", "states"), LINE_TAG_CASES)
def test_line_tags(
    text: str, shown: str, memories: list[MemoryTag], states: list[StateTag]
) -> None:
    for role in ("agent", "conductor", "admin"):
        result = run(text, role)
        assert result.text == shown
        assert list(result.memories) == memories
        assert list(result.states) == states
        assert result.problems == ()


LINE_TAG_PROBLEMS = [
    (
        "[MEMORY:Sticky] x",
        "[MEMORY:Sticky] was not applied: the category 'Sticky' is not lowercase letters and '_' "
        "(like sticky or user_preference).",
    ),
    ("[MEMORY:a-b] x", "[MEMORY:a-b] was not applied: the category 'a-b' is not lowercase"),
    ("[MEMORY:] x", "[MEMORY:] was not applied: the category '' is not lowercase"),
    ("[MEMORY:sticky]", "[MEMORY:sticky] was not applied: it has no fact."),
    ("[MEMORY:sticky]   [/MEMORY]", "[MEMORY:sticky] was not applied: it has no fact."),
    (
        "[MEMORY:Bad]",
        "[MEMORY:Bad] was not applied: the category 'Bad' is not lowercase letters and '_' "
        "(like sticky or user_preference); it has no fact.",
    ),
    (
        "[STATE:my key] v",
        "[STATE:my key] was not applied: the key 'my key' may use only letters, digits, '_', "
        "'.' and '-'.",
    ),
    ("[STATE:] v", "[STATE:] was not applied: the key '' may use only"),
]


@pytest.mark.parametrize(("text", "problem"), LINE_TAG_PROBLEMS)
def test_refused_line_tags_are_removed_and_reported(text: str, problem: str) -> None:
    result = run(text)
    assert only_problem(result).startswith(problem)
    assert result.text == ""


def test_a_long_argument_is_shortened_in_the_problem() -> None:
    problem = only_problem(run(f"[STATE:{'x ' * 100}] v"))
    assert problem.startswith("[STATE:x x x")
    assert "...]" in problem
    assert len(problem) < 250


# --- what the user receives ---------------------------------------------------------------------

TIDY_CASES = [
    # a tag on its own line takes the line with it
    ("Hi!\n[MEMORY:a] x\nBye", "Hi!\nBye"),
    # blank lines around a removed line collapse to the longest run that was there
    ("Para one.\n\n[MEMORY:a] x\n\nPara two.", "Para one.\n\nPara two."),
    ("Para one.\n\n[MEMORY:a] x\nPara two.", "Para one.\n\nPara two."),
    ("One.\n\n[MEMORY:a] x\n\n[STATE:k] v\n\n\nTwo.", "One.\n\n\nTwo."),
    # at the start or end of the answer, the blank lines go too
    ("[MEMORY:a] x\n\nHello", "Hello"),
    ("Hello\n\n[MEMORY:a] x", "Hello"),
    ("Hello\n\n[MEMORY:a] x\n", "Hello\n"),  # the answer's final newline stays
    ("Hello\n[MEMORY:a] x\n\n\n", "Hello\n"),
    # text beside a tag stays on its line, joined by one space
    ("Sure! [MEMORY:a] x", "Sure!"),
    ("Sure! [STATE:k] v [/STATE] Anything else?", "Sure! Anything else?"),
    ("Noted [STATE:k] v [/STATE].", "Noted."),
    ("a[STATE:k]v[/STATE]b", "ab"),
    ("[STATE:k] v [/STATE]   Done.", "Done."),
    ("x [STATE:a] 1 [/STATE] y [STATE:b] 2 [/STATE] z", "x y z"),
    # indentation before a tag is kept
    ("- item\n  [STATE:k] v [/STATE] more", "- item\n  more"),
    # a tag spanning lines leaves the text around it on separate lines
    ("Sure [DELEGATE:atlas/a]\ndo it\n[/DELEGATE] thanks", "Sure\nthanks"),
    # nothing else changes: untouched blank lines and trailing spaces stay
    ("A  \n\n\n\nB\n[MEMORY:a] x\nC", "A  \n\n\n\nB\nC"),
    # all tags: nothing left
    ("[MEMORY:a] x\n\n[STATE:k] v\n", ""),
]


@pytest.mark.parametrize(("text", "shown"), TIDY_CASES)
def test_tags_are_stripped_and_the_text_tidied(text: str, shown: str) -> None:
    assert run(text).text == shown


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain answer",
        "  spaced  \n\n\n  out  \n",
        "[not a tag] and [MEMORY] and [STATE] and [MEMORY:x no bracket",
        "[memory:sticky] lowercase names are not tags",
        "[/MEMORY] a stray closing tag [/DELEGATE]",
        "[CREATE_AGENT:x] is not a tag form\n[/CREATE_AGENT]",
    ],
)
def test_text_without_tags_is_unchanged(text: str) -> None:
    for role in ("agent", "conductor", "admin"):
        assert run(text, role) == TagResult(text)


# --- code is left alone -------------------------------------------------------------------------

CODE_CASES = [
    "Write `[MEMORY:sticky] fact` to remember.",
    "Use ``[STATE:k] v`` or `x`.",
    "```\n[MEMORY:sticky] fact\n[DELEGATE:atlas/a] x [/DELEGATE]\n```",
    "~~~md\n[STATE:k] v\n~~~",
    "  ```text\n  [MEMORY:a] in a list item's block\n  ```",
    "```[MEMORY:a] on the fence line\n```",
    "```\nunclosed block\n[MEMORY:a] x",
    "```\n`[MEMORY:a] x` inline code inside a block\n```",
]


@pytest.mark.parametrize("text", CODE_CASES)
def test_tags_in_code_are_not_processed(text: str) -> None:
    for role in ("agent", "conductor"):
        assert run(text, role) == TagResult(text)


def test_code_and_tags_mixed() -> None:
    text = "Syntax: `[MEMORY:cat] fact`.\n```\n[STATE:k] v\n```\n[MEMORY:sticky] real\nEnd"
    result = run(text)
    assert result.memories == (M("sticky", "real"),)
    assert result.states == ()
    assert result.text == "Syntax: `[MEMORY:cat] fact`.\n```\n[STATE:k] v\n```\nEnd"


def test_a_closing_tag_in_code_does_not_close() -> None:
    result = run("[MEMORY:a] fact `[/MEMORY]` more\nnext")
    assert result.memories == (M("a", "fact `[/MEMORY]` more"),)
    assert result.text == "next"


def test_a_lone_backtick_does_not_hide_later_tags() -> None:
    result = run("it's a ` tick\n[MEMORY:a] x\nand ` another")
    assert result.memories == (M("a", "x"),)


def test_a_task_may_carry_a_code_block_with_a_closing_tag_in_it() -> None:
    text = "[DELEGATE:atlas/dev] Fix:\n```\nprint('[/DELEGATE]')\n```\n[/DELEGATE]\nOn it."
    result = run(text)
    assert result.delegations == (Delegation("atlas/dev", "Fix:\n```\nprint('[/DELEGATE]')\n```"),)
    assert result.text == "On it."


def test_a_tag_that_removal_brings_out_of_code_is_processed_too() -> None:
    # Removing the first tag turns its line into a fence, and the fences after it pair
    # differently: the memory line is now prose, so it must not reach the user as a tag.
    text = "[STATE:k] v [/STATE]```\ntext\n```\n[MEMORY:x] inside\n```\n```"
    result = run(text)
    assert result.states == (S("k", "v"),)
    assert result.memories == (M("x", "inside"),)
    assert "[MEMORY" not in result.text
    assert run(result.text) == TagResult(result.text)


# --- delegation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["agent", "conductor", "admin"])
def test_delegation_works_for_every_role(role: str) -> None:
    result = run("On it.\n[DELEGATE:atlas/prices]\nCheck the SOL price\n[/DELEGATE]", role)
    assert result.delegations == (Delegation("atlas/prices", "Check the SOL price"),)
    assert result.text == "On it."
    assert result.problems == ()


def test_delegation_one_line_and_deeper() -> None:
    result = run("[DELEGATE:atlas/a/b] x [/DELEGATE][DELEGATE:atlas/c] y [/DELEGATE]")
    assert result.delegations == (Delegation("atlas/a/b", "x"), Delegation("atlas/c", "y"))


def test_a_delegated_task_keeps_the_tags_it_quotes() -> None:
    result = run("[DELEGATE:atlas/a] remember with [MEMORY:sticky] fact\n[/DELEGATE]")
    assert result.delegations == (Delegation("atlas/a", "remember with [MEMORY:sticky] fact"),)
    assert result.memories == ()


DELEGATION_PROBLEMS = [
    (
        "[DELEGATE:atlas] x [/DELEGATE]",
        "[DELEGATE:atlas] was not applied: delegation target path 'atlas' is this folder itself; "
        "it must be below 'atlas'.",
    ),
    (
        "[DELEGATE:other] x [/DELEGATE]",
        "[DELEGATE:other] was not applied: delegation target path 'other' is outside this "
        "folder's tree; it must be below 'atlas'.",
    ),
    (  # a sibling sharing the prefix
        "[DELEGATE:atlas2/x] x [/DELEGATE]",
        "[DELEGATE:atlas2/x] was not applied: delegation target path 'atlas2/x' is outside",
    ),
    (
        "[DELEGATE:atlas/../other] x [/DELEGATE]",
        "[DELEGATE:atlas/../other] was not applied: delegation target path 'atlas/../other' "
        "contains '..'; folders cannot leave the folder tree.",
    ),
    (
        "[DELEGATE:../x] x [/DELEGATE]",
        "[DELEGATE:../x] was not applied: delegation target path '../x' contains '..'",
    ),
    (
        "[DELEGATE:/atlas/a] x [/DELEGATE]",
        "[DELEGATE:/atlas/a] was not applied: delegation target path '/atlas/a' must not start "
        "or end with '/'.",
    ),
    (
        "[DELEGATE:Atlas/A] x [/DELEGATE]",
        "[DELEGATE:Atlas/A] was not applied: delegation target path 'Atlas/A' has uppercase",
    ),
    ("[DELEGATE:atlas/a] [/DELEGATE]", "[DELEGATE:atlas/a] was not applied: it has no task."),
    (
        "[DELEGATE:] x [/DELEGATE]",
        "[DELEGATE:] was not applied: it names no folder; write [DELEGATE:<folder>] task "
        "[/DELEGATE].",
    ),
    ("[DELEGATE] x [/DELEGATE]", "[DELEGATE] was not applied: it names no folder"),
]


@pytest.mark.parametrize(("text", "problem"), DELEGATION_PROBLEMS)
def test_refused_delegations(text: str, problem: str) -> None:
    result = run(text)
    assert only_problem(result).startswith(problem)
    assert result.text == ""


def test_an_unclosed_block_stays_in_the_text_and_later_tags_still_count() -> None:
    text = "Start [DELEGATE:atlas/a] never closed\nmore words\n[MEMORY:sticky] fact"
    result = run(text)
    assert result.problems == (
        "[DELEGATE:atlas/a] was not applied: it has no closing [/DELEGATE], so it was left in "
        "the text.",
    )
    assert result.memories == (M("sticky", "fact"),)
    assert result.text == "Start [DELEGATE:atlas/a] never closed\nmore words"


def test_a_block_opened_again_before_closing_is_unclosed() -> None:
    result = run("[DELEGATE:atlas/a] first\n[DELEGATE:atlas/b] second [/DELEGATE]")
    assert result.delegations == (Delegation("atlas/b", "second"),)
    assert result.text == "[DELEGATE:atlas/a] first"
    assert result.problems[0].startswith("[DELEGATE:atlas/a] was not applied: it has no closing")


# --- conductor tags -----------------------------------------------------------------------------

CREATE_AGENT_FULL = block(
    "CREATE_AGENT",
    "path: atlas/content",
    "persona: You write the weekly newsletter.",
    "provider: anthropic",
    "model: claude-sonnet",
    "role: agent",
    "engagement_ttl: 30m",
    "session: shared",
)

CONDUCTOR_CASES = [
    (
        CREATE_AGENT_FULL,
        ConductorAction(
            "create_agent",
            {
                "path": "atlas/content",
                "persona": "You write the weekly newsletter.",
                "provider": "anthropic",
                "model": "claude-sonnet",
                "role": "agent",
                "engagement_ttl": "30m",
                "session": "shared",
            },
        ),
    ),
    (
        block("CREATE_AGENT", "", "path: atlas/a/b", ""),
        ConductorAction("create_agent", {"path": "atlas/a/b"}),
    ),
    (  # a persona goes on over deeper-indented lines; blank lines are ignored
        block(
            "CREATE_AGENT",
            "path: atlas/a",
            "persona: You are terse.",
            "  Answer in French.",
            "",
            "    Rules: never guess.",
            "role: conductor",
        ),
        ConductorAction(
            "create_agent",
            {
                "path": "atlas/a",
                "persona": "You are terse.\nAnswer in French.\nRules: never guess.",
                "role": "conductor",
            },
        ),
    ),
    (  # the persona may start on the next line; a body indented as a whole reads the same
        block(
            "CREATE_AGENT", "  path: atlas/a", "  persona:", "    Line one.", "  session: per-chat"
        ),
        ConductorAction(
            "create_agent", {"path": "atlas/a", "persona": "Line one.", "session": "per-chat"}
        ),
    ),
    (  # a persona teaching the tag syntax keeps it
        block("CREATE_AGENT", "path: atlas/a", "persona: Save facts with [MEMORY:sticky] fact"),
        ConductorAction(
            "create_agent", {"path": "atlas/a", "persona": "Save facts with [MEMORY:sticky] fact"}
        ),
    ),
    (
        block("UPDATE_AGENT", "model: gpt-4o", "engagement_ttl: 0", arg="atlas/content"),
        ConductorAction(
            "update_agent", {"folder": "atlas/content", "model": "gpt-4o", "engagement_ttl": "0"}
        ),
    ),
    (
        block("CREATE_CRON", "schedule: 0 9 * * 1-5", "prompt: Post the digest"),
        ConductorAction(
            "create_cron",
            {
                "schedule": "0 9 * * 1-5",
                "prompt": "Post the digest",
                "folder": HOME,
                "chat_jid": None,
                "tz": None,
            },
        ),
    ),
    (
        block(
            "CREATE_CRON",
            "schedule: 30 7 * * *",
            "prompt: Weather",
            "folder: atlas/news",
            "chat_jid: telegram:user/42",
            "tz: Europe/Berlin",
        ),
        ConductorAction(
            "create_cron",
            {
                "schedule": "30 7 * * *",
                "prompt": "Weather",
                "folder": "atlas/news",
                "chat_jid": "telegram:user/42",
                "tz": "Europe/Berlin",
            },
        ),
    ),
    (
        block("CREATE_HEARTBEAT", "every: 5m", "prompt: Check the queue"),
        ConductorAction(
            "create_heartbeat",
            {
                "every": "5m",
                "schedule": "every 5m",
                "prompt": "Check the queue",
                "folder": HOME,
                "chat_jid": None,
                "tz": None,
            },
        ),
    ),
    (  # "every: every 2h" and long unit names are read as the interval they mean
        block("CREATE_HEARTBEAT", "every: every 2 hours", "prompt: p", "folder: atlas"),
        ConductorAction(
            "create_heartbeat",
            {
                "every": "2h",
                "schedule": "every 2h",
                "prompt": "p",
                "folder": HOME,
                "chat_jid": None,
                "tz": None,
            },
        ),
    ),
]


@pytest.mark.parametrize(("text", "action"), CONDUCTOR_CASES)
def test_conductor_tags(text: str, action: ConductorAction) -> None:
    result = conduct(f"Done.\n{text}\nAnything else?")
    assert result.problems == ()
    assert result.actions == (action,)
    assert dict(result.actions[0].fields) == dict(action.fields)
    assert result.text == "Done.\nAnything else?"


def test_action_fields_are_read_only() -> None:
    action = conduct(block("CREATE_AGENT", "path: atlas/a")).actions[0]
    with pytest.raises(TypeError):
        action.fields["path"] = "elsewhere"  # type: ignore[index]
    assert hash(action) == hash(ConductorAction("create_agent", {}))


@pytest.mark.parametrize("role", ["agent", "admin"])
@pytest.mark.parametrize(
    "text",
    [
        CREATE_AGENT_FULL,
        block("UPDATE_AGENT", "model: x", arg="atlas/a"),
        block("CREATE_CRON", "schedule: bogus"),
        block("CREATE_HEARTBEAT", "every: 5m", "prompt: p"),
        "[CREATE_AGENT] never closed",
    ],
)
def test_conductor_tags_are_plain_text_for_other_roles(role: str, text: str) -> None:
    assert run(text, role) == TagResult(text)


def test_tags_inside_a_non_conductors_conductor_block_are_ordinary_tags() -> None:
    text = block("CREATE_AGENT", "path: atlas/a", "[MEMORY:sticky] fact")
    result = run(text, "agent")
    assert result.memories == (M("sticky", "fact"),)
    assert result.text == "[CREATE_AGENT]\npath: atlas/a\n[/CREATE_AGENT]"


CONDUCTOR_PROBLEMS = [
    # keys
    (
        block("CREATE_AGENT", "path: atlas/a", "colour: red"),
        "[CREATE_AGENT] was not applied: 'colour' is not one of its keys (path, persona, "
        "provider, model, role, engagement_ttl, session, busy_policy, budget_per_day).",
    ),
    (
        block("CREATE_AGENT", "persona: p"),
        "[CREATE_AGENT] was not applied: it lacks the required 'path'.",
    ),
    (
        block("CREATE_CRON"),
        "[CREATE_CRON] was not applied: it lacks the required 'schedule' and 'prompt'.",
    ),
    (
        block("CREATE_HEARTBEAT", "prompt: p"),
        "[CREATE_HEARTBEAT] was not applied: it lacks the required 'every'.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "path: atlas/b"),
        "[CREATE_AGENT] was not applied: the key 'path' is given twice.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "model:"),
        "[CREATE_AGENT] was not applied: the key 'model' has no value.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "persona: p", "Not indented, not a key"),
        "[CREATE_AGENT] was not applied: the line 'Not indented, not a key' is not a 'key: value' "
        "line (a persona goes on over lines indented deeper than its 'persona:').",
    ),
    (
        block("CREATE_AGENT", "Path: atlas/a"),
        "[CREATE_AGENT] was not applied: 'Path' is not one of its keys",
    ),
    # the new agent's path
    (
        block("CREATE_AGENT", "path: atlas"),
        "[CREATE_AGENT] was not applied: new agent path 'atlas' is this folder itself; it must be "
        "below 'atlas'.",
    ),
    (
        block("CREATE_AGENT", "path: other/a"),
        "[CREATE_AGENT] was not applied: new agent path 'other/a' is outside this folder's tree; "
        "it must be below 'atlas'.",
    ),
    (
        block("CREATE_AGENT", "path: atlas-b"),
        "[CREATE_AGENT] was not applied: new agent path 'atlas-b' is outside",
    ),
    (
        block("CREATE_AGENT", "path: atlas/../x"),
        "[CREATE_AGENT] was not applied: new agent path 'atlas/../x' contains '..'",
    ),
    (
        block("CREATE_AGENT", "path: /atlas/a"),
        "[CREATE_AGENT] was not applied: new agent path '/atlas/a' must not start or end with '/'.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/my agent"),
        "[CREATE_AGENT] was not applied: new agent path 'atlas/my agent' contains ' '",
    ),
    # setting values
    (
        block("CREATE_AGENT", "path: atlas/a", "role: boss"),
        "[CREATE_AGENT] was not applied: role 'boss' is not one of agent, conductor, admin.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "session: private"),
        "[CREATE_AGENT] was not applied: session 'private' is not one of per-chat, shared.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "engagement_ttl: 30"),
        "[CREATE_AGENT] was not applied: engagement_ttl must be a duration from 0 to 30d like "
        "90s, 30m or 2h, not '30'.",
    ),
    # Bounds: model output can never store a value that breaks time arithmetic.
    (
        block("UPDATE_AGENT", "engagement_ttl: 99999999h", arg="atlas/a"),
        "[UPDATE_AGENT:atlas/a] was not applied: engagement_ttl must be a duration from 0 to 30d, "
        "not '99999999h'.",
    ),
    (
        block("CREATE_AGENT", "path: atlas/a", "engagement_ttl: 31d"),
        "[CREATE_AGENT] was not applied: engagement_ttl must be a duration from 0 to 30d, "
        "not '31d'.",
    ),
    # update
    (
        block("UPDATE_AGENT", "model: x", arg="atlas"),
        "[UPDATE_AGENT:atlas] was not applied: the conductor cannot update itself ('atlas' is this "
        "folder).",
    ),
    (
        block("UPDATE_AGENT", "model: x", arg="beta"),
        "[UPDATE_AGENT:beta] was not applied: target path 'beta' is outside this folder's tree; it "
        "must be below 'atlas'.",
    ),
    (
        block("UPDATE_AGENT", "model: x", arg="../beta"),
        "[UPDATE_AGENT:../beta] was not applied: target path '../beta' contains '..'",
    ),
    (
        block("UPDATE_AGENT", "", arg="atlas/a"),
        "[UPDATE_AGENT:atlas/a] was not applied: it changes nothing; give at least one of persona, "
        "provider, model, role, engagement_ttl, session, busy_policy, budget_per_day.",
    ),
    (
        block("UPDATE_AGENT", "path: atlas/b", arg="atlas/a"),
        "[UPDATE_AGENT:atlas/a] was not applied: 'path' is not one of its keys",
    ),
    (
        block("UPDATE_AGENT", "model: x"),
        "[UPDATE_AGENT] was not applied: it names no folder; write [UPDATE_AGENT:<folder>].",
    ),
    # tasks
    (
        block("CREATE_CRON", "schedule: 0 25 * * *", "prompt: p"),
        "[CREATE_CRON] was not applied: schedule '0 25 * * *' is not valid:",
    ),
    (
        block("CREATE_CRON", "schedule: every 5m", "prompt: p"),
        "[CREATE_CRON] was not applied: schedule 'every 5m' is not a 5-field cron expression "
        "(use [CREATE_HEARTBEAT] with 'every:' for an interval).",
    ),
    (
        block("CREATE_CRON", "schedule: 2030-01-01T09:00", "prompt: p"),
        "[CREATE_CRON] was not applied: schedule '2030-01-01T09:00' is not a 5-field cron",
    ),
    (
        block("CREATE_CRON", "schedule: 0 9 * * *", "prompt: p", "tz: Mars/Olympus"),
        "[CREATE_CRON] was not applied: time zone 'Mars/Olympus' is not a known IANA time zone "
        "name such as 'Europe/Berlin' or 'UTC'.",
    ),
    (
        block("CREATE_CRON", "schedule: 0 9 * * *", "prompt: p", "folder: beta"),
        "[CREATE_CRON] was not applied: task folder path 'beta' is outside this folder's tree; "
        "it must be in or below 'atlas'.",
    ),
    (
        block("CREATE_CRON", "schedule: 0 9 * * *", "prompt: p", "chat_jid: nocolon"),
        "[CREATE_CRON] was not applied: the chat_jid 'nocolon' has no ':'; expected platform:room.",
    ),
    (
        block("CREATE_HEARTBEAT", "every: 0m", "prompt: p"),
        "[CREATE_HEARTBEAT] was not applied: schedule 'every 0m' is not valid: it looks like an "
        "interval but N must be at least 1",
    ),
    (
        block("CREATE_HEARTBEAT", "every: soon", "prompt: p"),
        "[CREATE_HEARTBEAT] was not applied: schedule 'every soon' is not valid",
    ),
    (
        block("CREATE_HEARTBEAT", "every: 5m", "prompt: p", "tz: UTC"),
        "[CREATE_HEARTBEAT] was not applied: 'tz' is not one of its keys (every, prompt, folder, "
        "chat_jid).",
    ),
    (
        block("CREATE_HEARTBEAT", "every: 5m", "prompt: p", "folder: atlas/../../x"),
        "[CREATE_HEARTBEAT] was not applied: task folder path 'atlas/../../x' contains '..'",
    ),
    # every reason in one sentence
    (
        block("CREATE_AGENT", "path: ../x", "role: god", "colour: red"),
        "[CREATE_AGENT] was not applied: 'colour' is not one of its keys (path, persona, provider, "
        "model, role, engagement_ttl, session, busy_policy, budget_per_day); new agent path "
        "'../x' contains '..'; folders "
        "cannot leave the folder tree; role 'god' is not one of agent, conductor, admin.",
    ),
]


@pytest.mark.parametrize(("text", "problem"), CONDUCTOR_PROBLEMS)
def test_refused_conductor_tags(text: str, problem: str) -> None:
    result = conduct(f"Sure.\n{text}\nBye.")
    assert only_problem(result).startswith(problem)
    assert result.text == "Sure.\nBye."


def test_a_persona_continuing_a_refused_key_is_skipped_quietly() -> None:
    text = block("CREATE_CRON", "schedule: 0 9 * * *", "prompt: p", "persona: x", "  more")
    problem = only_problem(conduct(text))
    assert problem.startswith("[CREATE_CRON] was not applied: 'persona' is not one of its keys")
    assert "more" not in problem


def test_unclosed_conductor_block_stays() -> None:
    text = "Creating:\n[CREATE_AGENT]\npath: atlas/a\n\n[STATE:k] v"
    result = conduct(text)
    assert result.problems == (
        "[CREATE_AGENT] was not applied: it has no closing [/CREATE_AGENT], so it was left in the "
        "text.",
    )
    assert result.states == (S("k", "v"),)
    assert result.actions == ()
    assert result.text == "Creating:\n[CREATE_AGENT]\npath: atlas/a"


def test_admin_folders_are_not_conductors() -> None:
    text = block("CREATE_AGENT", "path: atlas/a")
    assert run(text, "admin").actions == ()


# --- order --------------------------------------------------------------------------------------


def test_results_and_problems_keep_the_order_written() -> None:
    text = "\n".join(
        [
            "[DELEGATE:atlas/b] second task [/DELEGATE]",
            "[MEMORY:sticky] first fact",
            block("CREATE_CRON", "schedule: 0 9 * * *", "prompt: p"),
            "[STATE:x] 1",
            "[MEMORY:Bad] refused one",
            block("CREATE_AGENT", "path: atlas/a"),
            "[DELEGATE:atlas/a] first task [/DELEGATE]",
            "[MEMORY:user_preference] second fact",
            "[DELEGATE:elsewhere] refused two [/DELEGATE]",
            "[STATE:y] 2",
        ]
    )
    result = conduct(text)
    assert result.memories == (M("sticky", "first fact"), M("user_preference", "second fact"))
    assert result.states == (S("x", "1"), S("y", "2"))
    assert [a.kind for a in result.actions] == ["create_cron", "create_agent"]
    assert [d.task for d in result.delegations] == ["second task", "first task"]
    assert [p.split(" ")[0] for p in result.problems] == ["[MEMORY:Bad]", "[DELEGATE:elsewhere]"]
    assert result.text == ""


# --- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "role"),
    [("atlas", "owner"), ("atlas", "Conductor"), ("", "agent"), ("../x", "agent"), ("A", "agent")],
)
def test_a_bad_folder_or_role_is_misuse(folder: str, role: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        process_tags("[MEMORY:a] x", folder=folder, role=role)


def test_a_nested_folder_confines_to_its_own_subtree() -> None:
    result = run(
        "[DELEGATE:atlas/team/a] x [/DELEGATE][DELEGATE:atlas/other] y [/DELEGATE]",
        folder="atlas/team",
    )
    assert result.delegations == (Delegation("atlas/team/a", "x"),)
    assert "'atlas/other' is outside" in only_problem(
        run("[DELEGATE:atlas/other] y [/DELEGATE]", folder="atlas/team")
    )


# --- properties ---------------------------------------------------------------------------------

_PIECES = [
    "[MEMORY:sticky]",
    "[MEMORY:Bad]",
    "[/MEMORY]",
    "[STATE:k]",
    "[/STATE]",
    "[DELEGATE:atlas/a]",
    "[DELEGATE:beta]",
    "[/DELEGATE]",
    "[CREATE_AGENT]",
    "[/CREATE_AGENT]",
    "[UPDATE_AGENT:atlas/a]",
    "[UPDATE_AGENT:atlas]",
    "[/UPDATE_AGENT]",
    "[CREATE_CRON]",
    "[/CREATE_CRON]",
    "[CREATE_HEARTBEAT]",
    "[/CREATE_HEARTBEAT]",
    "path: atlas/a",
    "path: ../x",
    "persona: p",
    "role: admin",
    "schedule: 0 9 * * *",
    "schedule: ",
    "every: 5m",
    "prompt: hi",
    "tz: Europe/Berlin",
    "chat_jid: x:y",
    "folder: atlas",
    "engagement_ttl: 2h",
    "\n",
    "\n\n",
    "  ",
    " ",
    "`",
    "``",
    "```",
    "~~~",
    "\n```\n",
    "\r\n",
    "word",
    ".",
    "[",
    "]",
    ":",
]
tag_soup = st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=40).map("".join)
roles = st.sampled_from(["agent", "conductor", "admin"])


@settings(max_examples=300, deadline=None)
@given(tag_soup, roles)
def test_never_raises_and_is_idempotent(text: str, role: str) -> None:
    first = run(text, role)
    again = run(first.text, role)
    assert (again.memories, again.states, again.actions, again.delegations) == ((), (), (), ())
    assert again.text == first.text


@settings(max_examples=200, deadline=None)
@given(st.text(), roles)
def test_arbitrary_text_never_raises(text: str, role: str) -> None:
    result = run(text, role)
    assert isinstance(result, TagResult)
    assert run(result.text, role).text == result.text


@settings(max_examples=200, deadline=None)
@given(st.text().filter(lambda t: "[" not in t), roles)
def test_text_without_a_bracket_is_returned_unchanged(text: str, role: str) -> None:
    assert run(text, role) == TagResult(text)


@settings(max_examples=200, deadline=None)
@given(tag_soup)
def test_everything_applied_stays_inside_the_tree(text: str) -> None:
    result = conduct(text)
    for delegation in result.delegations:
        assert delegation.folder.startswith(HOME + "/")
    for action in result.actions:
        target = action.fields.get("path") or action.fields.get("folder")
        assert target is not None
        assert target == HOME or target.startswith(HOME + "/")
        if action.kind in ("create_agent", "update_agent"):
            assert target != HOME


@settings(max_examples=100, deadline=None)
@given(
    st.text(st.characters(exclude_characters="\n[]"), max_size=30),
    st.sampled_from(["schedule", "every", "tz", "chat_jid", "engagement_ttl", "path", "folder"]),
)
def test_any_value_of_any_key_is_refused_or_accepted_without_raising(value: str, key: str) -> None:
    for name in ("CREATE_CRON", "CREATE_HEARTBEAT", "CREATE_AGENT"):
        result = conduct(block(name, f"{key}: {value}"))
        assert len(result.actions) + len(result.problems) == 1


# -- an answer still being written ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "role", "shown"),
    [
        pytest.param("Hello, wor", "agent", "Hello, wor", id="plain-text-as-is"),
        pytest.param("Noted [MEM", "agent", "Noted ", id="tag-being-written"),
        pytest.param("Noted [STATE:mo", "agent", "Noted ", id="argument-being-written"),
        pytest.param("Noted [", "agent", "Noted ", id="bracket-alone"),
        pytest.param("see [1", "agent", "see [1", id="footnote-is-text"),
        pytest.param("Hi\n[MEMORY:user_preference] tea\nBye", "agent", "Hi\nBye", id="line-tag"),
        pytest.param("Hi [STATE:mood] calm", "agent", "Hi", id="line-tag-to-end-of-line"),
        pytest.param("Asking. [DELEGATE:main/x] the secret", "agent", "Asking. ", id="open-block"),
        pytest.param(
            "Asking. [DELEGATE:main/x] task [/DELEGATE] Done.",
            "agent",
            "Asking. Done.",
            id="closed-block",
        ),
        pytest.param(
            "[CREATE_AGENT]\npath: main/x\n[/CREATE_AG", "conductor", "", id="closing-being-written"
        ),
        pytest.param(
            "Plan: [CREATE_AGENT] is text here", "agent", "Plan: [CREATE_AGENT] is text here",
            id="conductor-tag-of-an-agent",
        ),
        pytest.param(
            "`[DELEGATE:main/x]` is how", "agent", "`[DELEGATE:main/x]` is how", id="code"
        ),
    ],
)  # fmt: skip
def test_partial_text_hides_tags_and_what_is_not_finished(text: str, role: str, shown: str) -> None:
    assert partial_text(text, folder="main", role=role) == shown


_STREAM_PIECES = [
    *("Hi ", "[MEMORY:fact] ", "secret", "\n", "[/MEMORY]", "[DEL", "EGATE:main/x]"),
    *(" task ", "[/DELEGATE]", "`", "ok. "),
]


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from(_STREAM_PIECES), max_size=20))
@example(pieces=["`", "\n", "`", "[MEMORY:fact] ", "`"])
@example(pieces=["`", "`", "`", "[MEMORY:fact] "])
@example(pieces=["`", "`", "[MEMORY:fact] ", "`", "`"])
@example(pieces=["[DEL", "`", "Hi ", "`", "EGATE:main/x]"])
@example(pieces=["[DEL", "[MEMORY:fact] ", "[/MEMORY]", "EGATE:main/x]"])
def test_no_prefix_of_an_answer_shows_a_tag(pieces: list[str]) -> None:
    """The stream never shows a tag outside code that the finished answer does not show
    (a tag left in the text because it was not applied is shown at the end too)."""
    text = "".join(pieces)
    final = _outside_code(process_tags(text, folder="main", role="agent").text)
    for end in range(len(text) + 1):
        shown = _outside_code(partial_text(text[:end], folder="main", role="agent"))
        for tag in ("[MEMORY", "[DELEGATE"):
            assert tag not in shown or tag in final, (text[:end], shown)


def _outside_code(text: str) -> str:
    """*text* with fenced blocks and inline code spans (which stay on their line: a stray
    backtick hides nothing beyond it) replaced by a character that joins no tag."""
    for block in reversed(fenced_blocks(text)):
        text = text[: block.start] + "\0" + text[block.end :]
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "\0", text)
