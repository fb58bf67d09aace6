"""The OpenAI-compatible adapter, with the real ``openai`` SDK against a fake Chat Completions API:
what it sends (system prompt first, stored system rows in place, command outputs as user text,
tool calls and results, tools, model), what it makes of JSON and streamed answers, and how each
failure becomes a :class:`ProviderError`."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
import pytest_asyncio

from postroom.core.context import ContextMessage, ToolCall, format_messages_for_sdk
from postroom.core.messages import MessageType, StoredMessage
from postroom.llm.base import ModelRequest, ProviderError, RateLimited, ToolSpec
from postroom.llm.openai import OpenAIProvider

from fake_llm import FakeLLM, Reply, data_frame, serve
from fake_sink import WrittenText

KEY = "sk-proj-test-SECRET-0123456789"
ACCOUNT = "team-openai"
COMPLETIONS = "/v1/chat/completions"
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
        yield llm, f"{base}/v1"


@pytest.fixture
def fake(server: tuple[FakeLLM, str]) -> tuple[FakeLLM, str]:
    server[0].reset()
    return server


@pytest_asyncio.fixture(loop_scope="module")
async def provider(fake: tuple[FakeLLM, str]) -> AsyncIterator[OpenAIProvider]:
    adapter = OpenAIProvider(api_key=KEY, account=ACCOUNT, base_url=fake[1])
    yield adapter
    await adapter.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def streaming(fake: tuple[FakeLLM, str]) -> AsyncIterator[OpenAIProvider]:
    adapter = OpenAIProvider(api_key=KEY, account=ACCOUNT, base_url=fake[1], stream=True)
    yield adapter
    await adapter.aclose()


def completion(
    message: dict[str, Any],
    *,
    finish_reason: str = "stop",
    model: str = "gpt-4o-mini-2024-07-18",
    usage: tuple[int, int] = (19, 10),
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306",
    }


def error(
    status: int, text: str, code: str | None = None, headers: dict[str, str] | None = None
) -> Reply:
    body = {
        "error": {"message": text, "type": "invalid_request_error", "param": None, "code": code}
    }
    return Reply(status=status, body=body, headers=headers or {})


def ask(*messages: ContextMessage, **kwargs: Any) -> ModelRequest:
    return ModelRequest(system="You are Atlas.", messages=messages, **kwargs)


def user(text: str) -> ContextMessage:
    return ContextMessage("user", text)


# --------------------------------------------------------------------------- answers


async def test_plain_answer(fake: tuple[FakeLLM, str], provider: OpenAIProvider) -> None:
    llm, _ = fake
    body = completion({"content": "Hello, Ana."})
    llm.answer(COMPLETIONS, Reply(body=body))

    response = await provider.complete(ask(user("hi"), model="gpt-4.1-mini", max_tokens=300))

    assert response.text == "Hello, Ana."
    assert response.usage == {"input_tokens": 19, "output_tokens": 10}
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.stop_reason == "stop"
    assert response.account == ACCOUNT
    assert response.cost is None
    assert response.tool_calls == ()
    assert json.loads(response.raw) == body
    assert provider.name == "openai"
    (received,) = llm.received
    assert received.method == "POST" and received.path == COMPLETIONS
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.json() == {
        "model": "gpt-4.1-mini",
        "max_tokens": 300,
        "messages": [
            {"role": "system", "content": "You are Atlas."},
            {"role": "user", "content": "hi"},
        ],
    }


async def test_compatible_server_default_model_and_token_field(
    fake: tuple[FakeLLM, str],
) -> None:
    llm, base = fake
    llm.answer(COMPLETIONS, Reply(body=completion({"content": "ok"}, model="llama3.2")))
    adapter = OpenAIProvider(
        api_key="ollama",
        account="local",
        base_url=base,
        default_model="llama3.2",
        name="ollama-compat",
        max_tokens_field="max_completion_tokens",
    )
    try:
        response = await adapter.complete(ModelRequest(system="", messages=[user("hi")]))
    finally:
        await adapter.aclose()
    assert adapter.name == "ollama-compat"
    assert response.model == "llama3.2" and response.account == "local"
    assert llm.bodies(COMPLETIONS)[0] == {
        "model": "llama3.2",
        "max_completion_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
    }


async def test_history_is_mapped_to_chat_messages(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(COMPLETIONS, Reply(body=completion({"content": "done"})))
    request = ModelRequest(
        system="You are Atlas, a terse assistant.",
        messages=[
            user("deploy please"),
            ContextMessage("system", "Task from main: deploy the site."),
            ContextMessage("tool_result", "deployed 3 files", exit_code=0),
            ContextMessage("assistant", "Deployed."),
            user("and the logs?"),
            ContextMessage("tool_result", "no such file", exit_code=2),
        ],
        model="gpt-4o",
        tools=[WEATHER],
        max_tokens=1024,
    )

    await provider.complete(request)

    sent = llm.bodies(COMPLETIONS)[0]
    assert sent["model"] == "gpt-4o"
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert sent["messages"] == [
        {"role": "system", "content": "You are Atlas, a terse assistant."},
        {"role": "user", "content": "deploy please"},
        {"role": "system", "content": "Task from main: deploy the site."},
        {"role": "user", "content": "[command output, exit 0] deployed 3 files"},
        {"role": "assistant", "content": "Deployed."},
        {"role": "user", "content": "and the logs?"},
        {"role": "user", "content": "[command output, exit 2] no such file"},
    ]


async def test_host_and_trace_rows_never_reach_the_api(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(COMPLETIONS, Reply(body=completion({"content": "ok"})))
    rows = [
        stored(1, MessageType.USER, "what changed?", sender="telegram:user/42"),
        stored(2, MessageType.HOST, "HOST-NOTICE rate limited, retrying", sender="host"),
        stored(3, MessageType.TRACE, "TRACE-THINKING secret plan", sender="thinking"),
        stored(4, MessageType.ASSISTANT, "Two files.", sender="bot"),
        stored(5, MessageType.TRACE, "TRACE-TOOL-RESULT 42 rows", sender="tool_result"),
        stored(6, MessageType.TOOL_RESULT, "ok", sender="command_output"),
        stored(7, MessageType.USER, "thanks", sender="telegram:user/42"),
    ]
    request = ModelRequest(system="You are Atlas.", messages=format_messages_for_sdk(rows))

    await provider.complete(request)

    (received,) = llm.received
    text = received.body.decode()
    for marker in ("HOST-NOTICE", "TRACE-THINKING", "TRACE-TOOL-RESULT"):
        assert marker not in text
    assert [m["role"] for m in received.json()["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "user",
    ]


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


def tool_call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_tool_call_round_trip(fake: tuple[FakeLLM, str], provider: OpenAIProvider) -> None:
    llm, _ = fake
    llm.answer(
        COMPLETIONS,
        Reply(
            body=completion(
                {
                    "content": None,
                    "tool_calls": [tool_call("call_DdmO9", "get_weather", '{"city":"Lisbon"}')],
                },
                finish_reason="tool_calls",
            )
        ),
        Reply(body=completion({"content": "Sunny, 21 °C."})),
    )
    history = [user("weather in Lisbon?")]

    first = await provider.complete(ask(*history, tools=[WEATHER]))

    assert first.stop_reason == "tool_calls" and first.text == ""
    (call,) = first.tool_calls
    assert call == ToolCall("call_DdmO9", "get_weather", {"city": "Lisbon"})

    second = await provider.complete(
        ask(
            *history,
            ContextMessage("assistant", first.text, tool_calls=first.tool_calls),
            ContextMessage("tool", "sunny, 21", tool_call_id=call.id, tool_name=call.name),
            tools=[WEATHER],
        )
    )

    assert second.text == "Sunny, 21 °C." and second.tool_calls == ()
    assert llm.bodies(COMPLETIONS)[1]["messages"] == [
        {"role": "system", "content": "You are Atlas."},
        {"role": "user", "content": "weather in Lisbon?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call_DdmO9", "get_weather", '{"city": "Lisbon"}')],
        },
        {"role": "tool", "tool_call_id": "call_DdmO9", "content": "sunny, 21"},
    ]


async def test_tool_errors_and_bad_arguments(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(
        COMPLETIONS,
        Reply(
            body=completion(
                {
                    "content": "Trying both.",
                    "tool_calls": [
                        tool_call("call_1", "get_weather", '{"city": "Li'),
                        tool_call("call_2", "get_weather", "[1, 2]"),
                        tool_call("call_3", "get_weather", ""),
                    ],
                },
                finish_reason="tool_calls",
            )
        ),
        Reply(body=completion({"content": "ok"})),
    )

    first = await provider.complete(ask(user("go")))
    assert first.text == "Trying both."
    assert [c.arguments for c in first.tool_calls] == [
        {"_raw": '{"city": "Li'},
        {"_raw": "[1, 2]"},
        {},
    ]

    await provider.complete(
        ask(
            user("go"),
            ContextMessage("assistant", first.text, tool_calls=first.tool_calls[:1]),
            ContextMessage("tool", "bad city", tool_call_id="call_1", is_error=True),
        )
    )
    sent = llm.bodies(COMPLETIONS)[1]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "Trying both.",
        "tool_calls": [tool_call("call_1", "get_weather", '{"_raw": "{\\"city\\": \\"Li"}')],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "[error] bad city"}


# --------------------------------------------------------------------------- streaming


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    return data_frame(
        {
            "id": "chatcmpl-123",
            "object": "chat.completion.chunk",
            "created": 1694268190,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_44709d6fcb",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
            "usage": None,
        }
    )


def usage_chunk(prompt: int, completion_tokens: int) -> str:
    return data_frame(
        {
            "id": "chatcmpl-123",
            "object": "chat.completion.chunk",
            "created": 1694268190,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_44709d6fcb",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            },
        }
    )


def tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, args: str
) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        call.update(id=id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


async def test_streamed_text(fake: tuple[FakeLLM, str], streaming: OpenAIProvider) -> None:
    llm, _ = fake
    frames = [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "Hello"}),
        chunk({"content": ", Ana."}),
        chunk({}, finish_reason="stop"),
        usage_chunk(31, 4),
        data_frame("[DONE]"),
    ]
    llm.answer(COMPLETIONS, Reply(frames=frames))

    written = WrittenText()
    response = await streaming.complete(ask(user("hi")), sink=written)

    assert response.text == "Hello, Ana."
    assert written.pieces == ["Hello", ", Ana."]
    assert response.usage == {"input_tokens": 31, "output_tokens": 4}
    assert response.stop_reason == "stop"
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.account == ACCOUNT
    raw = json.loads(response.raw)
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": "Hello, Ana."}
    assert raw["usage"]["total_tokens"] == 35
    sent = llm.bodies(COMPLETIONS)[0]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][0] == {"role": "system", "content": "You are Atlas."}


async def test_streamed_tool_calls(fake: tuple[FakeLLM, str], streaming: OpenAIProvider) -> None:
    llm, _ = fake
    frames = [
        chunk({"role": "assistant", "content": None}),
        chunk(tool_delta(0, id="call_a", name="get_weather", args="")),
        chunk(tool_delta(0, args='{"ci')),
        chunk(tool_delta(0, args='ty": "Paris"}')),
        chunk(tool_delta(1, id="call_b", name="get_weather", args='{"city": "Rome"}')),
        chunk({}, finish_reason="tool_calls"),
        usage_chunk(82, 17),
        data_frame("[DONE]"),
    ]
    llm.answer(COMPLETIONS, Reply(frames=frames))

    response = await streaming.complete(ask(user("Paris and Rome?"), tools=[WEATHER]))

    assert response.text == ""
    assert response.tool_calls == (
        ToolCall("call_a", "get_weather", {"city": "Paris"}),
        ToolCall("call_b", "get_weather", {"city": "Rome"}),
    )
    assert response.stop_reason == "tool_calls"
    assert response.usage == {"input_tokens": 82, "output_tokens": 17}
    raw = json.loads(response.raw)
    assert raw["choices"][0]["message"]["tool_calls"][0] == tool_call(
        "call_a", "get_weather", '{"city": "Paris"}'
    )
    assert llm.bodies(COMPLETIONS)[0]["tools"][0]["function"]["name"] == "get_weather"


async def test_stream_without_finish_reason_is_retryable(
    fake: tuple[FakeLLM, str], streaming: OpenAIProvider
) -> None:
    frames = [chunk({"role": "assistant", "content": "Hel"}), data_frame("[DONE]")]
    fake[0].answer(COMPLETIONS, Reply(frames=frames))

    with pytest.raises(ProviderError) as caught:
        await streaming.complete(ask(user("hi")))
    assert caught.value.retryable and not isinstance(caught.value, RateLimited)


async def test_stream_error_event_is_translated(
    fake: tuple[FakeLLM, str], streaming: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(
        COMPLETIONS,
        Reply(
            frames=[
                chunk({"role": "assistant", "content": "Hel"}),
                data_frame({"error": {"message": "upstream failed", "code": 502}}),
            ]
        ),
        Reply(
            frames=[
                chunk({"role": "assistant", "content": "Hel"}),
                data_frame({"error": {"message": "Rate limit exceeded", "code": 429}}),
            ]
        ),
    )

    with pytest.raises(ProviderError) as first:
        await streaming.complete(ask(user("hi")))
    assert first.value.retryable and not isinstance(first.value, RateLimited)
    assert "upstream failed" in str(first.value)
    assert isinstance(first.value.__cause__, openai.APIError)

    with pytest.raises(RateLimited):
        await streaming.complete(ask(user("hi")))


async def test_stream_connection_dropped_is_retryable(
    fake: tuple[FakeLLM, str], streaming: OpenAIProvider
) -> None:
    frames = [chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({}, "stop")]
    fake[0].answer(COMPLETIONS, Reply(frames=frames, break_after=2))

    with pytest.raises(ProviderError) as caught:
        await streaming.complete(ask(user("hi")))
    assert caught.value.retryable and caught.value.__cause__ is not None


# --------------------------------------------------------------------------- errors


async def test_429_is_rate_limited_with_retry_after(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(
        COMPLETIONS,
        error(
            429, "Rate limit reached for gpt-4o-mini", "rate_limit_exceeded", {"retry-after": "12"}
        ),
    )

    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))

    assert caught.value.retry_after == 12.0
    assert ACCOUNT in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.RateLimitError)
    assert len(llm.received) == 1  # the SDK does not retry: the account pool decides


async def test_429_without_retry_after(fake: tuple[FakeLLM, str], provider: OpenAIProvider) -> None:
    fake[0].answer(
        COMPLETIONS, error(429, "slow down", "rate_limit_exceeded", {"retry-after-ms": "250"})
    )
    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))
    assert caught.value.retry_after == 0.25


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("later", math.inf), ("99999999999", 99999999999.0)],
)
async def test_retry_after_forms(
    fake: tuple[FakeLLM, str],
    provider: OpenAIProvider,
    retry_after: str,
    expected: float | None,
) -> None:
    fake[0].answer(
        COMPLETIONS, error(429, "slow down", "rate_limit_exceeded", {"retry-after": retry_after})
    )
    with pytest.raises(RateLimited) as caught:
        await provider.complete(ask(user("hi")))
    assert caught.value.retry_after == expected


async def test_compatible_server_errors(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    llm, _ = fake
    llm.answer(
        COMPLETIONS,
        Reply(
            status=404,
            body={
                "error": {
                    "message": 'model "llama9" not found, try pulling it first',
                    "type": "api_error",
                    "param": None,
                    "code": None,
                }
            },
        ),
        Reply(status=502, text="Bad Gateway"),
        Reply(body={**completion({"content": "x"}), "choices": []}),
    )

    with pytest.raises(ProviderError) as missing:
        await provider.complete(ask(user("hi"), model="llama9"))
    assert not missing.value.retryable
    assert 'model "llama9" not found' in str(missing.value)

    with pytest.raises(ProviderError) as gateway:
        await provider.complete(ask(user("hi")))
    assert gateway.value.retryable and "Bad Gateway" in str(gateway.value)

    with pytest.raises(ProviderError) as empty:
        await provider.complete(ask(user("hi")))
    assert empty.value.retryable and "no choices" in str(empty.value)


async def test_500_is_retryable(fake: tuple[FakeLLM, str], provider: OpenAIProvider) -> None:
    fake[0].answer(COMPLETIONS, error(500, "The server had an error"))

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert caught.value.retryable and not isinstance(caught.value, RateLimited)
    assert isinstance(caught.value.__cause__, openai.InternalServerError)


async def test_refused_key_is_not_retryable_and_never_shown(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    fake[0].answer(
        COMPLETIONS,
        error(
            401, f"Incorrect API key provided: {KEY[:8]}****{KEY[-4:]} {KEY}.", "invalid_api_key"
        ),
    )

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert not caught.value.retryable
    assert ACCOUNT in str(caught.value) and "key was refused" in str(caught.value)
    assert KEY not in str(caught.value) and KEY[-4:] not in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.AuthenticationError)


async def test_400_is_not_retryable_and_says_why(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    fake[0].answer(
        COMPLETIONS,
        error(
            400, f"Invalid 'messages[1].content': string too long {KEY}", "string_above_max_length"
        ),
    )

    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask(user("hi")))

    assert not caught.value.retryable
    assert "string too long" in str(caught.value)
    assert KEY not in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.BadRequestError)


async def test_timeout_is_retryable(fake: tuple[FakeLLM, str]) -> None:
    llm, base = fake
    llm.answer(COMPLETIONS, Reply(body=completion({"content": "late"}), delay_s=5))
    adapter = OpenAIProvider(api_key=KEY, account=ACCOUNT, base_url=base, timeout_s=0.2)
    try:
        with pytest.raises(ProviderError) as caught:
            await adapter.complete(ask(user("hi")))
    finally:
        await adapter.aclose()
    assert caught.value.retryable
    assert "timed out" in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)


async def test_an_empty_key_is_a_provider_error() -> None:
    with pytest.raises(ProviderError) as caught:
        OpenAIProvider(api_key="", account="lan", base_url="http://127.0.0.1:1/v1")
    assert not caught.value.retryable and "'lan'" in str(caught.value)


async def test_unreachable_api_is_retryable() -> None:
    llm = FakeLLM()
    async with serve(llm) as base:
        pass  # the port is free again once the server stopped
    adapter = OpenAIProvider(api_key=KEY, account=ACCOUNT, base_url=f"{base}/v1")
    try:
        with pytest.raises(ProviderError) as caught:
            await adapter.complete(ask(user("hi")))
    finally:
        await adapter.aclose()
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


# --------------------------------------------------------------------------- check


async def test_check_lists_models(fake: tuple[FakeLLM, str], provider: OpenAIProvider) -> None:
    llm, _ = fake
    llm.answer(
        "/v1/models",
        Reply(
            body={
                "object": "list",
                "data": [
                    {
                        "id": "gpt-4o-mini",
                        "object": "model",
                        "created": 1721172741,
                        "owned_by": "system",
                    },
                    {
                        "id": "gpt-4o",
                        "object": "model",
                        "created": 1715367049,
                        "owned_by": "system",
                    },
                ],
            }
        ),
    )

    description = await provider.check()

    assert ACCOUNT in description and "2 models" in description
    assert "gpt-4o-mini listed" in description
    assert KEY not in description
    (received,) = llm.received
    assert received.method == "GET"
    assert received.headers["authorization"] == f"Bearer {KEY}"


async def test_check_with_a_refused_key(
    fake: tuple[FakeLLM, str], provider: OpenAIProvider
) -> None:
    fake[0].answer("/v1/models", error(401, "Incorrect API key provided", "invalid_api_key"))
    with pytest.raises(ProviderError) as caught:
        await provider.check()
    assert not caught.value.retryable and ACCOUNT in str(caught.value)
