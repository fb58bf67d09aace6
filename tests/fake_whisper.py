"""A local OpenAI-compatible ``/v1/audio/transcriptions`` server for the voice-note tests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["FakeWhisper", "serving"]


@dataclasses.dataclass
class FakeWhisper:
    """Records each multipart upload; answers with ``text`` or a status."""

    text: str = "meet me at noon"
    status: int = 200
    bodies: list[bytes] = dataclasses.field(default_factory=list)
    auth: list[str] = dataclasses.field(default_factory=list)

    async def transcriptions(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        self.auth.append(request.headers.get("authorization", ""))
        if self.status != 200:
            return JSONResponse({"error": {"message": "busy"}}, status_code=self.status)
        return JSONResponse({"text": f"  {self.text}\n"})


@contextlib.asynccontextmanager
async def serving(fake: FakeWhisper) -> AsyncIterator[str]:
    """Serve *fake* on a free loopback port; yield its ``/v1`` base URL."""
    app = Starlette(
        routes=[Route("/v1/audio/transcriptions", fake.transcriptions, methods=["POST"])]
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no "started" event
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task
