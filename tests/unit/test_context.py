"""What a model sees (MESSAGES §4): filtering, observed blocks, the order of answers, notices."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from postroom.core.context import (
    ContextMessage,
    arrange_history,
    chat_kind,
    format_messages_for_sdk,
    render_system_prompt,
    system_notices,
)
from postroom.core.messages import MessageType, StoredMessage
from postroom.llm.base import ModelRequest
from postroom.llm.echo import EchoProvider

T = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
_seq = iter(range(1, 10_000))


def row(
    content: str,
    kind: MessageType = MessageType.USER,
    *,
    sender: str = "telegram:user/1",
    name: str = "Ann",
    observed: bool = False,
    id: str | None = None,
    **metadata: Any,
) -> StoredMessage:
    seq = next(_seq)
    return StoredMessage(
        id=id or f"m{seq}",
        chat_jid="telegram:group/5",
        seq=seq,
        sender=sender,
        sender_name=name,
        content=content,
        timestamp=T,
        is_from_me=kind is not MessageType.USER,
        message_type=kind,
        metadata=metadata,
        observed=observed,
    )


def test_host_trace_and_commands_never_enter_a_context() -> None:
    rows = [
        row("hi"),
        row("routing reset", MessageType.HOST, sender="host"),
        row("thinking…", MessageType.TRACE, sender="thinking"),
        row("@atlas/social", command=True),
        row("hello!", MessageType.ASSISTANT, sender="bot"),
    ]
    assert format_messages_for_sdk(rows) == [
        ContextMessage("user", "hi"),
        ContextMessage("assistant", "hello!"),
    ]


def test_routed_content_system_and_tool_results() -> None:
    rows = [
        row("@content draft post", routed_content="draft post"),
        row("deploy finished", MessageType.SYSTEM, sender="deploy"),
        row("exit 2: boom", MessageType.TOOL_RESULT, sender="command_output", exit_code=2),
    ]
    assert format_messages_for_sdk(rows) == [
        ContextMessage("user", "draft post"),
        ContextMessage("system", "deploy finished"),
        ContextMessage("tool_result", "exit 2: boom", exit_code=2),
    ]


def test_consecutive_observed_rows_are_one_block_and_senders_are_named() -> None:
    rows = [
        row("lunch?", sender="discord:user/1", name="Bob", observed=True),
        row("pizza", sender="discord:user/2", name="Cid", observed=True),
        row("@Postroom summarize", sender="discord:user/3", name="Alice"),
    ]
    assert format_messages_for_sdk(rows) == [
        ContextMessage("user", "[Bob] lunch?\n[Cid] pizza"),
        ContextMessage("user", "[Alice] @Postroom summarize"),
    ]
    # One human: no names.
    assert format_messages_for_sdk([row("hi")]) == [ContextMessage("user", "hi")]


def test_the_asker_is_named_beside_observed_lines_even_when_they_are_the_same_person() -> None:
    rows = [
        row("we decided pizza", sender="discord:user/1", name="Alice", observed=True),
        row("@Postroom what did we decide?", sender="discord:user/1", name="Alice"),
    ]
    assert format_messages_for_sdk(rows) == [
        ContextMessage("user", "[Alice] we decided pizza"),
        ContextMessage("user", "[Alice] @Postroom what did we decide?"),
    ]


def test_a_chat_known_to_have_several_people_names_a_lone_asker() -> None:
    rows = [row("start over", sender="discord:user/2", name="Bob")]
    assert format_messages_for_sdk(rows, multi_party=True) == [
        ContextMessage("user", "[Bob] start over")
    ]


def test_a_follow_up_turn_sees_the_earlier_answer_before_its_own_messages() -> None:
    m1, m2, m3 = row("m1", id="a"), row("m2", id="b"), row("m3", id="c")
    answer1 = row("re m1", MessageType.ASSISTANT, sender="bot", job_id=1)  # stored after m2, m3
    answered_by = {("a", m1.chat_jid): 1, ("b", m2.chat_jid): 2, ("c", m3.chat_jid): 2}
    arranged = arrange_history([m1, m2, m3, answer1], turn=2, answered_by=answered_by, pending={2})
    assert [m.content for m in arranged] == ["m1", "re m1", "m2", "m3"]


def test_messages_another_pending_turn_answers_are_left_out() -> None:
    m1, m2 = row("m1", id="a"), row("m2", id="b")
    answered_by = {("a", m1.chat_jid): 1, ("b", m2.chat_jid): 2}
    arranged = arrange_history([m1, m2], turn=1, answered_by=answered_by, pending={1, 2})
    assert [m.content for m in arranged] == ["m1"]
    # Once that turn is done (no longer pending), its messages are history like any other.
    arranged = arrange_history([m1, m2], turn=3, answered_by=answered_by, pending=set())
    assert [m.content for m in arranged] == ["m1", "m2"]


def test_messages_of_a_stopped_turn_are_left_out_of_every_later_turn() -> None:
    m1, m2 = row("stopped question", id="a"), row("next question", id="b")
    answered_by = {("a", m1.chat_jid): 1, ("b", m2.chat_jid): 2}
    for turn in (2, 3):
        arranged = arrange_history(
            [m1, m2], turn=turn, answered_by=answered_by, pending=set(), stopped={1}
        )
        assert [m.content for m in arranged] == ["next question"]
    # A stopped turn that runs again (retried by the operator) still sees its own rows.
    arranged = arrange_history([m1], turn=1, answered_by=answered_by, pending={1}, stopped={1})
    assert [m.content for m in arranged] == ["stopped question"]


def test_answers_of_turns_without_rows_keep_their_place() -> None:
    prompt = row("daily summary please", MessageType.SYSTEM, sender="system")
    answer = row("summary", MessageType.ASSISTANT, sender="bot", job_id=9)
    assert arrange_history([prompt, answer], turn=10, answered_by={}, pending=set()) == [
        prompt,
        answer,
    ]


@pytest.mark.parametrize(
    ("jid", "kind"),
    [
        ("telegram:user/1", "direct"),
        ("telegram:group/5", "group"),
        ("discord:guild/1/channel/2", "group"),
        ("discord:dm/9", "direct"),
        ("slack:T1/dm/D1", "direct"),
        ("slack:T1/channel/C1", "group"),
        ("matrix:room/!x:y", "group"),
        ("web:main/anon-1", "direct"),
        ("tui:atlas", "operator"),
        ("task:4", "task"),
        ("hook:acme/eng/github", "group"),
    ],
)
def test_chat_kind(jid: str, kind: str) -> None:
    assert chat_kind(jid) == kind


def test_system_prompt_puts_the_notices_last() -> None:
    notices = system_notices(now=T, chat_jid="telegram:group/5", folder="atlas", topic="billing")
    assert notices[0].startswith("Current time: 2026-03-04 05:06 UTC")
    assert "telegram:group/5 (group)" in notices[1]
    assert "atlas" in notices[2] and "billing" in notices[3]
    prompt = render_system_prompt("You are Atlas.", memory=["likes tea"], notices=notices)
    assert prompt.startswith("You are Atlas.")
    assert prompt.index("likes tea") < prompt.index("Current time")
    assert prompt.endswith("Topic: billing.")


def test_echo_answers_the_new_input_only() -> None:
    request = ModelRequest(
        system="SECRET SYSTEM PROMPT",
        messages=[
            ContextMessage("user", "old"),
            ContextMessage("assistant", "old answer"),
            ContextMessage("user", "[Bob] lunch?"),
            ContextMessage("system", "note"),
            ContextMessage("tool_result", "ok", exit_code=0),
            ContextMessage("user", "new"),
        ],
    )
    answer = asyncio.run(EchoProvider().complete(request))
    assert answer.text == "[Bob] lunch?\n[system] note\n[command output, exit 0] ok\nnew"
    assert "SECRET" not in answer.text
