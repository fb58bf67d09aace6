"""The Gemini adapter: the real google-genai SDK against a fake ``generateContent`` server on a
loopback port; every assertion is on what the fake received or on the adapter's answer."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from postroom.core.context import ContextMessage, ToolCall, format_messages_for_sdk
from postroom.llm.base import ModelRequest, ProviderError, RateLimited, ToolSpec
from postroom.llm.gemini import GeminiProvider

from fake_llm_servers import (
    HIDDEN_CONTENT,
    FakeServer,
    closed_port_url,
    history_with_hidden_rows,
    json_reply,
    serve_fake,
    sse_reply,
)
from fake_sink import WrittenText

KEY = "AIza-test-secret-key-123"
ACCOUNT = "work"
SEARCH = ToolSpec(
    name="memory_search",
    description="Search what you remember.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
SAVE = ToolSpec(
    name="memory_save",
    description="Remember a fact.",
    parameters={"type": "object", "properties": {"fact": {"type": "string"}}},
)

Make = Callable[..., GeminiProvider]


def answer(
    *parts: dict[str, Any],
    finish: str = "STOP",
    usage: tuple[int, int] = (21, 5),
    model: str = "gemini-2.5-flash-001",
) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": list(parts)}, "finishReason": finish}
        ],
        "usageMetadata": {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        },
        "modelVersion": model,
        "responseId": "resp-1",
    }


def error(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": list(details)}}


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
    made: dict[tuple[tuple[str, Any], ...], GeminiProvider] = {}

    def build(**kwargs: Any) -> GeminiProvider:
        options = {"api_key": KEY, "account": ACCOUNT, "base_url": server.base_url} | kwargs
        key = tuple(sorted(options.items()))
        if key not in made:
            made[key] = GeminiProvider(**options)
        return made[key]

    yield build
    for provider in made.values():
        await provider.aclose()


async def test_plain_answer(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(answer({"text": "Hello"}, {"text": " there."})))
    response = await make().complete(ask(ContextMessage("user", "hi")))

    assert response.text == "Hello there."
    assert response.usage == {"input_tokens": 21, "output_tokens": 5}
    assert response.model == "gemini-2.5-flash-001"
    assert response.account == ACCOUNT
    assert response.tool_calls == ()
    assert response.stop_reason == "end_turn"
    assert '"modelVersion":"gemini-2.5-flash-001"' in response.raw
    assert response.cost is None

    (sent,) = fake.requests
    assert sent.method == "POST"
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == KEY
    assert sent.json["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_thinking_is_output_and_thoughts_are_not_text(fake: FakeServer, make: Make) -> None:
    body = answer({"text": "pondering…", "thought": True}, {"text": "42"})
    body["usageMetadata"]["thoughtsTokenCount"] = 7
    fake.script(json_reply(body))
    response = await make().complete(ask(ContextMessage("user", "the answer?")))
    assert response.text == "42"
    assert response.usage == {"input_tokens": 21, "output_tokens": 12}


async def test_system_prompt_roles_merging_model_and_tools(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(answer({"text": "ok"})))
    request = ask(
        ContextMessage("user", "hi"),
        ContextMessage("system", "the deploy finished"),
        ContextMessage("tool_result", "2 files", exit_code=2),
        ContextMessage("assistant", "noted"),
        ContextMessage("user", "[Alice] one"),
        ContextMessage("user", "[Bob] two"),
        system="You are Atlas.",
        model="gemini-2.5-pro",
        tools=(SEARCH, SAVE),
        max_tokens=321,
    )
    await make().complete(request)

    (sent,) = fake.requests
    assert sent.path == "/v1beta/models/gemini-2.5-pro:generateContent"
    body = sent.json
    assert body["systemInstruction"]["parts"] == [{"text": "You are Atlas."}]
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "hi"},
                {"text": "[system] the deploy finished"},
                {"text": "[command output, exit 2] 2 files"},
            ],
        },
        {"role": "model", "parts": [{"text": "noted"}]},
        {"role": "user", "parts": [{"text": "[Alice] one"}, {"text": "[Bob] two"}]},
    ]
    assert body["generationConfig"]["maxOutputTokens"] == 321
    (tools,) = body["tools"]
    declarations = tools["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["memory_search", "memory_save"]
    assert declarations[0]["description"] == "Search what you remember."
    schema = (
        declarations[0].get("parametersJsonSchema") or declarations[0]["parameters_json_schema"]
    )
    assert schema == SEARCH.parameters
    assert "You are Atlas." not in str(body["contents"])


async def test_streaming_assembles_sse_chunks(fake: FakeServer, make: Make) -> None:
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}
    second = {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo, "}]}}]}
    last = answer({"text": "world."}, usage=(9, 4), model="gemini-2.5-flash-002")
    fake.script(sse_reply([first, second, last]))

    written = WrittenText()
    response = await make(stream=True).complete(ask(ContextMessage("user", "hi")), sink=written)

    assert response.text == "Hello, world."
    assert written.pieces == ["Hel", "lo, ", "world."]
    assert response.usage == {"input_tokens": 9, "output_tokens": 4}
    assert response.model == "gemini-2.5-flash-002"
    assert response.stop_reason == "end_turn"
    assert len(response.raw.splitlines()) == 3
    (sent,) = fake.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.query == "alt=sse"


async def test_tool_call_round_trip(fake: FakeServer, make: Make) -> None:
    signature = b"\x00opaque-thought-signature\xff"
    fake.script(
        json_reply(
            answer(
                {"text": "Let me look."},
                {
                    "functionCall": {"name": "memory_search", "args": {"query": "cats"}},
                    "thoughtSignature": base64.b64encode(signature).decode(),
                },
                {"functionCall": {"name": "memory_save", "args": {"fact": "likes cats"}}},
            )
        ),
        json_reply(answer({"text": "You like cats."})),
    )
    provider = make()
    question = ContextMessage("user", "what do I like?")
    first = await provider.complete(ask(question, tools=(SEARCH, SAVE)))

    assert first.text == "Let me look."
    assert first.stop_reason == "tool_use"
    search, save = first.tool_calls
    assert (search.name, dict(search.arguments)) == ("memory_search", {"query": "cats"})
    assert (save.name, dict(save.arguments)) == ("memory_save", {"fact": "likes cats"})
    assert search.id.startswith("call_0") and save.id == "call_1"

    follow_up = ask(
        question,
        ContextMessage("assistant", first.text, tool_calls=first.tool_calls),
        ContextMessage("tool", "cats, tea", tool_call_id=search.id, tool_name="memory_search"),
        # No tool name: found through the id of the call it answers.
        ContextMessage("tool", "disk full", tool_call_id=save.id, is_error=True),
        tools=(SEARCH, SAVE),
    )
    second = await provider.complete(follow_up)
    assert second.text == "You like cats."
    assert second.tool_calls == ()

    contents = fake.requests[1].json["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"text": "Let me look."},
            {
                "functionCall": {"name": "memory_search", "args": {"query": "cats"}},
                "thoughtSignature": base64.b64encode(signature).decode(),
            },
            {"functionCall": {"name": "memory_save", "args": {"fact": "likes cats"}}},
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "memory_search", "response": {"output": "cats, tea"}}},
            {"functionResponse": {"name": "memory_save", "response": {"error": "disk full"}}},
        ],
    }
    assert len(contents) == 3


async def test_gemini_call_ids_are_kept(fake: FakeServer, make: Make) -> None:
    call = {"id": "fc-77", "name": "memory_save", "args": {"fact": "x"}}
    fake.script(json_reply(answer({"functionCall": call})), json_reply(answer({"text": "saved"})))
    provider = make()
    first = await provider.complete(ask(ContextMessage("user", "remember x"), tools=(SAVE,)))
    assert first.tool_calls == (ToolCall("fc-77", "memory_save", {"fact": "x"}),)

    await provider.complete(
        ask(
            ContextMessage("user", "remember x"),
            ContextMessage("assistant", "", tool_calls=first.tool_calls),
            ContextMessage("tool", "ok", tool_call_id="fc-77", tool_name="memory_save"),
        )
    )
    contents = fake.requests[1].json["contents"]
    assert contents[1] == {"role": "model", "parts": [{"functionCall": call}]}
    assert contents[2]["parts"] == [
        {"functionResponse": {"id": "fc-77", "name": "memory_save", "response": {"output": "ok"}}}
    ]


async def test_streamed_tool_call(fake: FakeServer, make: Make) -> None:
    call = {"functionCall": {"name": "memory_search", "args": {"query": "tea"}}}
    fake.script(sse_reply([answer(call, usage=(30, 8))]))
    response = await make(stream=True).complete(ask(ContextMessage("user", "tea?")))
    assert response.tool_calls == (ToolCall("call_0", "memory_search", {"query": "tea"}),)
    assert response.stop_reason == "tool_use"
    assert response.usage == {"input_tokens": 30, "output_tokens": 8}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"retry-after": "7"}, 7.0), ({}, 12.0)],
    ids=["retry-after header", "RetryInfo retryDelay"],
)
async def test_rate_limited(
    fake: FakeServer, make: Make, headers: dict[str, str], expected: float
) -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}
    body = error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", retry_info)
    fake.script(json_reply(body, status=429, headers=headers))
    with pytest.raises(RateLimited) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retry_after == expected
    assert caught.value.retryable
    assert len(fake.requests) == 1
    assert ACCOUNT in str(caught.value)
    assert caught.value.__cause__ is not None


async def test_rate_limited_while_streaming(fake: FakeServer, make: Make) -> None:
    body = error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.")
    fake.script(json_reply(body, status=429, headers={"retry-after": "3"}))
    with pytest.raises(RateLimited) as caught:
        await make(stream=True).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retry_after == 3.0


async def test_overloaded_is_rate_limited(fake: FakeServer, make: Make) -> None:
    body = error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
    fake.script(json_reply(body, status=503))
    with pytest.raises(RateLimited) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retry_after is None


async def test_server_error_is_retryable(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(error(500, "INTERNAL", "An internal error has occurred."), status=500))
    with pytest.raises(ProviderError) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not isinstance(caught.value, RateLimited)
    assert caught.value.retryable
    assert "500" in str(caught.value)
    assert len(fake.requests) == 1  # no retry inside the SDK: that is the account pool's job


async def test_error_inside_a_stream(fake: FakeServer, make: Make) -> None:
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}
    failure = error(500, "INTERNAL", "An internal error has occurred.")
    fake.script(sse_reply([first, failure]))
    with pytest.raises(ProviderError) as caught:
        await make(stream=True).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retryable
    assert "internal error" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, error(401, "UNAUTHENTICATED", f"Request had invalid credentials: {KEY}.")),
        (403, error(403, "PERMISSION_DENIED", f"Key {KEY} may not use this API.")),
        (
            400,
            error(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
            ),
        ),
    ],
    ids=["401", "403", "400 API_KEY_INVALID"],
)
async def test_refused_key_names_the_account_not_the_key(
    fake: FakeServer, make: Make, status: int, body: dict[str, Any]
) -> None:
    fake.script(json_reply(body, status=status))
    with pytest.raises(ProviderError) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not caught.value.retryable
    assert repr(ACCOUNT) in str(caught.value)
    assert KEY not in str(caught.value)
    assert "refused" in str(caught.value)


async def test_bad_request_is_not_retryable(fake: FakeServer, make: Make) -> None:
    body = error(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Unknown name 'x'.")
    fake.script(json_reply(body, status=400))
    with pytest.raises(ProviderError) as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not caught.value.retryable
    assert "Invalid JSON payload received" in str(caught.value)


async def test_blocked_prompt_is_not_retryable(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply({"promptFeedback": {"blockReason": "SAFETY"}}))
    with pytest.raises(ProviderError, match="blocked") as caught:
        await make().complete(ask(ContextMessage("user", "hi")))
    assert not caught.value.retryable


async def test_unreachable_server_is_retryable() -> None:
    provider = GeminiProvider(api_key=KEY, account=ACCOUNT, base_url=closed_port_url())
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask(ContextMessage("user", "hi")))
    finally:
        await provider.aclose()
    assert caught.value.retryable
    assert KEY not in str(caught.value)


async def test_slow_server_times_out_retryably(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(answer({"text": "too late"}), delay_s=0.6))
    with pytest.raises(ProviderError) as caught:
        await make(timeout_s=0.2).complete(ask(ContextMessage("user", "hi")))
    assert caught.value.retryable


async def test_check_gets_the_default_model(fake: FakeServer, make: Make) -> None:
    model = {"name": "models/gemini-2.5-flash", "displayName": "Gemini 2.5 Flash"}
    fake.script(json_reply(model))
    described = await make().check()
    assert "Gemini 2.5 Flash" in described
    assert ACCOUNT in described and KEY not in described
    (sent,) = fake.requests
    assert (sent.method, sent.path) == ("GET", "/v1beta/models/gemini-2.5-flash")


async def test_check_reports_a_refused_key(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(error(403, "PERMISSION_DENIED", "denied"), status=403))
    with pytest.raises(ProviderError) as caught:
        await make().check()
    assert not caught.value.retryable and ACCOUNT in str(caught.value)


async def test_host_and_trace_rows_never_reach_the_api(fake: FakeServer, make: Make) -> None:
    fake.script(json_reply(answer({"text": "ok"})))
    messages = format_messages_for_sdk(history_with_hidden_rows())
    await make().complete(ask(*messages))

    wire = fake.wire_text()
    for hidden in HIDDEN_CONTENT:
        assert hidden not in wire
    assert [c["role"] for c in fake.requests[0].json["contents"]] == ["user", "model", "user"]
    assert "[command output, exit 0] 3 files" in wire
    assert "[system] the deploy finished" in wire
