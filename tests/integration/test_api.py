"""The HTTP API (INTERFACES §4), driven in-process through the gateway's real ASGI app.

Every test gets its own data directory made by ``postroom init`` and a gateway built by
``Gateway.build`` over it. Requests go through ``httpx.ASGITransport`` (an unhandled exception
in the app surfaces as an exception here, so "never 500" is checked on every request); the
event stream is read over a real socket from a uvicorn server running in the test's loop.
Background parts (workers, delivery, the live feed) run only in the tests that need them, so
queued jobs stay queued everywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import reprlib
import shutil
import socket
import sys
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
import uvicorn
from typer.testing import CliRunner

from postroom.app.gateway import Gateway, check_bind
from postroom.cli.main import app as cli_app
from postroom.config import load_config
from postroom.core.errors import ConfigError
from postroom.logs import configure_logging

DECISION_KEYS = {
    "action",
    "layer",
    "folder",
    "topic",
    "content",
    "inline",
    "route_id",
    "ack",
    "job_id",
    "reason",
}
INGEST_KEYS = {"id", "chat_jid", "seq", "duplicate", "decision"}
MESSAGE_KEYS = {
    "id",
    "chat_jid",
    "seq",
    "sender",
    "sender_name",
    "content",
    "timestamp",
    "message_type",
    "verb",
    "topic",
    "reply_to",
    "routed_to",
    "observed",
    "run_id",
    "metadata",
}
ROUTE_KEYS = {
    "id",
    "seq",
    "match",
    "target",
    "mode",
    "fires_on",
    "shadowed_by",
    "created_at",
    "created_by",
}
FOLDER_KEYS = {
    "path",
    "persona",
    "provider",
    "model",
    "engagement_ttl",
    "session",
    "role",
    "parent",
    "created_at",
}
TASK_KEYS = {
    "id",
    "folder",
    "chat_jid",
    "schedule",
    "tz",
    "prompt",
    "enabled",
    "next_run",
    "last_run",
    "last_status",
}
JOB_KEYS = {
    "id",
    "conversation_id",
    "folder",
    "chat_jid",
    "topic",
    "priority",
    "status",
    "attempts",
    "max_attempts",
    "run_at",
    "last_error",
    "created_at",
    "started_at",
    "finished_at",
    "message_ids",
}
RUN_KEYS = {
    "id",
    "job_id",
    "folder",
    "provider",
    "model",
    "account",
    "system",
    "messages",
    "tools",
    "output_raw",
    "output",
    "usage",
    "cost",
    "duration_ms",
    "outcome",
    "error",
}
DROP_KEYS = {"id", "chat_jid", "sender", "verb", "reason", "time"}

CONTENT_LIMIT = 65536
BODY_LIMIT = 1048576
CHAT = "web:main/anon-1"
SENDER = "web:anon/1"
WAIT_S = 10.0

runner = CliRunner()


# --------------------------------------------------------------------------- helpers


def _clean_env() -> dict[str, str | None]:
    """Unset every configuration variable of the calling environment (CI may set some)."""
    vendor = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
    return {name: None for name in os.environ if name.startswith("POSTROOM_") or name in vendor}


def body(content: str = "hello", **fields: Any) -> dict[str, Any]:
    """A valid ``POST /api/v1/messages`` body."""
    return {"chat_jid": CHAT, "sender": SENDER, "content": content} | fields


def assert_error(response: httpx.Response, status: int) -> str:
    """An error answer is ``{"error": "<one sentence>"}`` with *status*; returns the sentence."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    payload = response.json()
    assert isinstance(payload, dict)
    assert set(payload) == {"error"}, payload
    sentence = payload["error"]
    assert isinstance(sentence, str)
    assert sentence.strip()
    assert "\n" not in sentence.strip()
    assert "Traceback" not in sentence
    return sentence


async def eventually(check: Callable[[], Awaitable[Any]], *, what: str = "condition") -> Any:
    """Poll *check* until it returns something truthy (within ``WAIT_S``); return it."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def each(cases: Iterable[Any], check: Callable[[Any], Awaitable[None]]) -> None:
    """Run *check* on every case and report every failing case at once."""
    failures: list[str] = []
    for case in cases:
        try:
            await check(case)
        except AssertionError as exc:
            failures.append(f"{reprlib.repr(case)}: {exc}")
    assert not failures, "\n".join(failures)


@dataclass
class Api:
    gateway: Gateway
    client: httpx.AsyncClient  # carries the right bearer token
    token: str
    data_dir: Path

    def raw(self, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        """A client with the given headers only (no token unless given)."""
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.gateway.http),
            base_url="http://test",
            headers=headers,
        )

    async def post_message(self, **fields: Any) -> dict[str, Any]:
        response = await self.client.post("/api/v1/messages", json=body(**fields))
        assert response.status_code == 200, response.text
        result = response.json()
        assert set(result) == INGEST_KEYS, result
        assert set(result["decision"]) == DECISION_KEYS, result
        return result  # type: ignore[no-any-return]

    async def get(self, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
        response = await self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        payload = response.json()
        assert set(payload) == {key}, payload
        assert isinstance(payload[key], list)
        return payload[key]  # type: ignore[no-any-return]

    async def messages(self, **params: Any) -> list[dict[str, Any]]:
        return await self.get("/api/v1/messages", "messages", **params)

    async def routes(self) -> list[dict[str, Any]]:
        return await self.get("/api/v1/routes", "routes")

    async def folders(self) -> list[dict[str, Any]]:
        return await self.get("/api/v1/folders", "folders")

    async def jobs(self, **params: Any) -> list[dict[str, Any]]:
        return await self.get("/api/v1/jobs", "jobs", **params)

    async def tasks(self) -> list[dict[str, Any]]:
        return await self.get("/api/v1/tasks", "tasks")

    async def drops(self) -> list[dict[str, Any]]:
        return await self.get("/api/v1/drops", "drops")

    async def snapshot(self) -> dict[str, Any]:
        """Everything a refused request must leave alone."""
        return {
            "messages": await self.messages(limit=1000),
            "routes": await self.routes(),
            "folders": await self.folders(),
            "jobs": await self.jobs(limit=1000),
            "tasks": await self.tasks(),
            "drops": await self.drops(),
        }


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI points logging at the stream ``CliRunner`` lends it, which is closed once the
    command ends (and another test may have left it so); restore the previous set-up after."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture(scope="module")
def initialized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory made by ``postroom init``, copied for every test (init is slow-ish)."""
    directory = tmp_path_factory.mktemp("template") / "d"
    with logging_kept():
        result = runner.invoke(cli_app, ["--data", str(directory), "init"], env=_clean_env())
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return directory


@pytest.fixture
def data_dir(initialized: Path, tmp_path: Path) -> Path:
    """A fresh copy of the ``postroom init`` directory: folder main, route ``9999 "" → main``."""
    directory = tmp_path / "d"
    shutil.copytree(initialized, directory)
    return directory


@pytest.fixture
async def api(data_dir: Path) -> AsyncIterator[Api]:
    """The gateway over *data_dir* with nothing running in the background."""
    token = tomllib.loads((data_dir / "postroom.toml").read_text("utf-8"))["api"]["token"]
    assert token
    with logging_kept():
        configure_logging(level="warning", stream=sys.stderr)
        gateway = await Gateway.build(data_dir, load_config(data_dir, {}))
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=gateway.http),
                base_url="http://test",
                headers={"Authorization": f"Bearer {token}"},
            ) as client:
                yield Api(gateway=gateway, client=client, token=token, data_dir=data_dir)
        finally:
            await gateway.close()


@pytest.fixture
async def workers(api: Api) -> AsyncIterator[Api]:
    """The turn workers and the delivery loop running (the echo provider answers)."""
    await api.gateway.workers.start()
    delivery = asyncio.create_task(api.gateway.delivery.run(), name="test-delivery")
    try:
        yield api
    finally:
        await api.gateway.workers.stop()
        api.gateway.delivery.stop()
        await asyncio.wait_for(delivery, WAIT_S)


@dataclass
class Served:
    api: Api
    base_url: str


@pytest.fixture
async def served(api: Api) -> AsyncIterator[Served]:
    """The live feed running and the app served by uvicorn on a free loopback port."""
    gateway = api.gateway
    await gateway.feed.start_at_end()
    feed = asyncio.create_task(gateway.feed.run(), name="test-feed")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            gateway.http,
            host="127.0.0.1",
            port=0,
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
            log_config=None,
            lifespan="off",
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="test-http")
    try:
        await eventually(_started(server, serving), what="uvicorn to start")
        yield Served(api=api, base_url=f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, WAIT_S)
        gateway.feed.stop()
        await asyncio.wait_for(feed, WAIT_S)
        sock.close()


def _started(server: uvicorn.Server, serving: asyncio.Task[None]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        if serving.done():
            serving.result()  # raise the start-up error
            raise AssertionError("uvicorn stopped at start")
        return server.started

    return check


# --------------------------------------------------------------------------- auth

GUARDED = [
    ("GET", "/api/v1/messages", None),
    ("POST", "/api/v1/messages", body()),
    ("GET", "/api/v1/events", None),
    ("GET", "/api/v1/routes", None),
    ("POST", "/api/v1/routes", {"seq": 0, "match": "platform=web", "target": "main"}),
    ("PUT", "/api/v1/routes", []),
    ("DELETE", "/api/v1/routes/1", None),
    ("POST", "/api/v1/routes/explain", body()),
    ("GET", "/api/v1/folders", None),
    ("POST", "/api/v1/folders", {"path": "atlas"}),
    ("DELETE", "/api/v1/folders/main", None),
    ("GET", "/api/v1/tasks", None),
    (
        "POST",
        "/api/v1/tasks",
        {"folder": "main", "chat_jid": CHAT, "schedule": "every 5m", "prompt": "hi"},
    ),
    ("POST", "/api/v1/tasks/1/pause", None),
    ("POST", "/api/v1/tasks/1/resume", None),
    ("DELETE", "/api/v1/tasks/1", None),
    ("GET", "/api/v1/jobs", None),
    ("POST", "/api/v1/jobs/1/retry", None),
    ("POST", "/api/v1/jobs/1/cancel", None),
    ("GET", "/api/v1/runs/1", None),
    ("GET", "/api/v1/drops", None),
    ("GET", "/metrics", None),
]


BAD_AUTH: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer not-the-token"},
    {"Authorization": "Bearer "},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"X-Api-Token": "not-a-bearer-header"},
]


async def test_every_endpoint_refuses_a_missing_or_wrong_token(api: Api) -> None:
    before = await api.snapshot()

    async def refused(headers: dict[str, str]) -> None:
        async with api.raw(headers) as client:
            for method, path, payload in GUARDED:
                response = await client.request(method, path, json=payload)
                assert response.status_code == 401, (method, path, response.status_code)
                assert_error(response, 401)
            # The right token in the query string is no token either.
            assert_error(await client.get("/api/v1/routes", params={"token": api.token}), 401)

    await each(BAD_AUTH, refused)
    async with api.raw({"X-Api-Token": api.token}) as client:
        assert_error(await client.get("/api/v1/routes"), 401)
    assert await api.snapshot() == before, "a refused request changed something"


async def test_a_wrong_token_that_shares_a_prefix_is_refused(api: Api) -> None:
    async with api.raw({"Authorization": f"Bearer {api.token[:-1]}"}) as client:
        assert_error(await client.get("/api/v1/routes"), 401)
    async with api.raw({"Authorization": f"Bearer {api.token}x"}) as client:
        assert_error(await client.get("/api/v1/routes"), 401)


async def test_health_and_the_web_chat_page_need_no_token(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        async with api.raw(headers) as client:
            health = await client.get("/healthz")
            assert health.status_code == 200
            assert health.json()["status"] == "ok"
            page = await client.get("/")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            assert "<html" in page.text.lower()


async def test_the_right_token_opens_the_api_and_metrics(api: Api) -> None:
    assert [r["target"] for r in await api.routes()] == ["main"]
    metrics = await api.client.get("/metrics")
    assert metrics.status_code == 200
    async with api.raw({"Authorization": f"bearer {api.token}"}) as client:
        # The scheme is case-insensitive (RFC 7235).
        assert (await client.get("/api/v1/folders")).status_code == 200


# --------------------------------------------------------------------------- POST /messages


async def test_post_message_stores_routes_and_enqueues(api: Api) -> None:
    result = await api.post_message(content="hello there", sender_name="Ann")
    assert isinstance(result["id"], str) and result["id"]
    assert result["chat_jid"] == CHAT
    assert isinstance(result["seq"], int)
    assert result["duplicate"] is False
    decision = result["decision"]
    assert decision["action"] == "fire"
    assert decision["layer"] == "route"
    assert decision["folder"] == "main"
    assert decision["content"] == "hello there"
    assert isinstance(decision["route_id"], int)
    assert isinstance(decision["job_id"], int) and not isinstance(decision["job_id"], bool)
    assert isinstance(decision["reason"], str) and decision["reason"]

    stored = await api.messages(chat_jid=CHAT)
    assert len(stored) == 1
    message = stored[0]
    assert set(message) >= MESSAGE_KEYS
    assert message["id"] == result["id"]
    assert message["seq"] == result["seq"]
    assert message["sender"] == SENDER
    assert message["sender_name"] == "Ann"
    assert message["content"] == "hello there"
    assert message["message_type"] == "user"
    assert message["routed_to"] == "main"
    assert isinstance(message["metadata"], dict)

    jobs = await api.jobs()
    assert [(j["id"], j["status"], j["message_ids"]) for j in jobs] == [
        (decision["job_id"], "queued", [result["id"]])
    ]


async def test_the_client_id_is_kept(api: Api) -> None:
    result = await api.post_message(id="platform-77", timestamp="2026-01-05T12:00:00Z")
    assert result["id"] == "platform-77"
    (message,) = await api.messages(chat_jid=CHAT)
    assert message["id"] == "platform-77"
    assert message["timestamp"].startswith("2026-01-05T12:00:00")


async def test_the_same_id_and_chat_twice_is_a_duplicate(api: Api) -> None:
    first = await api.post_message(id="dup-1", content="once")
    before = await api.snapshot()

    again = await api.post_message(id="dup-1", content="once")
    changed = await api.post_message(id="dup-1", content="a different text, same id")

    for repeat in (again, changed):
        assert repeat["duplicate"] is True
        assert repeat["id"] == "dup-1"
        assert repeat["seq"] == first["seq"]
        assert repeat["decision"]["layer"] == "duplicate"
        assert repeat["decision"]["job_id"] == first["decision"]["job_id"]
    assert await api.snapshot() == before, "a duplicate changed something"

    # The same id in another chat is another message.
    other = await api.post_message(id="dup-1", chat_jid="web:main/anon-2")
    assert other["duplicate"] is False
    assert other["seq"] != first["seq"]


BAD_SENDERS = [
    "bob",
    "host",
    "bot",
    "system",
    "deploy",
    "command_output",
    "tool_result",
    "thinking",
    "tool_use",
    "result_meta",
    "system_notice",
    "tui-user",
    "",
    "web:",
    ":anon/1",
]


async def test_a_sender_that_is_not_platform_room_is_refused(api: Api) -> None:
    before = await api.snapshot()

    async def refused(sender: str) -> None:
        response = await api.client.post("/api/v1/messages", json=body(sender=sender))
        assert_error(response, 400)

    await each(BAD_SENDERS, refused)
    assert await api.snapshot() == before


async def test_a_body_naming_message_type_is_refused(api: Api) -> None:
    before = await api.snapshot()

    async def refused(message_type: str | None) -> None:
        response = await api.client.post(
            "/api/v1/messages", json=body(message_type=message_type, sender="telegram:user/42")
        )
        assert "message_type" in assert_error(response, 400)

    await each(["user", "system", "host", "assistant", "trace", "tool_result", None], refused)
    assert await api.snapshot() == before


async def test_unknown_fields_are_refused_by_name(api: Api) -> None:
    before = await api.snapshot()

    async def refused(field: str) -> None:
        response = await api.client.post("/api/v1/messages", json=body() | {field: True})
        assert field in assert_error(response, 400)

    fields = ["metadata", "run_id", "routed_to", "observed", "platform_id", "colour"]
    await each(fields, refused)
    assert await api.snapshot() == before


async def test_a_missing_required_field_is_refused_by_name(api: Api) -> None:
    async def refused(missing: str) -> None:
        payload = body()
        del payload[missing]
        response = await api.client.post("/api/v1/messages", json=payload)
        assert missing in assert_error(response, 400)

    await each(["chat_jid", "sender", "content"], refused)
    assert await api.messages(limit=1000) == []


async def test_content_at_the_limit_is_accepted(api: Api) -> None:
    result = await api.post_message(content="x" * CONTENT_LIMIT)
    assert isinstance(result["seq"], int)
    result = await api.post_message(content="é" * (CONTENT_LIMIT // 2))
    assert isinstance(result["seq"], int)


async def test_content_over_64_kib_is_413_and_nothing_is_stored(api: Api) -> None:
    before = await api.snapshot()

    async def too_large(content: str) -> None:
        for path in ("/api/v1/messages", "/api/v1/routes/explain"):
            response = await api.client.post(path, json=body(content=content))
            assert_error(response, 413)

    # One byte over, in ASCII and in two-byte characters (the limit counts UTF-8 bytes).
    await each(["x" * (CONTENT_LIMIT + 1), "é" * (CONTENT_LIMIT // 2) + "x"], too_large)
    assert await api.snapshot() == before


def _oversized_payload() -> bytes:
    """A body over 1 MiB whose content is small: the bulk is inline attachment data."""
    payload = body(content="small", attachments=[{"kind": "file", "data": "A" * BODY_LIMIT}])
    raw = json.dumps(payload).encode()
    assert len(raw) > BODY_LIMIT
    return raw


async def test_a_body_over_1_mib_is_413_and_nothing_is_stored(api: Api) -> None:
    before = await api.snapshot()
    raw = _oversized_payload()
    headers = {"content-type": "application/json"}

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 64 * 1024):
            yield raw[start : start + 64 * 1024]

    async def too_large(framing: str) -> None:
        content = raw if framing == "content-length" else chunks()
        response = await api.client.post("/api/v1/messages", content=content, headers=headers)
        assert_error(response, 413)

    await each(["content-length", "chunked"], too_large)
    assert await api.snapshot() == before


NOT_JSON_OBJECTS = [
    b"{not json",
    b'{"chat_jid": "web:main/anon-1", "sender": "web:anon/1", "content": "hi"',
    b"",
    b"null",
    b"[1, 2]",
    b'"text"',
    b"[" * 5000,
]
NOT_UTF_8 = [
    b'{"chat_jid": "web:main/anon-1", "sender": "web:anon/1", "content": "caf\xe9"}',
    b'{"chat_jid": "web:main/anon-1", "sender": "web:anon/1", "content": "\xff\xfe"}',
    b'{"chat_jid": "web:main/anon-1", "sender": "web:anon/1", "content": "\\ud800"}',
]


async def test_a_body_that_is_not_a_json_object_or_not_utf_8_is_400(api: Api) -> None:
    async def refused(raw: bytes) -> None:
        response = await api.client.post(
            "/api/v1/messages", content=raw, headers={"content-type": "application/json"}
        )
        assert_error(response, 400)

    await each(NOT_JSON_OBJECTS + NOT_UTF_8, refused)
    assert await api.messages(limit=1000) == []
    assert await api.drops() == []


async def test_a_bad_verb_is_400_naming_it(api: Api) -> None:
    response = await api.client.post("/api/v1/messages", json=body(verb="teleport"))
    assert "teleport" in assert_error(response, 400)
    assert await api.messages(limit=1000) == []


async def test_a_known_verb_is_accepted_and_stored(api: Api) -> None:
    await api.post_message(verb="mention")
    (message,) = await api.messages(chat_jid=CHAT)
    assert message["verb"] == "mention"


async def test_a_miss_stores_nothing_and_records_a_drop(api: Api) -> None:
    emptied = await api.client.put("/api/v1/routes", json=[])
    assert emptied.status_code == 200, emptied.text
    assert emptied.json() == {"routes": []}

    result = await api.post_message(id="lost-1", chat_jid="matrix:room/1", sender="matrix:u/1")
    assert result["seq"] is None
    assert result["duplicate"] is False
    assert result["decision"] == {
        "action": "ignore",
        "layer": "miss",
        "folder": None,
        "topic": None,
        "content": None,
        "inline": None,
        "route_id": None,
        "ack": None,
        "job_id": None,
        "reason": result["decision"]["reason"],
    }
    assert "matrix:room/1" in result["decision"]["reason"]
    assert await api.messages(limit=1000) == []
    assert await api.jobs() == []

    drops = await api.drops()
    assert len(drops) == 1
    drop = drops[0]
    assert set(drop) >= DROP_KEYS
    assert (drop["id"], drop["chat_jid"], drop["sender"], drop["verb"]) == (
        "lost-1",
        "matrix:room/1",
        "matrix:u/1",
        "message",
    )
    assert isinstance(drop["reason"], str) and drop["reason"]
    assert isinstance(drop["time"], str) and drop["time"]
    assert "hello" not in json.dumps(drops), "a drop keeps no content"

    # A drop is deduplicated like a message.
    again = await api.post_message(id="lost-1", chat_jid="matrix:room/1", sender="matrix:u/1")
    assert again["duplicate"] is True
    assert again["seq"] is None
    assert len(await api.drops()) == 1


MALFORMED: list[Any] = [
    body(content=5),
    body(content=None),
    body(content=["a"]),
    body(chat_jid=""),
    body(chat_jid="nocolon"),
    body(chat_jid=":room"),
    body(chat_jid="web:"),
    body(chat_jid="web:main/x\x00"),
    body(chat_jid=7),
    body(id=""),
    body(id="a\nb"),
    body(id="x" * 300),
    body(id=5),
    body(timestamp="yesterday"),
    body(timestamp=1e30),
    body(attachments="x"),
    body(attachments=[{"kind": "image", "size": -1}]),
    body(attachments=[{"no_kind": True}]),
    body(attachments=[{"kind": "image"}] * 1000),
    body(mentioned="maybe"),
    body(reply_to=5),
    body(reply_to="r" * 1000),
    body(topic=None),
    body(topic="t" * 1000),
    body(verb=None),
    body(verb=""),
    body(sender_name="n" * 1000),
    {"chat_jid": {"nested": "object"}, "sender": SENDER, "content": "hi"},
    {},
]


async def test_malformed_messages_are_400_never_500(api: Api) -> None:
    async def refused(payload: Any) -> None:
        for path in ("/api/v1/messages", "/api/v1/routes/explain"):
            response = await api.client.post(path, json=payload)
            assert_error(response, 400)

    await each(MALFORMED, refused)
    assert await api.messages(limit=1000) == []
    assert await api.drops() == []
    assert await api.jobs() == []


async def test_wrong_content_types_and_methods_are_4xx(api: Api) -> None:
    form = await api.client.post(
        "/api/v1/messages",
        content=b"chat_jid=web%3Amain%2Fa",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert_error(form, 400)
    assert_error(await api.client.patch("/api/v1/messages", json=body()), 405)
    assert_error(await api.client.get("/api/v1/no-such-thing"), 404)
    assert await api.messages(limit=1000) == []


async def test_post_messages_has_one_path_and_its_refusals_are_the_apis(api: Api) -> None:
    """The ingest lane answers every ``POST /api/v1/messages``; FastAPI's router has no route
    for it (nothing behind the lane to fall through to), and the OpenAPI document still
    describes it."""
    mounted = [
        route
        for route in api.gateway.http.routes
        if getattr(route, "path", None) == "/api/v1/messages"
        and "POST" in (getattr(route, "methods", None) or ())
    ]
    assert mounted == []
    json_type = {"content-type": "application/json"}
    cases = [
        (b"{not json", json_type, "The body is not valid JSON."),
        (b"", json_type, "The body is not valid JSON."),
        (b"\xff", json_type, "The body is not valid JSON."),
        (b"[" * 5000, json_type, "The body is not valid JSON."),
        (b"[1, 2]", json_type, "The body must be a JSON object."),
        (
            b"chat_jid=web%3Amain%2Fa",
            {"content-type": "application/x-www-form-urlencoded"},
            "The body must be JSON, sent with Content-Type: application/json (Content-Type "
            "'application/x-www-form-urlencoded' was given).",
        ),
        (json.dumps({"chat_jid": CHAT}).encode(), json_type, "Missing field 'sender'."),
        (
            json.dumps(body(surprise=1)).encode(),
            json_type,
            "Unknown field 'surprise'; it is not accepted here.",
        ),
        (
            json.dumps(body(sender_name="x" * 300)).encode(),
            json_type,
            "Field 'sender_name': String should have at most 255 characters.",
        ),
    ]
    for raw, headers, sentence in cases:
        response = await api.client.post("/api/v1/messages", content=raw, headers=headers)
        assert assert_error(response, 400) == sentence, raw[:40]
    # Ingest's own refusals keep their statuses too.
    assert "teleport" in assert_error(
        await api.client.post("/api/v1/messages", json=body(verb="teleport")), 400
    )
    too_long = "x" * 70_000
    assert_error(await api.client.post("/api/v1/messages", json=body(content=too_long)), 413)
    schema = (await api.client.get("/api/v1/openapi.json")).json()
    post = schema["paths"]["/api/v1/messages"]["post"]
    assert post["summary"] == "Inbound message from any adapter"
    reference = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert "content" in schema["components"]["schemas"][reference.rpartition("/")[2]]["properties"]
    assert await api.messages(limit=1000) == []


# --------------------------------------------------------------------------- GET /messages


async def test_get_messages_filters_by_chat_and_folder_in_seq_order(api: Api) -> None:
    created = await api.client.post("/api/v1/folders", json={"path": "other"})
    assert created.status_code == 201, created.text
    added = await api.client.post(
        "/api/v1/routes", json={"seq": 0, "match": "platform=telegram", "target": "other"}
    )
    assert added.status_code == 201, added.text

    posted = []
    for i in range(3):
        posted.append(await api.post_message(content=f"web {i}"))
        posted.append(
            await api.post_message(
                content=f"tg {i}", chat_jid="telegram:group/5", sender="telegram:user/42"
            )
        )

    everything = await api.messages()
    assert [m["seq"] for m in everything] == sorted(m["seq"] for m in everything)
    assert [m["seq"] for m in everything] == [p["seq"] for p in posted]
    for message in everything:
        assert set(message) >= MESSAGE_KEYS
        assert isinstance(message["metadata"], dict), message

    web = await api.messages(chat_jid=CHAT)
    assert [m["content"] for m in web] == ["web 0", "web 1", "web 2"]
    tg = await api.messages(folder="other")
    assert [m["content"] for m in tg] == ["tg 0", "tg 1", "tg 2"]
    assert {m["routed_to"] for m in tg} == {"other"}
    assert await api.messages(chat_jid=CHAT, folder="other") == []
    assert await api.messages(chat_jid="web:main/nobody") == []


async def test_get_messages_after_seq_and_limit(api: Api) -> None:
    seqs = [(await api.post_message(content=f"m{i}"))["seq"] for i in range(6)]

    after = await api.messages(chat_jid=CHAT, after_seq=seqs[2])
    assert [m["seq"] for m in after] == seqs[3:]
    assert await api.messages(chat_jid=CHAT, after_seq=seqs[-1]) == []

    # The newest `limit` after after_seq, still in seq order.
    newest = await api.messages(chat_jid=CHAT, limit=2)
    assert [m["seq"] for m in newest] == seqs[-2:]
    window = await api.messages(chat_jid=CHAT, after_seq=seqs[0], limit=3)
    assert [m["seq"] for m in window] == seqs[-3:]


async def test_get_messages_limit_default_100_and_max_1000(api: Api) -> None:
    seqs = [(await api.post_message(content=f"n{i}"))["seq"] for i in range(101)]
    default = await api.messages(chat_jid=CHAT)
    assert [m["seq"] for m in default] == seqs[-100:]
    assert len(await api.messages(chat_jid=CHAT, limit=1000)) == 101

    for limit in ("1001", "0", "-1", "many"):
        response = await api.client.get("/api/v1/messages", params={"limit": limit})
        assert "limit" in assert_error(response, 400)
    for after_seq in ("-1", "x"):
        response = await api.client.get("/api/v1/messages", params={"after_seq": after_seq})
        assert_error(response, 400)


# --------------------------------------------------------------------------- routes


async def test_routes_list_add_and_delete(api: Api) -> None:
    (catch_all,) = await api.routes()
    assert set(catch_all) >= ROUTE_KEYS
    assert (catch_all["seq"], catch_all["match"], catch_all["target"]) == (9999, "", "main")
    assert catch_all["mode"] == "fire"
    assert isinstance(catch_all["created_at"], str)

    added = await api.client.post(
        "/api/v1/routes", json={"seq": 5, "match": "platform=telegram", "target": "main#observe"}
    )
    assert added.status_code == 201, added.text
    assert set(added.json()) == {"id"}
    route_id = added.json()["id"]
    assert isinstance(route_id, int)

    rows = await api.routes()
    assert [(r["seq"], r["match"], r["target"]) for r in rows] == [
        (5, "platform=telegram", "main#observe"),
        (9999, "", "main"),
    ]
    new = rows[0]
    assert new["id"] == route_id
    assert new["mode"] == "observe"
    assert isinstance(new["created_by"], str) and new["created_by"]

    deleted = await api.client.delete(f"/api/v1/routes/{route_id}")
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert [r["id"] for r in await api.routes()] == [catch_all["id"]]
    assert_error(await api.client.delete(f"/api/v1/routes/{route_id}"), 404)
    assert_error(await api.client.delete("/api/v1/routes/424242"), 404)
    assert_error(await api.client.delete("/api/v1/routes/abc"), 400)


async def test_shadowed_rows_are_reported(api: Api) -> None:
    first = await api.client.post("/api/v1/routes", json={"seq": 1, "target": "main"})
    assert first.status_code == 201, first.text
    second = await api.client.post(
        "/api/v1/routes", json={"seq": 2, "match": "platform=web", "target": "main"}
    )
    assert second.status_code == 201, second.text
    rows = {r["id"]: r for r in await api.routes()}
    assert rows[second.json()["id"]]["shadowed_by"] is not None
    assert rows[first.json()["id"]]["shadowed_by"] is None


BAD_ROUTES: list[Any] = [
    {"seq": 0, "match": "room=[ab", "target": "main"},
    {"seq": 0, "match": "colour=red", "target": "main"},
    {"seq": 0, "match": "", "target": "no-such-folder"},
    {"seq": 0, "match": "", "target": "main#Not A Topic"},
    {"seq": 0, "match": "", "target": "../main"},
    {"seq": 0, "match": "", "target": ""},
    {"seq": 0, "match": "", "target": 5},
    {"seq": "x", "match": "", "target": "main"},
    {"seq": 1.5, "match": "", "target": "main"},
    {"seq": True, "match": "", "target": "main"},
    {"seq": None, "match": "", "target": "main"},
    {"seq": 10**30, "match": "", "target": "main"},
    {"match": "", "target": "main"},
    {"seq": 0, "match": ""},
    {"seq": 0, "match": "", "target": "main", "mode": "fire"},
    [],
    "text",
]


async def test_a_bad_route_is_400_and_the_table_is_unchanged(api: Api) -> None:
    before = await api.routes()

    async def refused(payload: Any) -> None:
        assert_error(await api.client.post("/api/v1/routes", json=payload), 400)
        assert await api.routes() == before

    await each(BAD_ROUTES, refused)


async def test_put_routes_replaces_the_table(api: Api) -> None:
    await api.client.post("/api/v1/folders", json={"path": "atlas"})
    table = [
        {"seq": 0, "match": "platform=telegram", "target": "atlas"},
        {"seq": 10, "match": "platform=discord room=guild/*", "target": "main#observe"},
        {"seq": 9999, "match": "", "target": "main"},
    ]
    response = await api.client.put("/api/v1/routes", json=table)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert set(payload) == {"routes"}
    rows = payload["routes"]
    assert [(r["seq"], r["match"], r["target"]) for r in rows] == [
        (t["seq"], t["match"], t["target"]) for t in table
    ]
    for row in rows:
        assert set(row) >= ROUTE_KEYS
    assert await api.routes() == rows


BAD_TABLES: list[Any] = [
    [
        {"seq": 0, "match": "platform=web", "target": "main"},
        {"seq": 1, "match": "room=[ab", "target": "main"},
    ],
    [
        {"seq": 0, "match": "platform=web", "target": "main"},
        {"seq": 1, "match": "", "target": "nowhere"},
    ],
    [{"seq": 0, "match": "platform=web", "target": "main"}, {"seq": 1, "match": ""}],
    [{"seq": 0, "match": "platform=web", "target": "main"}, {"seq": "one", "target": "main"}],
    [{"seq": 0, "target": "main", "extra": 1}],
    [{"seq": 0, "match": "platform=web", "target": "main"}, 5],
    {"routes": [{"seq": 0, "target": "main"}]},
    "not a list",
]


async def test_put_routes_with_one_bad_row_changes_nothing(api: Api) -> None:
    before = await api.routes()

    async def refused(table: Any) -> None:
        assert_error(await api.client.put("/api/v1/routes", json=table), 400)
        assert await api.routes() == before

    await each(BAD_TABLES, refused)


async def test_explain_answers_the_decision_and_changes_nothing(api: Api) -> None:
    before = await api.snapshot()
    response = await api.client.post(
        "/api/v1/routes/explain", json=body(id="hypothetical", content="what if")
    )
    assert response.status_code == 200, response.text
    decision = response.json()
    assert set(decision) == DECISION_KEYS
    assert decision["action"] == "fire"
    assert decision["folder"] == "main"
    assert decision["content"] == "what if"
    assert decision["job_id"] is None
    assert isinstance(decision["reason"], str) and decision["reason"]
    assert await api.snapshot() == before

    # The explained message was not stored: posting it for real is not a duplicate.
    real = await api.post_message(id="hypothetical", content="what if")
    assert real["duplicate"] is False


async def test_explain_refuses_what_posting_refuses(api: Api) -> None:
    assert_error(await api.client.post("/api/v1/routes/explain", json=body(sender="host")), 400)
    assert "message_type" in assert_error(
        await api.client.post("/api/v1/routes/explain", json=body(message_type="system")), 400
    )
    assert_error(
        await api.client.post(
            "/api/v1/routes/explain", json=body(content="x" * (CONTENT_LIMIT + 1))
        ),
        413,
    )


# --------------------------------------------------------------------------- folders


async def test_folders_list_add_and_nested_delete(api: Api) -> None:
    (main,) = await api.folders()
    assert set(main) >= FOLDER_KEYS
    assert main["path"] == "main"
    assert main["parent"] is None

    response = await api.client.post(
        "/api/v1/folders",
        json={
            "path": "atlas/content",
            "persona": "You write the posts.",
            "provider": "echo",
            "model": "echo-1",
            "engagement_ttl": "5m",
            "session": "shared",
            "role": "conductor",
        },
    )
    assert response.status_code == 201, response.text
    folder = response.json()
    assert set(folder) >= FOLDER_KEYS
    assert folder["path"] == "atlas/content"
    assert folder["persona"] == "You write the posts."
    assert folder["provider"] == "echo"
    assert folder["model"] == "echo-1"
    assert folder["engagement_ttl"] is not None
    assert folder["session"] == "shared"
    assert folder["role"] == "conductor"
    assert folder["parent"] == "atlas"
    assert isinstance(folder["created_at"], str)

    # Missing parents are created.
    assert [f["path"] for f in await api.folders()] == ["atlas", "atlas/content", "main"]
    assert (api.data_dir / "folders" / "atlas" / "content" / "AGENT.md").is_file()

    deleted = await api.client.delete("/api/v1/folders/atlas/content")
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert [f["path"] for f in await api.folders()] == ["atlas", "main"]
    assert_error(await api.client.delete("/api/v1/folders/atlas/content"), 404)
    assert (await api.client.delete("/api/v1/folders/atlas")).status_code == 204
    assert [f["path"] for f in await api.folders()] == ["main"]


async def test_adding_an_existing_folder_is_409(api: Api) -> None:
    before = await api.folders()
    assert "main" in assert_error(
        await api.client.post("/api/v1/folders", json={"path": "main", "persona": "new"}), 409
    )
    assert await api.folders() == before


BAD_FOLDERS: list[Any] = [
    {"path": "../escape"},
    {"path": "Bad Path"},
    {"path": ""},
    {"path": "/abs"},
    {"path": "a//b"},
    {"path": "atlas", "session": "sometimes"},
    {"path": "atlas", "engagement_ttl": "soon"},
    {"path": "atlas", "engagement_ttl": "99999999h"},
    {"path": "atlas", "engagement_ttl": "31d"},
    {"path": "atlas", "colour": "red"},
    {"persona": "no path"},
    {"path": 5},
]


async def test_a_bad_folder_is_400(api: Api) -> None:
    before = await api.folders()

    async def refused(payload: Any) -> None:
        assert_error(await api.client.post("/api/v1/folders", json=payload), 400)
        assert await api.folders() == before

    await each(BAD_FOLDERS, refused)


async def test_a_ttl_over_thirty_days_is_400_naming_key_and_range(api: Api) -> None:
    answer = await api.client.post(
        "/api/v1/folders", json={"path": "atlas", "engagement_ttl": "99999999h"}
    )
    sentence = assert_error(answer, 400)
    assert "engagement_ttl" in sentence and "from 0 to 30d" in sentence


async def test_deleting_a_folder_a_route_targets_is_409_naming_the_route(api: Api) -> None:
    assert (await api.client.post("/api/v1/folders", json={"path": "acme/eng"})).status_code == 201
    added = await api.client.post(
        "/api/v1/routes", json={"seq": 3, "match": "platform=slack", "target": "acme/eng#deploy"}
    )
    route_id = added.json()["id"]
    before = await api.folders()

    sentence = assert_error(await api.client.delete("/api/v1/folders/acme/eng"), 409)
    assert re.search(rf"\b{route_id}\b", sentence), sentence
    main_route = (await api.routes())[-1]["id"]
    sentence = assert_error(await api.client.delete("/api/v1/folders/main"), 409)
    assert re.search(rf"\b{main_route}\b", sentence), sentence
    assert await api.folders() == before

    assert_error(await api.client.delete("/api/v1/folders/nowhere"), 404)
    assert_error(await api.client.delete("/api/v1/folders/acme/nowhere"), 404)


# --------------------------------------------------------------------------- tasks


async def test_tasks_add_list_pause_resume_delete(api: Api) -> None:
    response = await api.client.post(
        "/api/v1/tasks",
        json={
            "folder": "main",
            "chat_jid": CHAT,
            "schedule": "0 9 * * 1-5",
            "prompt": "Morning summary",
            "tz": "Europe/Paris",
        },
    )
    assert response.status_code == 201, response.text
    task = response.json()
    assert set(task) >= TASK_KEYS
    assert isinstance(task["id"], int)
    assert (task["folder"], task["chat_jid"], task["schedule"], task["tz"], task["prompt"]) == (
        "main",
        CHAT,
        "0 9 * * 1-5",
        "Europe/Paris",
        "Morning summary",
    )
    assert task["enabled"] is True
    assert isinstance(task["next_run"], str)
    assert task["last_run"] is None
    assert task["last_status"] is None
    assert await api.tasks() == [task]

    paused = await api.client.post(f"/api/v1/tasks/{task['id']}/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["enabled"] is False
    assert [t["enabled"] for t in await api.tasks()] == [False]
    resumed = await api.client.post(f"/api/v1/tasks/{task['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["enabled"] is True
    assert [t["enabled"] for t in await api.tasks()] == [True]

    deleted = await api.client.delete(f"/api/v1/tasks/{task['id']}")
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert await api.tasks() == []
    assert_error(await api.client.delete(f"/api/v1/tasks/{task['id']}"), 404)


async def test_unknown_tasks_are_404(api: Api) -> None:
    for method, path in (
        ("POST", "/api/v1/tasks/999/pause"),
        ("POST", "/api/v1/tasks/999/resume"),
        ("DELETE", "/api/v1/tasks/999"),
    ):
        assert_error(await api.client.request(method, path), 404)


BAD_TASK_CHANGES: list[Any] = [
    {"schedule": "whenever"},
    {"schedule": "61 * * * *"},
    {"schedule": ""},
    {"tz": "Mars/Olympus"},
    {"prompt": ""},
    {"chat_jid": "nocolon"},
    {"folder": "no-such-folder"},
    {"priority": 1},
    {"schedule": "2020-01-01T09:00Z"},  # a one-shot in the past
    {"schedule": "every 1s"},  # more often than the scheduler's tick
]


async def test_a_bad_task_is_400(api: Api) -> None:
    payload = {"folder": "main", "chat_jid": CHAT, "schedule": "every 5m", "prompt": "hi"}

    async def refused(change: dict[str, Any]) -> None:
        assert_error(await api.client.post("/api/v1/tasks", json=payload | change), 400)
        assert await api.tasks() == []

    await each(BAD_TASK_CHANGES, refused)


# --------------------------------------------------------------------------- jobs


async def test_jobs_list_filter_cancel_and_retry(api: Api) -> None:
    first = await api.post_message(id="j1")
    joined = await api.post_message(id="j2")
    other = await api.post_message(id="j3", chat_jid="web:main/anon-2")
    job_id = first["decision"]["job_id"]
    # A message arriving while the turn is queued joins it (PIPELINE §2).
    assert joined["decision"]["job_id"] == job_id
    other_id = other["decision"]["job_id"]
    assert other_id != job_id

    jobs = await api.jobs()
    assert {j["id"] for j in jobs} == {job_id, other_id}
    for job in jobs:
        assert set(job) >= JOB_KEYS
        assert job["status"] == "queued"
        assert job["folder"] == "main"
        assert isinstance(job["priority"], int)
        assert isinstance(job["max_attempts"], int)
        assert isinstance(job["created_at"], str)
        assert job["started_at"] is None
        assert job["finished_at"] is None
    by_id = {j["id"]: j for j in jobs}
    assert by_id[job_id]["message_ids"] == ["j1", "j2"]
    assert by_id[job_id]["chat_jid"] == CHAT
    assert by_id[other_id]["message_ids"] == ["j3"]

    cancelled = await api.client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert set(cancelled.json()) >= JOB_KEYS
    assert cancelled.json()["status"] == "cancelled"
    assert [j["id"] for j in await api.jobs(status="cancelled")] == [job_id]
    assert [j["id"] for j in await api.jobs(status="queued")] == [other_id]
    assert await api.jobs(status="done") == []

    assert "cancelled" in assert_error(await api.client.post(f"/api/v1/jobs/{job_id}/cancel"), 409)
    assert_error(await api.client.post(f"/api/v1/jobs/{other_id}/retry"), 409)

    retried = await api.client.post(f"/api/v1/jobs/{job_id}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] == "queued"
    assert {j["id"] for j in await api.jobs(status="queued")} == {job_id, other_id}
    assert_error(await api.client.post(f"/api/v1/jobs/{job_id}/retry"), 409)

    for action in ("retry", "cancel"):
        assert_error(await api.client.post(f"/api/v1/jobs/98765/{action}"), 404)
        assert_error(await api.client.post(f"/api/v1/jobs/abc/{action}"), 400)
    assert_error(await api.client.get("/api/v1/jobs", params={"status": "sleeping"}), 400)


# --------------------------------------------------------------------------- runs


async def _answered(api: Api, job_id: int) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        for job in await api.jobs(status="done"):
            if job["id"] == job_id:
                return job
        failed = await api.jobs(status="failed")
        assert not failed, failed
        return None

    return await eventually(done, what=f"job {job_id} to finish")  # type: ignore[no-any-return]


async def test_a_run_shows_what_the_model_saw_and_said(workers: Api) -> None:
    api = workers
    result = await api.post_message(content="what is the weather")
    job_id = result["decision"]["job_id"]
    job = await _answered(api, job_id)
    assert isinstance(job["started_at"], str)
    assert isinstance(job["finished_at"], str)

    history = await api.messages(chat_jid=CHAT)
    assistant = [m for m in history if m["message_type"] == "assistant"]
    assert len(assistant) == 1
    reply = assistant[0]
    assert isinstance(reply["run_id"], int)
    assert isinstance(reply["metadata"], dict)

    response = await api.client.get(f"/api/v1/runs/{reply['run_id']}")
    assert response.status_code == 200, response.text
    run = response.json()
    assert set(run) >= RUN_KEYS
    assert run["id"] == reply["run_id"]
    assert run["job_id"] == job_id
    assert run["folder"] == "main"
    assert run["provider"] == "echo"
    (main,) = await api.folders()
    assert main["persona"] and main["persona"] in run["system"]
    assert isinstance(run["messages"], list)
    assert any("what is the weather" in str(m.get("content")) for m in run["messages"])
    assert run["output"] == reply["content"]
    assert "what is the weather" in run["output"]
    assert isinstance(run["output_raw"], str)
    assert isinstance(run["tools"], list)
    assert isinstance(run["usage"], dict)
    assert run["outcome"] == "ok"
    assert run["error"] is None
    assert isinstance(run["duration_ms"], int)

    assert_error(await api.client.get("/api/v1/runs/987654"), 404)
    assert_error(await api.client.get("/api/v1/runs/abc"), 400)


# --------------------------------------------------------------------------- metrics, openapi


async def test_metrics_are_prometheus_text(api: Api) -> None:
    await api.post_message()
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert re.search(
        r'^postroom_messages_in_total\{action="fire",layer="route"\} 1\.0$', text, re.M
    ), text
    assert re.search(r'^postroom_queue_depth\{status="queued"\} 1\.0$', text, re.M), text


async def test_openapi_lists_the_api_paths(api: Api) -> None:
    response = await api.client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    paths = {re.sub(r"\{[^}]+\}", "{}", p): set(ops) for p, ops in schema["paths"].items()}
    expected = {
        "/api/v1/messages": {"get", "post"},
        "/api/v1/events": {"get"},
        "/api/v1/routes": {"get", "post", "put"},
        "/api/v1/routes/{}": {"delete"},
        "/api/v1/routes/explain": {"post"},
        "/api/v1/folders": {"get", "post"},
        "/api/v1/folders/{}": {"delete"},
        "/api/v1/tasks": {"get", "post"},
        "/api/v1/tasks/{}/pause": {"post"},
        "/api/v1/tasks/{}/resume": {"post"},
        "/api/v1/tasks/{}": {"delete"},
        "/api/v1/jobs": {"get"},
        "/api/v1/jobs/{}/retry": {"post"},
        "/api/v1/jobs/{}/cancel": {"post"},
        "/api/v1/runs/{}": {"get"},
        "/api/v1/drops": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, f"{path} missing from the OpenAPI document"
        assert methods <= paths[path], (path, paths[path])


async def test_the_openapi_document_lists_the_statuses_the_server_answers(api: Api) -> None:
    """INTERFACES §4: 400 (never FastAPI's 422), 401, 403, and 404/409/413 where they happen,
    each with the ``{"error": ...}`` body."""
    schema = (await api.client.get("/api/v1/openapi.json")).json()
    assert "Error" in schema["components"]["schemas"]
    assert not {"HTTPValidationError", "ValidationError"} & set(schema["components"]["schemas"])
    conflicts = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            where = f"{method.upper()} {path}"
            assert "422" not in responses, where
            assert "401" in responses, where  # every /api/ path needs the token
            assert "403" in responses, where  # and a named token may lack the scope
            if operation.get("parameters") or operation.get("requestBody"):
                assert "400" in responses, where
            if "{" in path:
                assert "404" in responses, where
            if operation.get("requestBody"):
                assert "413" in responses, where
            if "409" in responses:
                conflicts.add(where)
            for status, answer in responses.items():
                if status >= "400":
                    body = answer["content"]["application/json"]["schema"]
                    assert body == {"$ref": "#/components/schemas/Error"}, where
    assert {
        "POST /api/v1/folders",
        "DELETE /api/v1/folders/{path}",
        "POST /api/v1/jobs/{job_id}/retry",
        "POST /api/v1/jobs/{job_id}/cancel",
    } <= conflicts
    # And the server does answer them: 404 and 409 with one sentence.
    assert_error(await api.client.post("/api/v1/jobs/424242/retry"), 404)
    assert_error(await api.client.post("/api/v1/folders", json={"path": "main"}), 409)
    assert_error(await api.client.post("/api/v1/routes", content=b"{", headers=JSON), 400)


JSON = {"content-type": "application/json"}
BEYOND = [2**63, 2**64, 10**30]


async def test_integers_out_of_range_are_400_before_anything_runs(api: Api) -> None:
    """``/events?after_seq=`` beyond 2^63 used to answer 200 and then break the stream."""
    before = await api.snapshot()
    for number in BEYOND:
        for path in (
            f"/api/v1/events?after_seq={number}",
            f"/api/v1/messages?after_seq={number}",
            f"/api/v1/runs/{number}",
        ):
            sentence = assert_error(await api.client.get(path), 400)
            assert "after_seq" in sentence or "run_id" in sentence, sentence
        for method, path in (
            ("DELETE", f"/api/v1/routes/{number}"),
            ("DELETE", f"/api/v1/tasks/{number}"),
            ("POST", f"/api/v1/jobs/{number}/cancel"),
            ("POST", f"/api/v1/tasks/{number}/pause"),
        ):
            assert_error(await api.client.request(method, path), 400)
        stream = await api.client.get("/api/v1/events", headers={"last-event-id": str(number)})
        assert_error(stream, 400)
    assert await api.snapshot() == before


STRICT_BODIES: list[tuple[str, str, Any]] = [
    ("POST", "/api/v1/routes", {"seq": "1", "match": "", "target": "main"}),
    ("POST", "/api/v1/routes", {"seq": 1, "match": 5, "target": "main"}),
    ("PUT", "/api/v1/routes", [{"seq": "1", "target": "main"}]),
    ("PUT", "/api/v1/routes", [{"seq": 1.0, "target": "main"}]),
    (
        "POST",
        "/api/v1/messages",
        {"chat_jid": CHAT, "sender": SENDER, "content": "hi", "mentioned": "yes"},
    ),
    (
        "POST",
        "/api/v1/messages",
        {"chat_jid": CHAT, "sender": SENDER, "content": "hi", "mentioned": 1},
    ),
    (
        "POST",
        "/api/v1/messages",
        {
            "chat_jid": CHAT,
            "sender": SENDER,
            "content": "hi",
            "attachments": [{"kind": "image", "size": "5"}],
        },
    ),
    (
        "POST",
        "/api/v1/messages",
        {
            "chat_jid": CHAT,
            "sender": SENDER,
            "content": "hi",
            "attachments": [{"kind": "image", "size": 2**31}],
        },
    ),
]


async def test_typed_fields_are_strict(api: Api) -> None:
    """``"seq": "1"`` is 400 (it used to be read as 1); nothing changes."""
    before = await api.snapshot()

    async def refused(case: tuple[str, str, Any]) -> None:
        method, path, body = case
        sentence = assert_error(await api.client.request(method, path, json=body), 400)
        assert (
            "seq" in sentence
            or "mentioned" in sentence
            or "size" in sentence
            or "match" in sentence
        )
        assert await api.snapshot() == before

    await each(STRICT_BODIES, refused)
    # The same writes with the right types go through.
    added = await api.client.post("/api/v1/routes", json={"seq": 1, "target": "main"})
    assert added.status_code == 201, added.text


# --------------------------------------------------------------------------- events (SSE)


@dataclass
class SseEvent:
    event: str | None
    data: str
    id: str | None
    comment: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class SseReader:
    """Parses a text/event-stream response, one event (or comment) at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> SseEvent:
        event: str | None = None
        event_id: str | None = None
        data: list[str] = []
        async with asyncio.timeout(WAIT_S):
            async for line in self._lines:
                if line == "":
                    if event is not None or data:
                        return SseEvent(event, "\n".join(data), event_id)
                    continue
                if line.startswith(":"):
                    if event is None and not data:
                        return SseEvent(None, "", None, comment=line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
                elif name == "id":
                    event_id = value
        raise AssertionError("the event stream ended")

    async def until(self, predicate: Callable[[SseEvent], bool]) -> tuple[SseEvent, list[SseEvent]]:
        """Read until an event satisfies *predicate*; return it and everything before it."""
        seen: list[SseEvent] = []
        async with asyncio.timeout(WAIT_S):
            while True:
                event = await self.next()
                if predicate(event):
                    return event, seen
                seen.append(event)


@contextlib.asynccontextmanager
async def event_stream(
    served: Served, *, params: dict[str, Any] | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, SseReader]]:
    headers = {"Authorization": f"Bearer {served.api.token}"}
    async with (
        httpx.AsyncClient(base_url=served.base_url, headers=headers, timeout=WAIT_S) as client,
        client.stream("GET", "/api/v1/events", params=params) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield client, SseReader(response)


def _is_message(message_id: str) -> Callable[[SseEvent], bool]:
    return lambda e: e.event == "message" and e.json()["id"] == message_id


async def test_events_need_the_token_over_a_real_socket(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base_url, timeout=WAIT_S) as client:
        assert_error(await client.get("/api/v1/events"), 401)
        assert_error(await client.get("/metrics"), 401)
        assert (await client.get("/healthz")).status_code == 200


async def test_a_message_posted_after_connecting_arrives_as_a_message_event(
    served: Served,
) -> None:
    async with event_stream(served) as (client, reader):
        hello = await reader.next()
        assert hello.comment is not None, "the stream first says it is connected"

        response = await client.post("/api/v1/messages", json=body(id="live-1", content="live!"))
        assert response.status_code == 200, response.text
        posted = response.json()

        event, _ = await reader.until(lambda e: e.event is not None)
        assert event.event == "message"
        data = event.json()
        assert set(data) >= MESSAGE_KEYS
        assert data["id"] == "live-1"
        assert data["chat_jid"] == CHAT
        assert data["seq"] == posted["seq"]
        assert data["content"] == "live!"
        assert data["message_type"] == "user"
        assert isinstance(data["metadata"], dict)
        assert event.id == str(posted["seq"])
        stored = await served.api.messages(chat_jid=CHAT)
        assert data == stored[0]


async def test_after_seq_replays_stored_messages_first(served: Served) -> None:
    api = served.api
    seqs = [(await api.post_message(id=f"old-{i}", content=f"old {i}"))["seq"] for i in range(4)]

    async with event_stream(served, params={"after_seq": seqs[1]}) as (client, reader):
        _, replayed = await reader.until(lambda e: e.comment is not None)
        assert [e.event for e in replayed] == ["message", "message"]
        assert [e.json()["seq"] for e in replayed] == seqs[2:]
        assert [e.json()["id"] for e in replayed] == ["old-2", "old-3"]

        response = await client.post("/api/v1/messages", json=body(id="new-1"))
        assert response.status_code == 200
        event, between = await reader.until(lambda e: e.event is not None)
        assert event.event == "message"
        assert event.json()["id"] == "new-1"
        # Nothing already replayed is sent again.
        assert all(e.event is None for e in between)


async def test_a_delivery_arrives_as_a_delivery_event(served: Served, workers: Api) -> None:
    async with event_stream(served) as (client, reader):
        await reader.next()
        response = await client.post(
            "/api/v1/messages", json=body(id="ask-1", content="echo me please")
        )
        assert response.status_code == 200, response.text

        await reader.until(_is_message("ask-1"))
        # The answer is stored (a message event) and delivered (a delivery event); the two
        # events come from different loops, so their order is not fixed.
        replies: list[dict[str, Any]] = []
        deliveries: list[dict[str, Any]] = []
        async with asyncio.timeout(WAIT_S):
            while not (replies and deliveries):
                event = await reader.next()
                if event.event == "message" and event.json()["message_type"] == "assistant":
                    replies.append(event.json())
                elif event.event == "delivery":
                    deliveries.append(event.json())
        (reply,) = replies
        assert "echo me please" in reply["content"]
        assert reply["chat_jid"] == CHAT
        (data,) = deliveries
        assert data["id"] == reply["id"]
        assert data["chat_jid"] == CHAT
        assert data["content"] == reply["content"]
        assert data["chunk"] == 0
        assert data["chunks"] == 1


# --------------------------------------------------------------------------- bind safety


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_a_non_loopback_bind_without_a_token_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="token"):
        check_bind(host, "")
    check_bind(host, "a-token-of-24-characters")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_bind_needs_no_token(host: str) -> None:
    check_bind(host, "")
    check_bind(host, "a-token-of-24-characters")
