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
