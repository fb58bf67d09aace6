"""The Ollama adapter: the real ``ollama`` SDK against a fake ``/api/chat`` server on a loopback
port; every assertion is on what the fake received or on the adapter's answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from postroom.core.context import ContextMessage, ToolCall, format_messages_for_sdk
from postroom.llm.base import ModelRequest, ProviderError, RateLimited, ToolSpec
from postroom.llm.ollama import OllamaProvider

from fake_llm_servers import (
    HIDDEN_CONTENT,
    FakeServer,
    Reply,
    closed_port_url,
    history_with_hidden_rows,
    json_reply,
    ndjson_reply,
    serve_fake,
)
from fake_sink import WrittenText

SEARCH = ToolSpec(
    name="memory_search",
    description="Search what you remember.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what to look for"}},
        "required": ["query"],
    },
)

Make = Callable[..., OllamaProvider]


def chat(
    content: str = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    done: bool = True,
    usage: tuple[int, int] = (26, 9),
    model: str = "llama3.2",
    done_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "model": model,
        "created_at": "2026-01-05T12:00:00.000000Z",
        "message": message,
        "done": done,
    }
    if done:
        body |= {
            "done_reason": done_reason,
            "total_duration": 123456,
            "prompt_eval_count": usage[0],
            "eval_count": usage[1],
        }
    return body


def ask(*messages: ContextMessage, **kwargs: Any) -> ModelRequest:
    return ModelRequest(system=kwargs.pop("system", "You are terse."), messages=messages, **kwargs)


# One fake server per module (starting and stopping uvicorn costs ~0.2 s, building a client
# ~0.1 s); each test starts from a clean slate of recorded requests and scripted replies.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[FakeServer]:
    async with serve_fake() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeServer) -> Iterator[FakeServer]:
    server.requests.clear()
    server.replies.clear()
    yield server
    assert not server.replies, "the test scripted replies nobody asked for"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def make(server: FakeServer) -> AsyncIterator[Make]:
    """Providers talking to the fake, one per set of options, closed at the end."""
    made: dict[tuple[tuple[str, Any], ...], OllamaProvider] = {}

    def build(**kwargs: Any) -> OllamaProvider:
        options = {"base_url": server.base_url} | kwargs
        key = tuple(sorted(options.items()))
        if key not in made:
            made[key] = OllamaProvider(**options)
        return made[key]

    yield build
    for provider in made.values():
        await provider.aclose()


async def test_plain_answer(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(chat("Hello there.")))
    response = await make().complete(ask(ContextMessage("user", "hi")))

    assert response.text == "Hello there."
    assert response.usage == {"input_tokens": 26, "output_tokens": 9}
    assert response.model == "llama3.2"
    assert response.account == "local"
    assert response.stop_reason == "end_turn"
    assert response.tool_calls == ()
    assert '"prompt_eval_count":26' in response.raw

    (sent,) = fake.requests
    assert (sent.method, sent.path) == ("POST", "/api/chat")
    assert sent.json["model"] == "llama3.2"
    assert sent.json["stream"] is False
    assert sent.json["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
    ]


async def test_system_rows_command_output_model_and_tools(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(chat("ok", model="qwen3:4b")))
    request = ask(
        ContextMessage("user", "hi"),
        ContextMessage("assistant", "hello"),
        ContextMessage("system", "the deploy finished"),
        ContextMessage("tool_result", "rm: no such file", exit_code=1),
        ContextMessage("user", "and now?"),
        system="You are Atlas.",
        model="qwen3:4b",
        tools=(SEARCH,),
        max_tokens=200,
    )
    response = await make(account="gpu-box").complete(request)
    assert (response.model, response.account) == ("qwen3:4b", "gpu-box")

    body = fake.requests[0].json
    assert body["model"] == "qwen3:4b"
    assert body["options"] == {"num_predict": 200}
    assert body["messages"] == [
        {"role": "system", "content": "You are Atlas."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "the deploy finished"},
        {"role": "user", "content": "[command output, exit 1] rm: no such file"},
        {"role": "user", "content": "and now?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "memory_search",
                "description": "Search what you remember.",
                "parameters": {
                    "type": "object",
                    "required": ["query"],
                    "properties": {"query": {"type": "string", "description": "what to look for"}},
                },
            },
        }
    ]


async def test_streaming_assembles_ndjson(fake: FakeServer, make: Make) -> None:
    fake.script(
        ndjson_reply(
            [
                chat("Hel", done=False),
                chat("lo, ", done=False),
                chat("world.", usage=(11, 3)),
            ]
        )
    )
    written = WrittenText()
    response = await make(stream=True).complete(ask(ContextMessage("user", "hi")), sink=written)

    assert response.text == "Hello, world."
    assert written.pieces == ["Hel", "lo, ", "world."]
    assert response.usage == {"input_tokens": 11, "output_tokens": 3}
    assert response.stop_reason == "end_turn"
    assert len(response.raw.splitlines()) == 3
    assert fake.requests[0].json["stream"] is True


async def test_tool_call_round_trip(fake: FakeServer, make: Make) -> None:
    calls = [
        {"function": {"index": 0, "name": "memory_search", "arguments": {"query": "cats"}}},
        {"function": {"index": 1, "name": "memory_save", "arguments": {"fact": "likes cats"}}},
    ]
    fake.script(
        json_reply(chat("", tool_calls=calls, done_reason="stop")),
        json_reply(chat("You like cats.")),
    )
    provider = make()
    question = ContextMessage("user", "what do I like?")
    first = await provider.complete(ask(question, tools=(SEARCH,)))

    assert first.text == ""
    assert first.stop_reason == "tool_use"
    assert first.tool_calls == (
        ToolCall("call_0", "memory_search", {"query": "cats"}),
        ToolCall("call_1", "memory_save", {"fact": "likes cats"}),
    )

    second = await provider.complete(
        ask(
            question,
            ContextMessage("assistant", "", tool_calls=first.tool_calls),
            ContextMessage("tool", "cats, tea", tool_call_id="call_0", tool_name="memory_search"),
            # No tool name: found through the id of the call it answers.
            ContextMessage("tool", "disk full", tool_call_id="call_1", is_error=True),
            tools=(SEARCH,),
        )
    )
    assert second.text == "You like cats."

    messages = fake.requests[1].json["messages"]
    assert messages[2:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {"function": {"name": "memory_search", "arguments": {"query": "cats"}}},
                {"function": {"name": "memory_save", "arguments": {"fact": "likes cats"}}},
            ],
        },
        {"role": "tool", "content": "cats, tea", "tool_name": "memory_search"},
        {"role": "tool", "content": "[error] disk full", "tool_name": "memory_save"},
    ]


async def test_streamed_tool_call(fake: FakeServer, make: Make) -> None:
    call = {"function": {"name": "memory_search", "arguments": {"query": "tea"}}}
    fake.script(ndjson_reply([chat("", tool_calls=[call], done=False), chat("", usage=(40, 12))]))
    response = await make(stream=True).complete(ask(ContextMessage("user", "tea?")))
    assert response.tool_calls == (ToolCall("call_0", "memory_search", {"query": "tea"}),)
    assert response.usage == {"input_tokens": 40, "output_tokens": 12}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "ndjson"])
async def test_rate_limited_with_retry_after(fake: FakeServer, make: Make, stream: bool) -> None:
    fake.script(
        json_reply(
            {"error": "too many requests, slow down"}, status=429, headers={"retry-after": "17"}
        )
    )
    with pytest.raises(RateLimited) as caught:
        await make(stream=stream).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retry_after == 17.0
    assert "too many requests" in str(caught.value)
    assert caught.value.__cause__ is not None


async def test_server_error_is_retryable(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply({"error": "llama runner process has terminated"}, status=500))
    with pytest.raises(ProviderError) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not isinstance(caught.value, RateLimited)
    assert caught.value.retryable
    assert "llama runner process has terminated" in str(caught.value)


async def test_error_inside_a_stream_is_retryable(fake: FakeServer, make: Make) -> None:
    fake.script(ndjson_reply([chat("Hel", done=False), {"error": "out of memory"}]))
    with pytest.raises(ProviderError, match="out of memory") as caught:
        await make(stream=True).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retryable


async def test_stream_cut_before_done_is_retryable(fake: FakeServer, make: Make) -> None:
    fake.script(ndjson_reply([chat("Hel", done=False)]))
    with pytest.raises(ProviderError, match="before it was done") as caught:
        await make(stream=True).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retryable


async def test_missing_model_says_to_pull_it(fake: FakeServer, make: Make) -> None:
    body = {"error": "model 'mistral' not found, try pulling it first"}
    fake.script(json_reply(body, status=404))
    with pytest.raises(ProviderError) as caught:
        await make().complete(ask(ContextMessage("user", "hi"), model="mistral"))
    assert not caught.value.retryable
    assert "ollama pull mistral" in str(caught.value)


async def test_bad_request_is_not_retryable(fake: FakeServer, make: Make) -> None:
    body = {"error": "registry.ollama.ai/library/gemma:2b does not support tools"}
    fake.script(json_reply(body, status=400))
    with pytest.raises(ProviderError, match="does not support tools") as caught:
        await make().complete(ask(ContextMessage("user", "hi"), tools=(SEARCH,)))
    assert not caught.value.retryable


async def test_unreachable_server_is_retryable() -> None:
    host = closed_port_url()
    provider = OllamaProvider(base_url=host)
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask(ContextMessage("user", "hi")))
        with pytest.raises(ProviderError) as checked:
            await provider.check()
    finally:
        await provider.aclose()
    assert caught.value.retryable
    assert f"Ollama is not reachable at {host}" in str(caught.value)
    assert f"Ollama is not reachable at {host}" in str(checked.value)


async def test_slow_server_times_out_retryably(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(chat("too late"), delay_s=0.6))
    with pytest.raises(ProviderError, match="did not answer") as caught:
        await make(timeout_s=0.2).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retryable


async def test_a_server_that_is_not_ollama(fake: FakeServer, make: Make) -> None:
    fake.script(Reply(200, b"<html>hello</html>", "text/html"))
    with pytest.raises(ProviderError, match="not Ollama's API") as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not caught.value.retryable


async def test_check_lists_the_models(fake: FakeServer, make: Make) -> None:
    tags = {
        "models": [
            {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189},
            {"name": "qwen3:4b", "model": "qwen3:4b", "size": 2497293918},
        ]
    }
    fake.script(json_reply(tags), json_reply({"models": tags["models"][1:]}))
    provider = make()

    described = await provider.check()
    assert "llama3.2:latest" in described and "qwen3:4b" in described
    assert "missing" not in described
    (sent,) = fake.requests
    assert (sent.method, sent.path) == ("GET", "/api/tags")

    described = await provider.check()
    assert "run `ollama pull llama3.2`" in described


async def test_host_and_trace_rows_never_reach_the_server(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(chat("ok")))
    await make().complete(ask(*format_messages_for_sdk(history_with_hidden_rows())))

    wire = fake.wire_text()
    for hidden in HIDDEN_CONTENT:
        assert hidden not in wire
    roles = [m["role"] for m in fake.requests[0].json["messages"]]
    assert roles == ["system", "user", "assistant", "system", "user", "user"]
    assert "[command output, exit 0] 3 files" in wire
