"""The loop guard (PIPELINE §1 item 7): the bot's own echoes (``is_from_me``) are stored and never
routed, and a chat fires at most ``[limits] turns_per_minute`` turns in any 60 s — so an outbound
webhook that posts every answer back as a new message cannot loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.engine.bootstrap import bootstrap

from gateway_support import new_data_dir, serving
from support import eventually, queue_idle

CHAT = "api:room/loop"
LIMIT = 5


@contextlib.asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, timeout_graceful_shutdown=1, log_config=None)
    )
    task = asyncio.create_task(server.serve(), name="echo-back-receiver")
    try:
        await eventually(lambda: server.started or task.done(), "the receiver to start")
        if task.done():
            task.result()
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


class EchoBack:
    """An outbound webhook that posts every delivery back to the gateway as a new message from
    another bot (no ``is_from_me``): the bot loop of the issue."""

    def __init__(self) -> None:
        self.gateway_url = ""
        self.received: list[dict[str, Any]] = []
        self.reposts: set[asyncio.Task[None]] = set()
        self.app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

    async def _hook(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.received.append(body)
        task = asyncio.create_task(self._post_back(body))
        self.reposts.add(task)
        task.add_done_callback(self.reposts.discard)
        return JSONResponse({"ok": True})

    async def _post_back(self, body: dict[str, Any]) -> None:
        async with httpx.AsyncClient(base_url=self.gateway_url) as http:
            response = await http.post(
                "/api/v1/messages",
                json={
                    "id": f"back-{body['id']}-{body['chunk']}",
                    "chat_jid": body["chat_jid"],
                    "sender": "api:user/other-bot",
                    "content": body["content"],
                },
            )
            response.raise_for_status()


@pytest.fixture
async def gateway_and_sink(tmp_path: Path) -> AsyncIterator[tuple[Gateway, str, EchoBack]]:
    sink = EchoBack()
    async with served(sink.app) as receiver:
        config = Config.model_validate(
            {
                "limits": {"turns_per_minute": LIMIT},
                "channels": {"http": {"api": {"outbound_url": f"{receiver}/hook"}}},
            }
        )
        gateway = await Gateway.build(await new_data_dir(tmp_path / "data"), config)
        await bootstrap(gateway.services, actor="test")
        async with serving(gateway) as url:
            sink.gateway_url = url
            yield gateway, url, sink


async def _messages(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await http.get("/api/v1/messages", params={"chat_jid": CHAT, "limit": 1000})
    return list(response.json()["messages"])


async def test_an_answer_posted_back_does_not_loop(
    gateway_and_sink: tuple[Gateway, str, EchoBack],
) -> None:
    gateway, url, sink = gateway_and_sink
    async with httpx.AsyncClient(base_url=url) as http:
        first = await http.post(
            "/api/v1/messages",
            json={"chat_jid": CHAT, "sender": "api:user/alice", "content": "ping"},
        )
        assert first.json()["decision"]["action"] == "fire"

        async def settled() -> bool:
            limited = [m for m in await _messages(http) if m["metadata"].get("rate_limited")]
            return bool(limited) and not sink.reposts and await queue_idle(gateway.services)

        await eventually(settled, "the loop to be cut by the turn limit")
        rows = await _messages(http)
        jobs = (await http.get("/api/v1/jobs")).json()["jobs"]

    assert len([j for j in jobs if j["chat_jid"] == CHAT]) == LIMIT
    answers = [m for m in rows if m["message_type"] == "assistant"]
    assert len(answers) == LIMIT
    limited = [m for m in rows if m["metadata"].get("rate_limited")]
    assert limited and all(m["observed"] and m["routed_to"] == "main" for m in limited)
    notices = [m for m in rows if "rate limited" in m["content"] and m["message_type"] == "host"]
    assert len(notices) == 1, notices


async def test_the_limit_is_a_decision_layer_explain_shows(
    gateway_and_sink: tuple[Gateway, str, EchoBack],
) -> None:
    _, url, _ = gateway_and_sink
    # A platform without an outbound webhook: answers go to the event stream only.
    body = {"chat_jid": "feed:room/explain", "sender": "feed:user/bob", "content": "hi"}
    async with httpx.AsyncClient(base_url=url) as http:
        before = (await http.post("/api/v1/routes/explain", json=body)).json()
        assert (before["action"], before["layer"]) == ("fire", "route")
        for n in range(LIMIT):
            fired = await http.post("/api/v1/messages", json={**body, "id": f"m{n}"})
            assert fired.json()["decision"]["action"] == "fire"
        after = (await http.post("/api/v1/routes/explain", json=body)).json()
    assert (after["action"], after["layer"], after["folder"]) == ("observe", "limit", "main")
    assert "turns_per_minute" in after["reason"], after


async def test_the_bots_own_echo_is_stored_and_never_routed(
    gateway_and_sink: tuple[Gateway, str, EchoBack],
) -> None:
    gateway, url, sink = gateway_and_sink
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post(
            "/api/v1/messages",
            json={
                "id": "echo-1",
                "chat_jid": CHAT,
                "sender": "api:user/me",
                "content": "@Postroom an answer of mine, echoed back",
                "is_from_me": True,
            },
        )
        assert response.status_code == 200, response.text
        result = response.json()
        assert isinstance(result["seq"], int)
        decision = result["decision"]
        assert (decision["action"], decision["layer"], decision["job_id"]) == (
            "ignore",
            "own",
            None,
        )
        assert "is_from_me" in decision["reason"]
        await eventually(lambda: queue_idle(gateway.services), "the queue to be idle")
        [stored] = [m for m in await _messages(http) if m["id"] == "echo-1"]
        assert stored["routed_to"] is None
        jobs = (await http.get("/api/v1/jobs")).json()["jobs"]
        strict = await http.post(
            "/api/v1/messages",
            json={"chat_jid": CHAT, "sender": "api:user/me", "content": "x", "is_from_me": "yes"},
        )
    assert jobs == [] and sink.received == []
    assert strict.status_code == 400
