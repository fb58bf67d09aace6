"""The trigger (ROUTING §5) and the verb seen by routing (ROUTING §1)."""

from __future__ import annotations

import pytest

from postroom.core import Trigger, Verb, effective_verb

DEFAULT = Trigger()


@pytest.mark.parametrize(
    "text",
    [
        "@Postroom",
        "@Postroom hi",
        "@postroom hi",
        "@POSTROOM hi",
        "@Postroom, hi",
        "@Postroom: summarize",
        "@Postroom! go",
        "@Postroom?",
        "@Postroom.",
        "@Postroom\nnext line",
        "@ghost hi",
        "@GHOST",
        "@ghost;",
    ],
)
def test_starts_with_trigger(text: str) -> None:
    assert DEFAULT.starts_with_trigger(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hey @Postroom",
        "hi @ghost",
        "@Postroomx",
        "@Postroom2 hi",
        "@ghostly",
        "Postroom hi",
        "@ Postroom",
        "@Post room",
    ],
)
def test_not_a_trigger(text: str) -> None:
    assert not DEFAULT.starts_with_trigger(text)


def test_configured_name_and_aliases() -> None:
    trigger = Trigger(assistant_name="Atlas", aliases=("bob", "helper"))
    assert trigger.starts_with_trigger("@atlas do it")
    assert trigger.starts_with_trigger("@Bob, hi")
    assert trigger.starts_with_trigger("@HELPER")
    assert not trigger.starts_with_trigger("@Postroom hi")
    assert not trigger.starts_with_trigger("@ghost hi")


def test_name_with_regex_characters_is_literal() -> None:
    trigger = Trigger(assistant_name="a.b", aliases=())
    assert trigger.starts_with_trigger("@a.b hi")
    assert not trigger.starts_with_trigger("@axb hi")


def test_no_aliases() -> None:
    trigger = Trigger(aliases=())
    assert trigger.starts_with_trigger("@Postroom")
    assert not trigger.starts_with_trigger("@ghost")


def test_addresses_us() -> None:
    trigger = Trigger(bot_usernames=("postroom_bot",))
    assert trigger.addresses_us("postroom_bot")
    assert not trigger.addresses_us("otherbot")


@pytest.mark.parametrize(
    ("verb", "kwargs", "text", "expected"),
    [
        pytest.param("message", {}, "hi", "message", id="plain"),
        pytest.param("message", {}, "@Postroom hi", "mention", id="trigger"),
        pytest.param("reply", {}, "@ghost hi", "mention", id="reply-trigger"),
        pytest.param("reply", {}, "thanks", "reply", id="reply-plain"),
        pytest.param("message", {"mentioned": True}, "hi", "mention", id="platform-mentioned"),
        pytest.param(
            "message", {"replies_to_gateway": True}, "ok", "mention", id="reply-to-gateway"
        ),
        pytest.param(
            "message", {"addressed_command": True}, "/new@bot", "mention", id="addressed-command"
        ),
        pytest.param("", {}, "hi", "message", id="empty-verb-is-message"),
        pytest.param("mention", {}, "hi", "mention", id="already-mention"),
    ],
)
def test_effective_verb(verb: str, kwargs: dict[str, bool], text: str, expected: str) -> None:
    assert effective_verb(verb, text, trigger=DEFAULT, **kwargs) == expected


OTHER_VERBS = [v.value for v in Verb if v not in (Verb.MESSAGE, Verb.REPLY, Verb.MENTION)]


@pytest.mark.parametrize("verb", OTHER_VERBS)
def test_other_verbs_never_become_mention(verb: str) -> None:
    result = effective_verb(
        verb,
        "@Postroom hi",
        trigger=DEFAULT,
        mentioned=True,
        replies_to_gateway=True,
        addressed_command=True,
    )
    assert result == verb
