"""A fake OpenAI-compatible Chat Completions API that fails a seeded share of its calls.

``POST /v1/chat/completions`` answers, call after call, from one seeded sequence of outcomes: HTTP
500 (an ``error`` object, as OpenAI sends it), HTTP 429 with ``retry-after: 0`` (so the account
pool moves on at once and rests no key), or a normal completion whose text repeats the user
messages after the last assistant message (as the ``echo`` provider does), so a test can see which
messages an answer covers. A request with ``"stream": true`` is answered with ``data:`` chunks, a
word every ``stream_every_s``, as a model writing slowly sends them. The real ``openai`` SDK inside
``postroom serve`` talks to it; it runs under uvicorn on a free loopback port, in the test's event
loop or in a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["Call", "FlakyChatCompletions", "fault_statuses", "serve_app", "serve_env"]


def serve_env(url: str, *, model: str, key: str = "sk-e2e-test-key") -> dict[str, str]:
    """The variables that point ``postroom serve``'s default provider at the fake at *url*."""
    return {
        "POSTROOM_DEFAULTS__PROVIDER": "openai",
        "POSTROOM_DEFAULTS__MODEL": model,
        "POSTROOM_PROVIDERS__OPENAI__BASE_URL": f"{url}/v1",
        "POSTROOM_PROVIDERS__OPENAI__API_KEYS": json.dumps([key]),
    }


def fault_statuses(
    seed: int, *, server_error_share: float, rate_limit_share: float
) -> Iterator[int]:
    """The endless status sequence of one seed: 500, 429 or 200 for each call in turn."""
    rng = random.Random(seed)
    while True:
        draw = rng.random()
        if draw < server_error_share:
            yield 500
        elif draw < server_error_share + rate_limit_share:
            yield 429
        else:
            yield 200


@dataclass(frozen=True)
class Call:
    """One request as the fake answered it."""

    status: int
    api_key: str
    model: str
    messages: list[dict[str, Any]]


def _text(content: Any) -> str:
    """A message's text: a string, or the ``text`` parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class FlakyChatCompletions:
    """Records every call in :attr:`calls`; a successful answer is held back ``delay_s``."""

    seed: int
    server_error_share: float = 0.2
    rate_limit_share: float = 0.1
    delay_s: float = 0.02
    #: Between two words of a streamed answer.
    stream_every_s: float = 0.0
    calls: list[Call] = field(default_factory=list)
    #: The status of each call in turn, instead of the seed's random sequence.
    statuses: Iterator[int] | None = None

    def __post_init__(self) -> None:
        self._statuses = self.statuses or fault_statuses(
            self.seed,
            server_error_share=self.server_error_share,
            rate_limit_share=self.rate_limit_share,
        )
        self.app = Starlette(
            routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])]
        )

    def status_counts(self) -> Counter[int]:
        return Counter(call.status for call in self.calls)

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        # Drawn before any await, so the sequence follows the order the calls arrived in.
        status = next(self._statuses)
        messages = list(body.get("messages", []))
        self.calls.append(
            Call(
                status=status,
                api_key=request.headers.get("authorization", "").removeprefix("Bearer "),
                model=str(body.get("model", "")),
                messages=messages,
            )
        )
        if status == 500:
            error = {"message": "injected fault: the server had an error", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=500)
        if status == 429:
            error = {
                "message": "injected fault: rate limit reached",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
            return JSONResponse({"error": error}, status_code=429, headers={"retry-after": "0"})
        await asyncio.sleep(self.delay_s)
        last_assistant = max(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1
        )
        text = "\n".join(
            _text(m.get("content"))
            for m in messages[last_assistant + 1 :]
            if m.get("role") == "user"
        )
        prompt_tokens = sum(len(_text(m.get("content")).split()) for m in messages)
        completion_tokens = len(text.split())
        if body.get("stream"):
            usage = (prompt_tokens, completion_tokens)
            chunks = self._chunks(text, str(body.get("model", "")), usage)
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(
            {
                "id": f"chatcmpl-fault-{len(self.calls)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

    async def _chunks(self, text: str, model: str, usage: tuple[int, int]) -> AsyncIterator[bytes]:
        """The answer as Chat Completions streams it: a role chunk, a chunk per word, the
        finish reason, the usage, ``[DONE]``."""
        base = {
            "id": f"chatcmpl-stream-{len(self.calls)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

        def frame(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode()

        def delta(content: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": content, "logprobs": None, "finish_reason": finish}]

        yield frame(delta({"role": "assistant", "content": ""}))
        for word in re.findall(r"\s*\S+", text):
            await asyncio.sleep(self.stream_every_s)
            yield frame(delta({"content": word}))
        yield frame(delta({}, "stop"))
        prompt, completion = usage
        counts = {"prompt_tokens": prompt, "completion_tokens": completion}
        yield frame([], usage={**counts, "total_tokens": prompt + completion})
        yield b"data: [DONE]\n\n"


@contextlib.asynccontextmanager
async def serve_app(app: Starlette) -> AsyncIterator[str]:
    """Serve *app* on a free 127.0.0.1 port in this event loop; yield its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=1,
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-openai")
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the fake OpenAI API stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
