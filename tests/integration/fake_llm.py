"""A fake model API for provider tests: a Starlette app that records every request and answers
each path with the replies queued for it (JSON, or a stream of server-sent events), served by
uvicorn on a free loopback port in the test's event loop. The real SDKs talk to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeLLM", "Received", "Reply", "data_frame", "event_frame", "serve"]


@dataclass(frozen=True)
class Received:
    """One request as the fake saw it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    """One answer with ``status`` and ``headers``: a JSON ``body``; or, when ``frames`` is set, a
    ``text/event-stream`` of those frames; or, when ``text`` is set, that plain text.
    ``delay_s`` holds the answer back (for timeouts); ``hold``, until the test sets it;
    ``break_after`` drops the connection after that many frames (a stream cut short)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    frames: list[str] | None = None
    text: str | None = None
    delay_s: float = 0.0
    hold: asyncio.Event | None = None
    break_after: int | None = None


def event_frame(event: str, data: Any) -> str:
    """A named server-sent event (Anthropic's shape: ``event:`` then ``data:``)."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def data_frame(data: Any) -> str:
    """An unnamed server-sent event (OpenAI's shape: ``data:`` only; ``[DONE]`` as given)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"data: {payload}\n\n"


class _StreamBroken(Exception):
    """Raised inside a streaming answer so that uvicorn drops the connection mid-body."""


class FakeLLM:
    """Records requests in :attr:`received`; answers from the replies queued with :meth:`answer`
    (a path with nothing queued gets a 500 naming it, so a test fails loudly)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._replies: dict[str, list[Reply]] = {}
        self.closing = asyncio.Event()
        self.app = Starlette(
            routes=[Route("/{path:path}", self._endpoint, methods=["GET", "POST"])]
        )

    def answer(self, path: str, *replies: Reply) -> None:
        self._replies.setdefault(path, []).extend(replies)

    def reset(self) -> None:
        """Forget what was received and queued (a server shared by several tests)."""
        self.received.clear()
        self._replies.clear()

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies received on *path*, in order."""
        return [r.json() for r in self.received if r.path == path]

    async def _endpoint(self, request: Request) -> Response:
        self.received.append(
            Received(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers=dict(request.headers),
                body=await request.body(),
            )
        )
        queued = self._replies.get(request.url.path)
        if not queued:
            return JSONResponse({"error": f"no reply queued for {request.url.path}"}, 500)
        reply = queued.pop(0)
        if reply.hold is not None:
            await reply.hold.wait()
        if reply.delay_s:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), reply.delay_s)
        if reply.text is not None:
            return PlainTextResponse(reply.text, reply.status, headers=reply.headers)
        if reply.frames is None:
            return JSONResponse(reply.body, reply.status, headers=reply.headers)
        return StreamingResponse(
            _frames(reply.frames, reply.break_after),
            status_code=reply.status,
            headers=reply.headers,
            media_type="text/event-stream",
        )


async def _frames(frames: list[str], break_after: int | None) -> AsyncIterator[bytes]:
    for index, frame in enumerate(frames):
        if break_after is not None and index == break_after:
            raise _StreamBroken
        yield frame.encode()
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def serve(fake: FakeLLM) -> AsyncIterator[str]:
    """Serve *fake* on a free 127.0.0.1 port; yield its base URL (``http://127.0.0.1:<port>``)."""
    server = uvicorn.Server(
        uvicorn.Config(
            fake.app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-llm")
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the fake model API stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        fake.closing.set()
        server.should_exit = True
        await task
