"""How stored messages read on platform chats (MESSAGES §2, §5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from postroom.core.display import (
    PREFIXES,
    TOOL_FAILED,
    TOOL_OK,
    display_text,
    prefix_for,
    shown_to_chat,
)
from postroom.core.durations import spoken_duration
from postroom.core.messages import MessageType


@pytest.mark.parametrize(
    ("message_type", "kwargs", "expected"),
    [
        pytest.param("user", {}, "hello", id="user"),
        pytest.param("user", {"sender_name": "Ana"}, "[Ana] hello", id="user-mirrored"),
        pytest.param("user", {"assistant_name": "Bot"}, "hello", id="user-ignores-bot-name"),
        pytest.param("assistant", {}, "hello", id="assistant-bot-account"),
        pytest.param(
            "assistant", {"assistant_name": "Postroom"}, "Postroom: hello", id="assistant-named"
        ),
        pytest.param("assistant", {"assistant_name": ""}, "hello", id="assistant-empty-name"),
        pytest.param("assistant", {"sender_name": "Ana"}, "hello", id="assistant-no-sender"),
        pytest.param("system", {}, "⚙️ hello", id="system"),
        pytest.param("host", {}, "🏠 hello", id="host"),
        pytest.param("tool_result", {}, "🔧 ✅ hello", id="tool-no-metadata"),
        pytest.param("tool_result", {"metadata": {}}, "🔧 ✅ hello", id="tool-no-exit-code"),
        pytest.param(
            "tool_result", {"metadata": {"exit_code": None}}, "🔧 ✅ hello", id="tool-null-code"
        ),
        pytest.param("tool_result", {"metadata": {"exit_code": 0}}, "🔧 ✅ hello", id="tool-ok"),
        pytest.param(
            "tool_result", {"metadata": {"exit_code": 1}}, "🔧 ❌ hello", id="tool-failed"
        ),
        pytest.param(
            "tool_result", {"metadata": {"exit_code": -9}}, "🔧 ❌ hello", id="tool-killed"
        ),
        pytest.param(
            "tool_result", {"metadata": {"exit_code": 127, "x": 1}}, "🔧 ❌ hello", id="tool-127"
        ),
    ],
)
def test_display_text(message_type: str, kwargs: dict[str, Any], expected: str) -> None:
    assert display_text(message_type, "hello", **kwargs) == expected


@pytest.mark.parametrize("message_type", [t for t in MessageType if t is not MessageType.TRACE])
def test_enum_members_work_like_their_values(message_type: MessageType) -> None:
    assert display_text(message_type, "x") == display_text(message_type.value, "x")


def test_traces_are_never_shown_on_platform_chats() -> None:
    with pytest.raises(ValueError, match="traces"):
        display_text("trace", "thinking...")


@pytest.mark.parametrize("message_type", ["", "bogus", "USER", "tool-result"])
def test_unknown_type_is_refused(message_type: str) -> None:
    with pytest.raises(ValueError, match="unknown message type"):
        display_text(message_type, "x")
    with pytest.raises(ValueError, match="unknown message type"):
        prefix_for(message_type)


def test_prefixes_cover_every_type_and_are_read_only() -> None:
    assert set(PREFIXES) == set(MessageType)
    assert PREFIXES["system"] == "⚙️ "
    assert PREFIXES["host"] == "🏠 "
    assert PREFIXES["tool_result"] == "🔧 "
    assert PREFIXES["user"] == PREFIXES["assistant"] == PREFIXES["trace"] == ""
    with pytest.raises(TypeError):
        PREFIXES["user"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    ("message_type", "metadata", "expected"),
    [
        ("trace", None, ""),
        ("system", None, "⚙️ "),
        ("tool_result", None, "🔧 " + TOOL_OK),
        ("tool_result", {"exit_code": 2}, "🔧 " + TOOL_FAILED),
    ],
)
def test_prefix_for(message_type: str, metadata: Mapping[str, Any] | None, expected: str) -> None:
    # The web chat and the TUI show traces too, so prefix_for accepts every type.
    assert prefix_for(message_type, metadata) == expected


def test_content_is_kept_verbatim() -> None:
    content = "  **markdown** stays\nas it is  "
    assert display_text("host", content) == "🏠 " + content
    assert display_text("user", "", sender_name="Ana") == "[Ana] "


@pytest.mark.parametrize(
    ("message_type", "metadata", "shown"),
    [
        pytest.param("user", {}, True, id="user"),
        pytest.param("user", {"command": True}, True, id="command"),
        pytest.param("assistant", {"usage": {}, "cost": 0.1}, True, id="assistant"),
        pytest.param("tool_result", {"exit_code": 1}, True, id="tool-result"),
        pytest.param("host", {"source": "command"}, True, id="ack"),
        pytest.param("host", {"source": "turn_failed"}, True, id="could-not-answer"),
        pytest.param("host", {"source": "turn_retry"}, True, id="trying-again"),
        pytest.param("host", {"source": "tags"}, False, id="tag-problem-naming-folders"),
        pytest.param("host", {"source": "conductor"}, False, id="conductor-outcome"),
        pytest.param("host", {"source": "folder_missing"}, False, id="routing-problem"),
        pytest.param("host", {"source": "setup"}, False, id="setup-hint"),
        pytest.param("host", {}, False, id="notice-of-no-known-source"),
        pytest.param("system", {"source": "delegate"}, False, id="system"),
        pytest.param("trace", {}, False, id="trace"),
    ],
)
def test_what_the_people_of_a_chat_see(
    message_type: str, metadata: Mapping[str, Any], shown: bool
) -> None:
    assert shown_to_chat(message_type, metadata) is shown


@pytest.mark.parametrize(
    ("seconds", "spoken"),
    [
        (0.2, "1 second"),
        (1, "1 second"),
        (45, "45 seconds"),
        (60, "1 minute"),
        (120, "2 minutes"),
        (240, "4 minutes"),
        (3600, "1 hour"),
        (5400, "2 hours"),
        (86400, "1 day"),
    ],
)
def test_a_wait_as_a_sentence_says_it(seconds: float, spoken: str) -> None:
    assert spoken_duration(seconds) == spoken
