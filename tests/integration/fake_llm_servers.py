"""A scripted HTTP server for model-provider tests: it records every request and answers each
with the next scripted reply (a JSON body, an SSE stream or NDJSON lines), speaking the wire
format the real SDK expects. Served by uvicorn on a free loopback port in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from postroom.core.messages import MessageType, StoredMessage

__all__ = [
    "HIDDEN_CONTENT",
    "FakeServer",
    "Recorded",
    "Reply",
    "closed_port_url",
    "history_with_hidden_rows",
    "json_reply",
    "ndjson_reply",
    "serve_fake",
    "sse_reply",
]


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    media_type: str
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Hold the answer back this long (for timeouts).
    delay_s: float = 0.0
    #: Send the body a frame at a time (frames end with a blank line), this long apart: a
    #: stream that trickles (for deadlines).
    trickle_s: float = 0.0


def json_reply(
    body: Any,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    delay_s: float = 0.0,
) -> Reply:
    return Reply(
        status, json.dumps(body).encode(), "application/json", dict(headers or {}), delay_s
    )


def sse_reply(chunks: Sequence[Any]) -> Reply:
    """Server-sent events as Gemini streams them: one ``data:`` line per JSON chunk."""
    text = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks)
    return Reply(200, text.encode(), "text/event-stream")


def ndjson_reply(lines: Sequence[Any]) -> Reply:
    """Newline-delimited JSON as Ollama streams it."""
    text = "".join(json.dumps(line) + "\n" for line in lines)
    return Reply(200, text.encode(), "application/x-ndjson")


@dataclass
class FakeServer:
    """Records requests; answers each with the next scripted reply (404 when none is left)."""

    base_url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def bodies(self) -> list[Any]:
        return [r.json for r in self.requests]

    def wire_text(self) -> str:
        """Everything the fake received (paths, queries and bodies), for "never sent" checks."""
        return "\n".join(
            f"{r.method} {r.path}?{r.query}\n{r.raw.decode(errors='replace')}"
            for r in self.requests
        )

    async def endpoint(self, request: Request) -> Response:
        raw = await request.body()
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers=dict(request.headers),
                raw=raw,
            )
        )
        if not self.replies:
            return Response(b'{"error": "no reply scripted"}', status_code=404)
        reply = self.replies.pop(0)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.trickle_s:
            return StreamingResponse(
                _trickle(reply.body, reply.trickle_s),
                status_code=reply.status,
                media_type=reply.media_type,
                headers=dict(reply.headers),
            )
        return Response(
            reply.body,
            status_code=reply.status,
            media_type=reply.media_type,
            headers=dict(reply.headers),
        )


async def _trickle(body: bytes, pause_s: float) -> AsyncIterator[bytes]:
    for frame in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        if frame.strip():
            yield frame + b"\n\n"
            await asyncio.sleep(pause_s)


@contextlib.asynccontextmanager
async def serve_fake() -> AsyncIterator[FakeServer]:
    """A :class:`FakeServer` listening on a free loopback port for the ``async with`` block."""
    fake = FakeServer()
    app = Starlette(
        routes=[Route("/{path:path}", fake.endpoint, methods=["GET", "POST", "DELETE"])]
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve(), name="fake-llm-server")
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("the fake server stopped before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        fake.base_url = f"http://127.0.0.1:{port}"
        yield fake
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


#: Text of stored rows that must never reach a model: host notes and traces.
HIDDEN_CONTENT = ("HOST-NOTE-7731", "TRACE-THINKING-5512", "TRACE-TOOL-USE-0042", "CMD-ROW-9090")


def history_with_hidden_rows() -> list[StoredMessage]:
    """A stored conversation with a user, an answer, a system row and a command output mixed
    with ``host`` and ``trace`` rows and a command (whose texts are :data:`HIDDEN_CONTENT`)."""
    rows: list[tuple[str, MessageType, str, dict[str, Any]]] = [
        ("telegram:user/42", MessageType.USER, "hello there", {}),
        ("host", MessageType.HOST, f"{HIDDEN_CONTENT[0]} restarted", {}),
        ("thinking", MessageType.TRACE, f"{HIDDEN_CONTENT[1]} hmm", {}),
        ("bot", MessageType.ASSISTANT, "hi, how can I help?", {}),
        ("tool_use", MessageType.TRACE, f"{HIDDEN_CONTENT[2]} memory_save", {}),
        ("system", MessageType.SYSTEM, "the deploy finished", {}),
        ("telegram:user/42", MessageType.USER, f"/{HIDDEN_CONTENT[3]}", {"command": True}),
        ("command_output", MessageType.TOOL_RESULT, "3 files", {"exit_code": 0}),
        ("telegram:user/42", MessageType.USER, "thanks", {}),
    ]
    return [
        StoredMessage(
            id=f"m{seq}",
            chat_jid="telegram:user/42",
            seq=seq,
            sender=sender,
            sender_name=sender.rpartition("/")[2],
            content=content,
            timestamp=datetime(2026, 1, 5, 12, seq, tzinfo=UTC),
            is_from_me=kind is not MessageType.USER,
            message_type=kind,
            metadata=metadata,
        )
        for seq, (sender, kind, content, metadata) in enumerate(rows, start=1)
    ]
