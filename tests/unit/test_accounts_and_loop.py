"""Account rotation (PIPELINE §4) and the shared tool loop, with in-repo fake providers."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from postroom.core.context import ContextMessage, ToolCall
from postroom.core.folders import FolderDefaults, effective_settings
from postroom.engine.runner import ProviderRunner, ToolOutcome
from postroom.llm.accounts import AccountPool
from postroom.llm.base import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    RateLimited,
    TextSink,
    ToolSpec,
)
from postroom.llm.models import ModelInfo, ModelTable

from fake_sink import WrittenText


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Scripted:
    """A provider that plays back answers (or raises) and records every request. It streams:
    an answer's text goes to the sink word by word, and a ``(text, exception)`` step writes
    the text and then fails (a stream cut short)."""

    name = "scripted"

    def __init__(self, *script: ModelResponse | Exception | tuple[str, Exception]) -> None:
        self.script = list(script)
        self.requests: list[ModelRequest] = []

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        step = self.script.pop(0)
        if isinstance(step, tuple):
            if sink is not None:
                sink.write(step[0])
            raise step[1]
        if isinstance(step, Exception):
            raise step
        if sink is not None:
            for word in re.findall(r"\S+\s*", step.text):
                sink.write(word)
        return step

    async def check(self) -> str:
        return "fine"


def answer(text: str, *calls: ToolCall, model: str = "claude-sonnet-4-5") -> ModelResponse:
    return ModelResponse(
        text=text,
        raw=text,
        model=model,
        usage={"input_tokens": 100, "output_tokens": 10},
        tool_calls=tuple(calls),
    )


REQUEST = ModelRequest(system="persona", messages=[ContextMessage("user", "hi")])


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_limited_account_rests_and_the_next_one_answers_at_once() -> None:
    clock = Clock()
    first = Scripted(RateLimited("slow down", retry_after=12), answer("from first"))
    second = Scripted(answer("from second"), answer("again second"))
    pool = AccountPool("anthropic", [("a#1", first), ("a#2", second)], clock=clock)
    assert run(pool.complete(REQUEST)).text == "from second"
    status = {s.label: s for s in pool.status()}
    assert status["a#1"].limited_until == clock.now + timedelta(seconds=12)
    assert status["a#2"].limited_until is None
    # While a#1 rests, a#2 serves; after 12 s a#1 is tried first again (order of the list).
    assert run(pool.complete(REQUEST)).text == "again second"
    clock.now += timedelta(seconds=13)
    assert run(pool.complete(REQUEST)).text == "from first"


def test_a_stream_cut_by_a_rate_limit_starts_over_on_the_next_account() -> None:
    first = Scripted(("Hel", RateLimited("overloaded mid-stream", retry_after=5)))
    second = Scripted(answer("Hello there"))
    pool = AccountPool("anthropic", [("a#1", first), ("a#2", second)], clock=Clock())
    written = WrittenText()
    assert run(pool.complete(REQUEST, sink=written)).text == "Hello there"
    assert written.pieces == ["Hel", None, "Hello ", "there"]


def test_without_retry_after_the_rest_grows_1_5_25_60_minutes() -> None:
    clock = Clock()
    only = Scripted(*[RateLimited("busy") for _ in range(5)])
    pool = AccountPool("openai", [("o#1", only)], clock=clock)
    rests = []
    for _ in range(5):
        with pytest.raises(RateLimited) as caught:
            run(pool.complete(REQUEST))
        (status,) = pool.status()
        assert status.limited_until is not None
        rests.append((status.limited_until - clock.now).total_seconds())
        assert caught.value.retry_after == rests[-1]
        clock.now = status.limited_until + timedelta(seconds=1)
    assert rests == [60, 300, 1500, 3600, 3600]


def test_all_accounts_limited_fails_with_a_rate_limit_for_the_job_backoff() -> None:
    clock = Clock()
    pool = AccountPool(
        "gemini",
        [("g#1", Scripted(RateLimited("x", retry_after=30))), ("g#2", Scripted(RateLimited("y")))],
        clock=clock,
    )
    with pytest.raises(RateLimited) as caught:
        run(pool.complete(REQUEST))
    assert "every gemini account is rate-limited" in str(caught.value)
    assert caught.value.retry_after == 30
    # Other failures are not the pool's business: they go up at once.
    failing = AccountPool("x", [("x#1", Scripted(ProviderError("boom")))], clock=clock)
    with pytest.raises(ProviderError, match="boom"):
        run(failing.complete(REQUEST))


@pytest.mark.parametrize("asked", [1e15, 99999999999.0, math.inf, math.nan, 7200.0])
def test_no_rest_is_longer_than_max_rest(asked: float) -> None:
    """A retry-after of years (or one that could not be read: inf) rests for max_rest; 1e15
    seconds used to overflow the date arithmetic."""
    clock = Clock()
    pool = AccountPool(
        "anthropic",
        [("a#1", Scripted(RateLimited("slow down", retry_after=asked)))],
        clock=clock,
        max_rest_s=3600,
    )
    with pytest.raises(RateLimited) as caught:
        run(pool.complete(REQUEST))
    (status,) = pool.status()
    assert status.limited_until == clock.now + timedelta(hours=1)
    assert caught.value.retry_after == 3600


class Tools:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    def specs(self) -> Sequence[ToolSpec]:
        return [ToolSpec("lookup", "look something up", {"type": "object", "properties": {}})]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        self.calls.append((name, arguments))
        if arguments.get("fail"):
            raise RuntimeError("lookup broke")
        return ToolOutcome(f"result for {arguments.get('q')}")


SETTINGS = effective_settings("main", {}, FolderDefaults(provider="scripted"))


def test_tool_loop_round_trip_records_traces_and_sums_usage() -> None:
    provider = Scripted(
        answer("", ToolCall("c1", "lookup", {"q": "weather"})),
        answer("It is sunny."),
    )
    runner = ProviderRunner({"scripted": provider})
    tools = Tools()
    result = run(runner.run(REQUEST, settings=SETTINGS, toolbox=tools))
    assert result.response.text == "It is sunny."
    assert result.calls == 2
    assert tools.calls == [("lookup", {"q": "weather"})]
    second = provider.requests[1]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[1].tool_calls == (ToolCall("c1", "lookup", {"q": "weather"}),)
    assert (second.messages[2].tool_call_id, second.messages[2].content) == (
        "c1",
        "result for weather",
    )
    assert [t.sender for t in result.traces] == ["tool_use", "tool_result", "result_meta"]
    assert result.usage == {"input_tokens": 200, "output_tokens": 20}
    # claude-sonnet-4 at $3 / $15 per million tokens, two calls of 100 in / 10 out.
    assert result.cost == pytest.approx(2 * (100 * 3 + 10 * 15) / 1e6)


def test_text_written_before_a_tool_call_is_not_the_answer() -> None:
    provider = Scripted(
        answer("Let me look.", ToolCall("c1", "lookup", {"q": "weather"})),
        answer("It is sunny."),
    )
    written = WrittenText()
    runner = ProviderRunner({"scripted": provider})
    result = run(runner.run(REQUEST, settings=SETTINGS, toolbox=Tools(), sink=written))
    assert result.response.text == "It is sunny."
    assert written.pieces == ["Let ", "me ", "look.", None, "It ", "is ", "sunny."]


def test_tool_failure_is_shown_to_the_model_not_raised() -> None:
    provider = Scripted(
        answer("", ToolCall("c1", "lookup", {"fail": True})), answer("Sorry, lookup failed.")
    )
    result = run(
        ProviderRunner({"scripted": provider}).run(REQUEST, settings=SETTINGS, toolbox=Tools())
    )
    tool_message = provider.requests[1].messages[-1]
    assert tool_message.is_error and "lookup broke" in tool_message.content
    assert result.response.text == "Sorry, lookup failed."


def test_at_most_max_model_calls_and_the_last_one_offers_no_tools() -> None:
    looping = Scripted(
        *[answer("", ToolCall(f"c{i}", "lookup", {"q": i})) for i in range(4)], answer("Final.")
    )
    runner = ProviderRunner({"scripted": looping}, max_model_calls=5)
    result = run(runner.run(REQUEST, settings=SETTINGS, toolbox=Tools()))
    assert result.calls == 5
    assert [len(r.tools) for r in looping.requests] == [1, 1, 1, 1, 0]
    assert result.response.text == "Final."


def test_unknown_provider_is_a_final_error_naming_it() -> None:
    runner = ProviderRunner({"echo": Scripted()})
    with pytest.raises(ProviderError) as caught:
        run(runner.run(REQUEST, settings=SETTINGS))
    assert not caught.value.retryable
    assert "scripted" in str(caught.value) and "echo" in str(caught.value)


def test_model_table_prefix_and_overrides() -> None:
    table = ModelTable({"my-model": ModelInfo(4096, 1.0, 2.0)})
    assert table.info("claude-sonnet-4-5-20250929").context_window == 200_000
    assert table.info("gpt-4o-mini-2024").input_per_mtok == 0.15
    assert table.info("my-model").cost(1_000_000, 1_000_000) == 3.0
    assert table.info("who-knows").cost(10, 10) is None
