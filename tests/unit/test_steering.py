"""Classifying what a user typed (ROUTING §3 step 4, §3.1) and topic normalization."""

from __future__ import annotations

import pytest

from postroom.core import SteeringKind, Trigger, normalize_topic, parse_steering

TRIGGER = Trigger(bot_usernames=("postroom_bot",))


@pytest.mark.parametrize(
    ("content", "kind", "arg", "rest"),
    [
        pytest.param("", SteeringKind.NONE, "", "", id="empty"),
        pytest.param("   ", SteeringKind.NONE, "", "", id="blank"),
        pytest.param("hello", SteeringKind.NONE, "", "", id="plain"),
        pytest.param("hello @atlas", SteeringKind.NONE, "", "", id="at-not-at-start"),
        # Whole-message commands: the trimmed text is one token.
        pytest.param("@", SteeringKind.STICKY_CLEAR, "", "", id="at"),
        pytest.param("  @  ", SteeringKind.STICKY_CLEAR, "", "", id="at-trimmed"),
        pytest.param("@atlas/social", SteeringKind.STICKY_SET, "atlas/social", "", id="at-path"),
        pytest.param("@social", SteeringKind.STICKY_SET, "social", "", id="at-name"),
        pytest.param("\n@social\t", SteeringKind.STICKY_SET, "social", "", id="at-name-trimmed"),
        pytest.param("@a..b", SteeringKind.NONE, "", "", id="at-bad-path"),
        pytest.param("@a//b", SteeringKind.NONE, "", "", id="at-empty-segment"),
        pytest.param("#", SteeringKind.TOPIC_CLEAR, "", "", id="hash"),
        pytest.param("#support", SteeringKind.TOPIC_SET, "support", "", id="hash-topic"),
        pytest.param("#Support", SteeringKind.TOPIC_SET, "support", "", id="hash-topic-lowered"),
        pytest.param("#sup.port", SteeringKind.NONE, "", "", id="hash-bad-topic"),
        pytest.param("/new", SteeringKind.SLASH, "new", "", id="new"),
        pytest.param("/stop", SteeringKind.SLASH, "stop", "", id="stop"),
        pytest.param("/status", SteeringKind.SLASH, "status", "", id="status"),
        pytest.param("/chatid", SteeringKind.SLASH, "chatid", "", id="chatid"),
        pytest.param("/new@postroom_bot", SteeringKind.SLASH, "new", "", id="new-addressed"),
        pytest.param("/new@otherbot", SteeringKind.NONE, "", "", id="new-other-bot"),
        pytest.param("/help", SteeringKind.NONE, "", "", id="unknown-slash"),
        pytest.param("/new please", SteeringKind.NONE, "", "", id="slash-with-text"),
        # A backslash is a slash (Slack and some clients swallow a leading "/").
        pytest.param("\\new", SteeringKind.SLASH, "new", "", id="backslash-new"),
        pytest.param(" \\Stop ", SteeringKind.SLASH, "stop", "", id="backslash-stop-trimmed"),
        pytest.param("\\status", SteeringKind.SLASH, "status", "", id="backslash-status"),
        pytest.param("\\chatid", SteeringKind.SLASH, "chatid", "", id="backslash-chatid"),
        pytest.param(
            "\\new@postroom_bot", SteeringKind.SLASH, "new", "", id="backslash-new-addressed"
        ),
        pytest.param("\\new@otherbot", SteeringKind.NONE, "", "", id="backslash-other-bot"),
        pytest.param("\\help", SteeringKind.NONE, "", "", id="backslash-unknown"),
        pytest.param("\\", SteeringKind.NONE, "", "", id="backslash-alone"),
        pytest.param("\\\\new", SteeringKind.NONE, "", "", id="two-backslashes"),
        pytest.param("\\new please", SteeringKind.NONE, "", "", id="backslash-with-text"),
        # After the trigger: the trigger and exactly one command are that command.
        pytest.param("@Postroom /new", SteeringKind.SLASH, "new", "", id="trigger-new"),
        pytest.param("@postroom \\stop", SteeringKind.SLASH, "stop", "", id="trigger-backslash"),
        pytest.param("@Postroom, /status", SteeringKind.SLASH, "status", "", id="trigger-comma"),
        pytest.param("@Postroom: /chatid", SteeringKind.SLASH, "chatid", "", id="trigger-colon"),
        pytest.param(
            "  @Postroom\n/new@postroom_bot ", SteeringKind.SLASH, "new", "", id="trigger-newline"
        ),
        pytest.param(
            "@ghost @atlas/social",
            SteeringKind.STICKY_SET,
            "atlas/social",
            "",
            id="alias-sticky",
        ),
        pytest.param("@Postroom @", SteeringKind.STICKY_CLEAR, "", "", id="trigger-at"),
        pytest.param(
            "@Postroom #support", SteeringKind.TOPIC_SET, "support", "", id="trigger-hash"
        ),
        pytest.param("@GHOST #", SteeringKind.TOPIC_CLEAR, "", "", id="alias-hash-clear"),
        pytest.param(
            "@Postroom /new please",
            SteeringKind.INLINE_FOLDER,
            "postroom",
            "/new please",
            id="trigger-command-with-text",
        ),
        pytest.param(
            "@Postroom /help", SteeringKind.INLINE_FOLDER, "postroom", "/help", id="trigger-unknown"
        ),
        pytest.param(
            "@Postroom /new@otherbot",
            SteeringKind.INLINE_FOLDER,
            "postroom",
            "/new@otherbot",
            id="trigger-command-for-another-bot",
        ),
        pytest.param(
            "@Postroomx /new", SteeringKind.INLINE_FOLDER, "postroomx", "/new", id="not-trigger"
        ),
        pytest.param("Hey @Postroom /new", SteeringKind.NONE, "", "", id="trigger-not-at-start"),
        # Inline prefixes.
        pytest.param(
            "@content draft post",
            SteeringKind.INLINE_FOLDER,
            "content",
            "draft post",
            id="inline-folder",
        ),
        pytest.param(
            "  @Content  draft", SteeringKind.INLINE_FOLDER, "content", "draft", id="inline-lower"
        ),
        pytest.param(
            "@content\nline two", SteeringKind.INLINE_FOLDER, "content", "line two", id="newline"
        ),
        pytest.param("@a/b draft", SteeringKind.NONE, "", "", id="inline-name-no-slash"),
        pytest.param(
            "#billing refund please",
            SteeringKind.INLINE_TOPIC,
            "billing",
            "refund please",
            id="inline-topic",
        ),
        pytest.param("#bil.ling refund", SteeringKind.NONE, "", "", id="inline-bad-topic"),
    ],
)
def test_parse_steering(content: str, kind: SteeringKind, arg: str, rest: str) -> None:
    steering = parse_steering(content, TRIGGER)
    assert steering.kind is kind
    assert steering.arg == arg
    assert steering.rest == rest


@pytest.mark.parametrize(
    ("content", "calls_us"),
    [
        pytest.param("@Postroom /new", True, id="trigger-command"),
        pytest.param("@ghost @atlas/social", True, id="alias-command"),
        pytest.param("/new", False, id="bare-command"),
        pytest.param("\\new", False, id="bare-backslash"),
        pytest.param("\\new@postroom_bot", True, id="backslash-addressed"),
        pytest.param("@Postroom /new please", True, id="trigger-text"),
    ],
)
def test_a_command_after_the_trigger_calls_us(content: str, calls_us: bool) -> None:
    assert parse_steering(content, TRIGGER).calls_us is calls_us


def test_command_kinds() -> None:
    assert parse_steering("@", TRIGGER).is_command
    assert parse_steering("#x", TRIGGER).is_command
    assert parse_steering("/new", TRIGGER).is_command
    assert not parse_steering("@x y", TRIGGER).is_command
    assert not parse_steering("#x y", TRIGGER).is_command
    assert not parse_steering("x", TRIGGER).is_command


@pytest.mark.parametrize(
    ("native", "topic"),
    [
        pytest.param("", "", id="empty"),
        pytest.param("1712345678.123456", "1712345678-123456", id="slack-thread-ts"),
        pytest.param("Forum", "forum", id="lowercased"),
        pytest.param("a b  c", "a-b-c", id="runs-become-one-dash"),
        pytest.param("topic_1-x", "topic_1-x", id="alphabet-kept"),
        pytest.param("42", "42", id="telegram-forum-topic"),
    ],
)
def test_normalize_native_topic(native: str, topic: str) -> None:
    assert normalize_topic(native) == topic
