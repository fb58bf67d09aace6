"""What the web chat's socket sends an anonymous visitor and an operator (MESSAGES §5, §6).

A visitor is a customer: they get what a platform chat shows — their messages, the answers,
command outputs and the notices meant for their chat (acks, command answers, "could not
answer", "trying again") — and never traces, run details (model, tokens, cost), folder names
beyond the acks, or the operator's set-up hint. The operator view gets everything. The filter
is the server's: these tests read the frames a real ``postroom serve`` writes to each socket,
through the ``websockets`` client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from e2e_harness import ServerProcess
from fake_openai import FlakyChatCompletions, serve_app, serve_env

StartServer = Callable[..., ServerProcess]
WAIT_S = 20.0


@dataclass
class Page:
    """One chat socket, read in the background: every frame it was sent, in order."""

    socket: ClientConnection
    frames: list[dict[str, Any]] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.socket:
                self.frames.append(json.loads(raw))

    async def until(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_S):
            while True:
                for frame in self.frames:
                    if predicate(frame):
                        return frame
                await asyncio.sleep(0.02)
        raise AssertionError(what)  # pragma: no cover - the timeout raises first

    async def send(self, text: str) -> dict[str, Any]:
        client_id = f"c{len(self.frames)}"
        await self.socket.send(json.dumps({"type": "send", "client_id": client_id, "text": text}))
        return await self.until(
            lambda f: f.get("type") == "accepted" and f.get("client_id") == client_id, "accepted"
        )

    def messages(self, chat_jid: str | None = None) -> list[dict[str, Any]]:
        found = [f["message"] for f in self.frames if f.get("type") == "message"]
        for frame in self.frames:
            if frame.get("type") == "history":
                found = list(frame["messages"]) + found
        return [m for m in found if chat_jid is None or m["chat_jid"] == chat_jid]

    def typing(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == "typing"]

    @property
    def chat_jid(self) -> str:
        return str(self.frames[0]["chat_jid"])


@contextlib.asynccontextmanager
async def page(
    server: ServerProcess, *, token: str | None = None, cookie: str | None = None
) -> AsyncIterator[Page]:
    url = server.url.replace("http://", "ws://") + "/ws/chat/main"
    if token:  # the operator: a session signed in on the dashboard, never a token in the URL
        cookie = await session_cookie(server, token)
    headers: Mapping[str, str] = {"Cookie": cookie} if cookie else {}
    async with connect(url, additional_headers=headers, proxy=None) as socket:
        opened = Page(socket)
        opened.reader = asyncio.create_task(opened._read(), name="chat-socket-reader")
        await opened.until(lambda f: f.get("type") == "history", "the history")
        try:
            yield opened
        finally:
            await socket.close()
            await opened.reader


async def session_cookie(server: ServerProcess, token: str) -> str:
    """Sign in on the dashboard's form; the session cookie it sets."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        answer = await client.post("/dashboard/login", data={"token": token})
    assert answer.status_code == 303, answer.text
    return f"postroom_session={answer.cookies['postroom_session']}"


def visitor_cookie(socket: ClientConnection) -> str:
    response = socket.response
    assert response is not None
    raw = response.headers.get("set-cookie", "")
    return raw.split(";", 1)[0]


def internals(message: Mapping[str, Any]) -> list[str]:
    """What a visitor must never see in one message: the reasons it would be an operator's."""
    found = []
    if message["message_type"] in ("trace", "system"):
        found.append(f"a {message['message_type']} row")
    if message.get("routed_to") or message.get("run_id"):
        found.append("its folder or run")
    metadata = message.get("metadata") or {}
    for key in ("usage", "cost", "job_id", "source", "model"):
        if key in metadata:
            found.append(f"metadata.{key}")
    if "ANTHROPIC_API_KEY" in str(message.get("content")):
        found.append("the set-up hint")
    return found


@pytest.mark.timeout(120)
async def test_a_visitor_sees_what_a_platform_chat_shows_and_the_operator_everything(
    start_server: StartServer,
) -> None:
    # The echo provider (no model configured): the set-up hint exists, for the operator.
    server = await asyncio.to_thread(start_server, {"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "300"})
    async with page(server, token=server.token) as operator, page(server) as visitor:
        assert visitor.frames[0]["operator"] is False
        accepted = await visitor.send("hello there")
        # Where the message went, and why, is not the visitor's business.
        assert accepted["decision"] == {"action": "fire", "layer": "route"}
        chat = visitor.chat_jid
        await visitor.until(
            lambda f: f.get("type") == "message" and f["message"]["message_type"] == "assistant",
            "the answer",
        )
        ack = await visitor.send("#support")
        assert ack["decision"]["action"] == "command"
        await visitor.until(
            lambda f: f.get("type") == "message" and f["message"]["content"] == "topic → support",
            "the ack",
        )
        await operator.until(
            lambda f: f.get("type") == "message" and f["message"]["content"] == "topic → support",
            "the ack in the operator view",
        )

        seen = visitor.messages()
        assert [(m["message_type"], m["content"]) for m in seen] == [
            ("user", "hello there"),
            ("assistant", "hello there"),
            ("user", "#support"),
            ("host", "topic → support"),
        ]
        assert {m["chat_jid"] for m in seen} == {chat}
        assert {m["id"]: internals(m) for m in seen} == {m["id"]: [] for m in seen}
        assert seen[2]["metadata"] == {"command": True}  # shown as a command
        assert seen[3]["metadata"] == {}
        # Typing, without the folder.
        typing = visitor.typing()
        assert typing and all(set(f) == {"type", "chat_jid", "active"} for f in typing), typing
        assert typing[-1]["active"] is False

        # The operator view of the same chat keeps everything.
        mine = operator.messages(chat)
        kinds = [m["message_type"] for m in mine]
        assert "trace" in kinds, kinds  # the run's metadata row (model, tokens...)
        (answer,) = [m for m in mine if m["message_type"] == "assistant"]
        assert answer["routed_to"] == "main" and answer["run_id"] is not None
        assert "usage" in answer["metadata"]
        hints = [m for m in operator.messages() if m["id"] == "setup-hint"]
        assert hints and "ANTHROPIC_API_KEY" in hints[0]["content"]
        assert any(f.get("folder") == "main" for f in operator.typing())
        cookie = visitor_cookie(visitor.socket)

    # Opened again, the visitor's history is filtered the same way.
    async with page(server, cookie=cookie) as again:
        assert again.chat_jid == chat
        history = again.messages()
        assert [(m["message_type"], m["content"]) for m in history] == [
            (m["message_type"], m["content"]) for m in seen
        ]
        assert all(internals(m) == [] for m in history)


@pytest.mark.timeout(120)
async def test_when_the_model_is_down_a_visitor_sees_typing_stop_and_when_it_tries_again(
    start_server: StartServer,
) -> None:
    fake = FlakyChatCompletions(seed=7, server_error_share=1.0, rate_limit_share=0.0)
    async with serve_app(fake.app) as url:
        server = await asyncio.to_thread(start_server, serve_env(url, model="gpt-down"))
        async with page(server) as visitor:
            await visitor.send("are you there?")
            notice = await visitor.until(
                lambda f: f.get("type") == "message" and f["message"]["message_type"] == "host",
                "a notice",
            )
            # backoff_base (1m) × 2^1: the real wait before the second attempt.
            assert notice["message"]["content"] == "⚠️ trying again in 2 minutes"
            assert notice["message"]["metadata"] == {}
            await visitor.until(
                lambda f: f.get("type") == "typing" and f["active"] is False, "typing to stop"
            )
            states = [f["active"] for f in visitor.typing()]
            assert states[0] is True and states[-1] is False, states
            assert len(fake.calls) >= 1 and {c.status for c in fake.calls} == {500}
