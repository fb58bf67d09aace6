"""The Anthropic adapter, with the real ``anthropic`` SDK against a fake Messages API: what it
sends (system prompt, role mapping, merged user turns, tools, model), what it makes of JSON and
streamed answers, and how each failure becomes a :class:`ProviderError`."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anthropic
import pytest
import pytest_asyncio

from postroom.core.context import ContextMessage, ToolCall, format_messages_for_sdk
from postroom.core.messages import MessageType, StoredMessage
from postroom.llm.anthropic import AnthropicProvider
from postroom.llm.base import ModelRequest, ProviderError, RateLimited, ToolSpec

from fake_llm import FakeLLM, Reply, event_frame, serve
from fake_sink import WrittenText

KEY = "sk-ant-test-SECRET-0123456789"
ACCOUNT = "work-anthropic"
MESSAGES = "/v1/messages"
WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# One fake server per module (starting and stopping uvicorn costs ~0.2 s); each test starts
# from a clean slate of recorded requests and queued replies.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[tuple[FakeLLM, str]]:
    llm = FakeLLM()
    async with serve(llm) as base:
        yield llm, base


@pytest.fixture
def fake(server: tuple[FakeLLM, str]) -> tuple[FakeLLM, str]:
    server[0].reset()
    return server


@pytest_asyncio.fixture(loop_scope="module")
async def provider(fake: tuple[FakeLLM, str]) -> AsyncIterator[AnthropicProvider]:
    adapter = AnthropicProvider(api_key=KEY, account=ACCOUNT, base_url=fake[1])
    yield adapter
    await adapter.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def streaming(fake: tuple[FakeLLM, str]) -> AsyncIterator[AnthropicProvider]:
    adapter = AnthropicProvider(api_key=KEY, account=ACCOUNT, base_url=fake[1], stream=True)
    yield adapter
    await adapter.aclose()


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-6",
    usage: tuple[int, int] = (25, 7),
) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_011"}
    return Reply(status=status, body=body, headers=headers or {})


def ask(*messages: ContextMessage, **kwargs: Any) -> ModelRequest:
    return ModelRequest(system="You are Atlas.", messages=messages, **kwargs)


def user(text: str) -> ContextMessage:
    return ContextMessage("user", text)


# --------------------------------------------------------------------------- answers


async def test_plain_answer(fake: tuple[FakeLLM, str], provider: AnthropicProvider) -> None:
    llm, _ = fake
    body = message([{"type": "text", "text": "Hello, Ana."}])
    llm.answer(MESSAGES, Reply(body=body))

    response = await provider.complete(ask(user("hi"), model="claude-opus-4-7", max_tokens=300))

    assert response.text == "Hello, Ana."
    assert response.usage == {"input_tokens": 25, "output_tokens": 7}
    assert response.model == "claude-sonnet-4-6"  # what the API says it used
    assert response.stop_reason == "end_turn"
    assert response.account == ACCOUNT
    assert response.cost is None
    assert response.tool_calls == ()
    assert json.loads(response.raw) == body
    (received,) = llm.received
    assert received.method == "POST" and received.path == MESSAGES
    assert KEY in (received.headers.get("x-api-key"), received.headers.get("authorization", "")[7:])
    assert received.json() == {
        "model": "claude-opus-4-7",
        "max_tokens": 300,
        "system": "You are Atlas.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


async def test_default_model_when_the_request_names_none(
    fake: tuple[FakeLLM, str],
) -> None:
    llm, base = fake
    llm.answer(MESSAGES, Reply(body=message([{"type": "text", "text": "ok"}])))
    adapter = AnthropicProvider(
        api_key=KEY, account=ACCOUNT, base_url=base, default_model="claude-haiku-4-5"
    )
    try:
        await adapter.complete(ask(user("hi")))
    finally:
        await adapter.aclose()
    assert llm.bodies(MESSAGES)[0]["model"] == "claude-haiku-4-5"


async def test_history_is_mapped_to_the_messages_api(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(MESSAGES, Reply(body=message([{"type": "text", "text": "done"}])))
    request = ModelRequest(
        system="You are Atlas, a terse assistant.",
        messages=[
            ContextMessage("assistant", "an answer from before the compaction"),
            user("deploy please"),
            ContextMessage("system", "Task from main: deploy the site."),
            ContextMessage("tool_result", "deployed 3 files", exit_code=0),
            ContextMessage("assistant", "Deployed."),
            user("and the logs?"),
            ContextMessage("tool_result", "no such file", exit_code=2),
            user("   "),
        ],
        model="claude-sonnet-4-6",
        tools=[WEATHER],
        max_tokens=1024,
    )

    await provider.complete(request)

    sent = llm.bodies(MESSAGES)[0]
    assert sent["system"] == "You are Atlas, a terse assistant."
    assert sent["model"] == "claude-sonnet-4-6"
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": WEATHER.parameters,
        }
    ]
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "deploy please"},
                {"type": "text", "text": "[system] Task from main: deploy the site."},
                {"type": "text", "text": "[command output, exit 0] deployed 3 files"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Deployed."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and the logs?"},
                {"type": "text", "text": "[command output, exit 2] no such file"},
            ],
        },
    ]


async def test_no_user_message_is_refused_before_any_call(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(ContextMessage("assistant", "only me")))
    assert not caught.value.retryable
    assert fake[0].received == []


async def test_host_and_trace_rows_never_reach_the_api(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(MESSAGES, Reply(body=message([{"type": "text", "text": "ok"}])))
    rows = [
        stored(1, MessageType.USER, "what changed?", sender="telegram:user/42"),
        stored(2, MessageType.HOST, "HOST-NOTICE rate limited, retrying", sender="host"),
        stored(3, MessageType.TRACE, "TRACE-THINKING secret plan", sender="thinking"),
        stored(4, MessageType.ASSISTANT, "Two files.", sender="bot"),
        stored(5, MessageType.TRACE, "TRACE-TOOL-USE memory_save", sender="tool_use"),
        stored(6, MessageType.SYSTEM, "deploy finished", sender="deploy"),
        stored(7, MessageType.USER, "thanks", sender="telegram:user/42"),
    ]
    request = ModelRequest(system="You are Atlas.", messages=format_messages_for_sdk(rows))

    await provider.complete(request)

    (received,) = llm.received
    text = received.body.decode()
    for marker in ("HOST-NOTICE", "TRACE-THINKING", "TRACE-TOOL-USE"):
        assert marker not in text
    assert [m["role"] for m in received.json()["messages"]] == ["user", "assistant", "user"]
    assert "[system] deploy finished" in text


def stored(seq: int, kind: MessageType, content: str, *, sender: str) -> StoredMessage:
    return StoredMessage(
        id=f"m{seq}",
        chat_jid="telegram:user/42",
        seq=seq,
        sender=sender,
        sender_name=sender.rpartition("/")[2],
        content=content,
        timestamp=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        is_from_me=kind is not MessageType.USER,
        message_type=kind,
        metadata={},
    )


# --------------------------------------------------------------------------- tools


async def test_tool_call_round_trip(fake: tuple[FakeLLM, str], provider: AnthropicProvider) -> None:
    llm, _ = fake
    llm.answer(
        MESSAGES,
        Reply(
            body=message(
                [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A09q90qw90lq917835lq9",
                        "name": "get_weather",
                        "input": {"city": "Lisbon"},
                    },
                ],
                stop_reason="tool_use",
            )
        ),
        Reply(body=message([{"type": "text", "text": "Sunny, 21 °C."}])),
    )
    history = [user("weather in Lisbon?")]

    first = await provider.complete(ask(*history, tools=[WEATHER]))

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me look."
    (call,) = first.tool_calls
    assert call == ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", {"city": "Lisbon"})

    second = await provider.complete(
        ask(
            *history,
            ContextMessage("assistant", first.text, tool_calls=first.tool_calls),
            ContextMessage(
                "tool",
                "sunny, 21",
                tool_call_id=call.id,
                tool_name=call.name,
            ),
            tools=[WEATHER],
        )
    )

    assert second.text == "Sunny, 21 °C." and second.tool_calls == ()
    assert llm.bodies(MESSAGES)[1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Lisbon?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"city": "Lisbon"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "is_error": False,
                    "content": "sunny, 21",
                }
            ],
        },
    ]


async def test_tool_results_come_first_and_errors_are_flagged(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(MESSAGES, Reply(body=message([{"type": "text", "text": "ok"}])))
    calls = (ToolCall("toolu_1", "get_weather", {}), ToolCall("toolu_2", "get_weather", {}))

    await provider.complete(
        ask(
            user("both cities"),
            ContextMessage("assistant", "", tool_calls=calls),
            ContextMessage("tool", "boom", tool_call_id="toolu_1", is_error=True),
            ContextMessage("system", "the operator paused tools"),
            ContextMessage("tool", "", tool_call_id="toolu_2"),
        )
    )

    sent = llm.bodies(MESSAGES)[0]["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
        ],
    }
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": "boom"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": False},
            {"type": "text", "text": "[system] the operator paused tools"},
        ],
    }


# --------------------------------------------------------------------------- streaming


def stream_frames(*blocks: list[str], stop_reason: str = "end_turn") -> list[str]:
    start = message([], stop_reason="", usage=(472, 2))
    start.update(stop_reason=None)
    frames = [event_frame("message_start", {"type": "message_start", "message": start})]
    frames.append(event_frame("ping", {"type": "ping"}))
    for block in blocks:
        frames.extend(block)
    frames.append(
        event_frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
        )
    )
    frames.append(event_frame("message_stop", {"type": "message_stop"}))
    return frames


def text_block(index: int, *pieces: str) -> list[str]:
    frames = [
        event_frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        )
    ]
    frames.extend(
        event_frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            },
        )
        for p in pieces
    )
    frames.append(event_frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames


def tool_block(index: int, id: str, name: str, *json_pieces: str) -> list[str]:
    start = {"type": "tool_use", "id": id, "name": name, "input": {}}
    frames = [
        event_frame(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    frames.extend(
        event_frame(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": p},
            },
        )
        for p in json_pieces
    )
    frames.append(event_frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames


async def test_streamed_text_and_tool_use(
    fake: tuple[FakeLLM, str], streaming: AnthropicProvider
) -> None:
    llm, _ = fake
    frames = stream_frames(
        text_block(0, "Okay, let me ", "check."),
        tool_block(1, "toolu_01T1x", "get_weather", "", '{"city": "San Fra', 'ncisco"}'),
        stop_reason="tool_use",
    )
    llm.answer(MESSAGES, Reply(frames=frames))

    written = WrittenText()
    response = await streaming.complete(ask(user("weather in SF?"), tools=[WEATHER]), sink=written)

    assert response.text == "Okay, let me check."
    # The text reached the sink piece by piece, as it arrived; tool input never does.
    assert written.pieces == ["Okay, let me ", "check."]
    assert response.tool_calls == (
        ToolCall("toolu_01T1x", "get_weather", {"city": "San Francisco"}),
    )
    assert response.usage == {"input_tokens": 472, "output_tokens": 89}
    assert response.stop_reason == "tool_use"
    assert response.model == "claude-sonnet-4-6"
    assert response.account == ACCOUNT
    raw = json.loads(response.raw)
    assert raw["content"] == [
        {"type": "text", "text": "Okay, let me check."},
        {
            "type": "tool_use",
            "id": "toolu_01T1x",
            "name": "get_weather",
            "input": {"city": "San Francisco"},
        },
    ]
    assert raw["stop_reason"] == "tool_use" and raw["usage"]["output_tokens"] == 89
    sent = llm.bodies(MESSAGES)[0]
    assert sent["stream"] is True
    assert sent["system"] == "You are Atlas."
    assert sent["tools"][0]["name"] == "get_weather"


async def test_streamed_tool_input_that_is_not_json_is_kept_raw(
    fake: tuple[FakeLLM, str], streaming: AnthropicProvider
) -> None:
    llm, _ = fake
    frames = stream_frames(
        tool_block(0, "toolu_a", "get_weather", '{"city": '),
        tool_block(1, "toolu_b", "get_weather"),
        stop_reason="tool_use",
    )
    llm.answer(MESSAGES, Reply(frames=frames))

    response = await streaming.complete(ask(user("hi")))

    assert response.tool_calls == (
        ToolCall("toolu_a", "get_weather", {"_raw": '{"city": '}),
        ToolCall("toolu_b", "get_weather", {}),
    )
    assert response.text == ""


async def test_stream_overloaded_midway_is_rate_limited(
    fake: tuple[FakeLLM, str], streaming: AnthropicProvider
) -> None:
    llm, _ = fake
    frames = stream_frames(text_block(0, "Hel"))[:4]
    frames.append(
        event_frame(
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
    )
    llm.answer(MESSAGES, Reply(frames=frames))

    with pytest.raises(RateLimited) as caught:
        await streaming.complete(ask(user("hi")))
    assert caught.value.retry_after is None
    assert isinstance(caught.value.__cause__, anthropic.APIStatusError)


async def test_stream_ending_before_message_stop_is_retryable(
    fake: tuple[FakeLLM, str], streaming: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(MESSAGES, Reply(frames=stream_frames(text_block(0, "Hel"))[:-3]))

    with pytest.raises(ProviderError) as caught:
        await streaming.complete(ask(user("hi")))
    assert caught.value.retryable and not isinstance(caught.value, RateLimited)


async def test_stream_connection_dropped_is_retryable(
    fake: tuple[FakeLLM, str], streaming: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(MESSAGES, Reply(frames=stream_frames(text_block(0, "Hel", "lo")), break_after=4))

    with pytest.raises(ProviderError) as caught:
        await streaming.complete(ask(user("hi")))
    assert caught.value.retryable
    assert caught.value.__cause__ is not None


# --------------------------------------------------------------------------- errors


async def test_429_is_rate_limited_with_retry_after(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    llm, _ = fake
    llm.answer(
        MESSAGES,
        error(429, "rate_limit_error", "Number of requests exceeded", {"retry-after": "12"}),
    )

    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))

    assert caught.value.retry_after == 12.0
    assert caught.value.retryable
    assert ACCOUNT in str(caught.value)
    assert isinstance(caught.value.__cause__, anthropic.RateLimitError)
    assert len(llm.received) == 1  # the SDK does not retry: the account pool decides


@pytest.mark.parametrize(
    ("headers", "low", "high"),
    [
        ({"retry-after-ms": "1500"}, 1.5, 1.5),
        # Given but unreadable: as long as allowed (the account pool caps it at llm.max_rest).
        ({"retry-after": "soon"}, math.inf, math.inf),
        ({"retry-after": "1e15"}, 1e15, 1e15),
        ({}, None, None),
    ],
)
async def test_retry_after_forms(
    fake: tuple[FakeLLM, str],
    provider: AnthropicProvider,
    headers: dict[str, str],
    low: float | None,
    high: float | None,
) -> None:
    fake[0].answer(MESSAGES, error(429, "rate_limit_error", "slow down", headers))
    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))
    assert caught.value.retry_after == low == high


async def test_retry_after_as_an_http_date(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    fake[0].answer(MESSAGES, error(429, "rate_limit_error", "slow down", {"retry-after": when}))
    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))
    assert caught.value.retry_after is not None and 20 < caught.value.retry_after <= 30


async def test_529_overloaded_is_rate_limited(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    fake[0].answer(MESSAGES, error(529, "overloaded_error", "Overloaded", {"retry-after": "3"}))

    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))

    assert caught.value.retry_after == 3.0
    assert "overloaded" in str(caught.value)
    assert isinstance(caught.value.__cause__, anthropic.OverloadedError)


async def test_500_is_retryable(fake: tuple[FakeLLM, str], provider: AnthropicProvider) -> None:
    fake[0].answer(MESSAGES, error(500, "api_error", "Internal server error"))

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert caught.value.retryable and not isinstance(caught.value, RateLimited)
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "authentication_error"), (403, "permission_error")]
)
async def test_refused_key_is_not_retryable_and_never_shown(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider, status: int, kind: str
) -> None:
    fake[0].answer(MESSAGES, error(status, kind, f"invalid x-api-key {KEY}"))

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert not caught.value.retryable
    assert ACCOUNT in str(caught.value) and "key was refused" in str(caught.value)
    assert KEY not in str(caught.value)


async def test_400_is_not_retryable_and_says_why(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    fake[0].answer(
        MESSAGES,
        error(
            400, "invalid_request_error", f"messages.0: text content blocks must be non-empty {KEY}"
        ),
    )

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert not caught.value.retryable
    assert "text content blocks must be non-empty" in str(caught.value)
    assert KEY not in str(caught.value)
    assert isinstance(caught.value.__cause__, anthropic.BadRequestError)


async def test_timeout_is_retryable(fake: tuple[FakeLLM, str]) -> None:
    llm, base = fake
    llm.answer(MESSAGES, Reply(body=message([{"type": "text", "text": "late"}]), delay_s=5))
    adapter = AnthropicProvider(api_key=KEY, account=ACCOUNT, base_url=base, timeout_s=0.2)
    try:
        with pytest.raises(ProviderError) as caught:
            await adapter.complete(ask(user("hi")))
    finally:
        await adapter.aclose()
    assert caught.value.retryable
    assert "timed out" in str(caught.value)
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)


async def test_unreachable_api_is_retryable() -> None:
    llm = FakeLLM()
    async with serve(llm) as base:
        pass  # the port is free again once the server stopped
    adapter = AnthropicProvider(api_key=KEY, account=ACCOUNT, base_url=base)
    try:
        with pytest.raises(ProviderError) as caught:
            await adapter.complete(ask(user("hi")))
    finally:
        await adapter.aclose()
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


# --------------------------------------------------------------------------- check


async def test_check_lists_models(fake: tuple[FakeLLM, str], provider: AnthropicProvider) -> None:
    llm, _ = fake
    llm.answer(
        "/v1/models",
        Reply(
            body={
                "data": [
                    {
                        "type": "model",
                        "id": "claude-sonnet-4-6",
                        "display_name": "Claude Sonnet 4.6",
                        "created_at": "2026-02-17T00:00:00Z",
                    }
                ],
                "has_more": True,
                "first_id": "claude-sonnet-4-6",
                "last_id": "claude-sonnet-4-6",
            }
        ),
    )

    description = await provider.check()

    assert ACCOUNT in description and "claude-sonnet-4-6" in description
    assert KEY not in description
    (received,) = llm.received
    assert received.method == "GET" and received.query == "limit=1"
    assert KEY in (received.headers.get("x-api-key"), received.headers.get("authorization", "")[7:])


async def test_check_with_a_refused_key(
    fake: tuple[FakeLLM, str], provider: AnthropicProvider
) -> None:
    fake[0].answer("/v1/models", error(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(ProviderError) as caught:
        await provider.check()
    assert not caught.value.retryable and ACCOUNT in str(caught.value)
