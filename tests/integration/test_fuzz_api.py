"""Hypothesis fuzzing of the HTTP API's writers (INTERFACES §4): ``POST /api/v1/messages`` and
the route and folder writers, driven through the gateway's real ASGI app over a real SQLite data
directory made by ``postroom init``.

Whatever arrives — random JSON, raw bytes, invalid UTF-8, truncated JSON, huge and empty
strings, control characters, lone surrogates, SQL metacharacters, ``..`` and ``/`` — the answer
is 2xx, or 4xx with an ``{"error": ...}`` sentence; never 5xx. A refused message leaves no row
behind (message, drop, job, delivery), a refused route or folder write leaves the route table
and the folders as they were, and the server still serves afterwards.

Each test builds its gateway in its own ``asyncio.Runner`` so hypothesis can drive it from a
plain function; examples share the gateway, so state accumulates as it would in a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sqlite3
import sys
import tomllib
import uuid
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from postroom.app.gateway import Gateway
from postroom.cli.main import app as cli_app
from postroom.config import DATABASE_FILE, load_config
from postroom.logs import configure_logging

T = TypeVar("T")

CHAT = "web:main/fuzz"
SENDER = "web:anon/fuzz"
INT64_MAX = 2**63 - 1
#: Tables a message write may touch; a refused message must leave every one as it was.
MESSAGE_TABLES = ("messages", "drops", "jobs", "job_messages", "deliveries", "chats")

# A fixed number of examples per test: how long they take depends on the machine's load.
pytestmark = pytest.mark.timeout(600)

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

runner = CliRunner()


# --------------------------------------------------------------------------- strategies

SQL = [
    "'",
    '"',
    "';--",
    "' OR '1'='1",
    "'); DROP TABLE messages;--",
    "\\",
    "%",
    "_",
    "*",
    "?",
    "[",
    "]",
    ";",
    "/*",
    "*/",
    "NULL",
]
PATHS = ["..", "../", "/..", "../..", "/", "//", ".", "./", "a/../b", "..%2F", "%2e%2e", "~"]
CONTROL = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff"]
SURROGATES = ["\ud800", "\udfff", "\udc80", "\ud83d"]
HUGE = ["x" * 70_000, "é" * 40_000, "a:" + "b" * 600, "/" * 5000]

atoms = st.sampled_from(SQL + PATHS + CONTROL + SURROGATES + ["", " ", "main", "web", ":"])
nasty_text = st.one_of(
    st.text(max_size=40),
    st.lists(atoms | st.text(max_size=6), max_size=8).map("".join),
    st.sampled_from(HUGE),
    st.text(st.characters(codec="utf-8"), min_size=300, max_size=3000),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    nasty_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def jids(draw: st.DrawFn) -> str:
    """Addresses with ``..``, ``/``, SQL and control characters in the room (and sometimes in
    the platform)."""
    platform = draw(st.sampled_from(["web", "telegram", "x", "Web", "", "we b", "..", "a/b"]))
    room = draw(st.lists(atoms | st.text(max_size=5), max_size=6).map("/".join))
    return f"{platform}:{room}" if draw(st.booleans()) or platform else room


field_values = st.one_of(jids(), nasty_text, json_values)
MESSAGE_FIELDS = [
    "id",
    "chat_jid",
    "sender",
    "sender_name",
    "content",
    "timestamp",
    "reply_to",
    "topic",
    "verb",
    "mentioned",
    "attachments",
]
timestamps = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-23:59",
            "0001-01-01T00:00:00+23:59",
            "2026-13-01T00:00:00Z",
            "now",
            "",
            "1e309",
        ]
    ),
    st.integers(min_value=-(2**66), max_value=2**66),
)
attachments = st.lists(
    st.fixed_dictionaries(
        {"kind": nasty_text},
        optional={
            "mime": nasty_text,
            "name": nasty_text,
            "size": st.integers(min_value=-(2**70), max_value=2**70),
            "url": nasty_text,
            "data": nasty_text,
        },
    ),
    max_size=3,
)


@st.composite
def message_bodies(draw: st.DrawFn) -> Any:
    """Mostly valid bodies with some fields replaced by something nasty; sometimes any JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    body: dict[str, Any] = {"chat_jid": CHAT, "sender": SENDER, "content": "hello"}
    if draw(st.booleans()):
        body["id"] = uuid.uuid4().hex
    for name in draw(st.lists(st.sampled_from([*MESSAGE_FIELDS, "message_type", "x"]), max_size=4)):
        if name == "timestamp":
            body[name] = draw(timestamps)
        elif name == "attachments":
            body[name] = draw(attachments | json_values)
        elif name in ("chat_jid", "sender"):
            body[name] = draw(jids() | field_values)
        else:
            body[name] = draw(field_values)
    for name in draw(st.lists(st.sampled_from(["chat_jid", "sender", "content"]), max_size=1)):
        body.pop(name, None)
    return body


FOLDER_NAMES = ["main", "fz", "fz/a", "fz/b", "main/sub"]
folder_paths = st.one_of(
    st.sampled_from(FOLDER_NAMES),
    st.lists(
        st.sampled_from(["fz", "a", "b", "..", ".", "", "A", "x y", "é", "{sender}"]) | atoms,
        min_size=1,
        max_size=4,
    ).map("/".join),
    nasty_text,
)
match_keys = st.sampled_from(["platform", "room", "chat_jid", "sender", "verb", "Room", "", "x"])
match_ops = st.sampled_from(["=", "!=", "~", "==", ""])


@st.composite
def match_expressions(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 7)) == 0:
        return draw(json_values)
    tokens = [
        draw(match_keys) + draw(match_ops) + draw(atoms | st.text(max_size=6) | jids())
        for _ in range(draw(st.integers(0, 3)))
    ]
    return draw(st.sampled_from([" ", "  ", "\t", "\n"])).join(tokens)


targets = st.one_of(
    st.sampled_from(FOLDER_NAMES),
    st.builds(
        lambda folder, sep, fragment: f"{folder}{sep}{fragment}",
        st.sampled_from([*FOLDER_NAMES, "{sender}", "fz/{sender}", "../main", "/main", "main/"]),
        st.sampled_from(["#", "", "/", "#/"]),
        st.sampled_from(["observe", "deploy", "", "..", "a b", "Observe", "x" * 300, "\ud800"]),
    ),
    folder_paths,
    json_values,
)
seqs = st.one_of(
    st.integers(min_value=-(2**33), max_value=2**33),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(
        ["1", " 7 ", "+3", "-4", "\uff11\uff12", "²", "٣", "1e3", "0x10", "", "-", "1.0"]
    ),
    json_scalars,
)


@st.composite
def route_rows(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    row: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        row["seq"] = draw(seqs)
    if draw(st.booleans()):
        row["match"] = draw(match_expressions())
    if draw(st.integers(0, 9)):
        row["target"] = draw(targets)
    if draw(st.integers(0, 9)) == 0:
        row[draw(st.sampled_from(["id", "mode", "x", ""]))] = draw(json_scalars)
    return row


folder_bodies = st.one_of(
    st.fixed_dictionaries(
        {"path": folder_paths},
        optional={
            "persona": nasty_text,
            "provider": nasty_text,
            "model": nasty_text,
            "engagement_ttl": st.sampled_from(
                ["30m", "0", "1h", "-5m", "99999999999999999999h", "1e400s", "m", "\ud800"]
            )
            | nasty_text,
            "session": st.sampled_from(["per-chat", "shared", "x"]) | nasty_text,
            "role": nasty_text,
            "mirror": st.lists(jids() | nasty_text, max_size=3),
        },
    ),
    json_values,
)


@st.composite
def route_writes(draw: st.DrawFn) -> tuple[str, str, bytes | None]:
    """One request to a route or folder writer: (method, path, body)."""
    kind = draw(st.sampled_from(["add", "add", "set", "set", "delete", "folder", "unfolder"]))
    if kind == "add":
        return "POST", "/api/v1/routes", encode(draw(route_rows()))
    if kind == "set":
        return (
            "PUT",
            "/api/v1/routes",
            encode(draw(st.lists(route_rows(), max_size=4) | json_values)),
        )
    if kind == "delete":
        # Not empty and not ending in "/": Starlette redirects such paths (307), by design.
        route_id = draw(
            st.integers(min_value=-(2**70), max_value=2**70).map(str)
            | st.integers(min_value=0, max_value=20).map(str)
            | nasty_text.filter(lambda t: t[:2000] and not t[:2000].endswith("/")).map(
                lambda t: quote(t[:2000].encode("utf-8", "surrogatepass"), safe="")
            )
        )
        return "DELETE", f"/api/v1/routes/{route_id}", None
    if kind == "folder":
        return "POST", "/api/v1/folders", encode(draw(folder_bodies))
    # (An empty path would end in "/", which Starlette answers with a redirect; httpx refuses
    # URLs over 64 KiB.)
    path = draw(folder_paths.filter(lambda p: p.strip("/")))[:2000].encode("utf-8", "surrogatepass")
    return "DELETE", f"/api/v1/folders/{quote(path, safe='/')}", None


def encode(value: Any) -> bytes:
    """JSON as a client would send it; lone surrogates travel as ``\\ud800`` escapes."""
    return json.dumps(value).encode("ascii")


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """Bodies that are not JSON text: random bytes, truncated JSON, invalid UTF-8 inside JSON."""
    valid = encode({"chat_jid": CHAT, "sender": SENDER, "content": draw(st.text(max_size=30))})
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if kind == 2:
        at = draw(st.integers(0, len(valid)))
        junk = draw(
            st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00"])
        )
        return valid[:at] + junk + valid[at:]
    if kind == 3:
        return valid.replace(b'"hello', b'"\xc0\xaf') + draw(st.binary(max_size=4))
    return draw(
        st.sampled_from([b"", b"null", b"[]", b"{}", b"1", b'"x"', b"{" * 5000, b"[" * 100_000])
    )


# --------------------------------------------------------------------------- harness


@dataclass
class Harness:
    """The gateway over a data directory, driven from synchronous code on its own loop."""

    loop: asyncio.Runner
    gateway: Gateway
    client: httpx.AsyncClient
    db: sqlite3.Connection
    #: ``(id, chat_jid)`` of every message the server accepted, so a refusal of a reused pair
    #: is not mistaken for a leftover.
    accepted: set[tuple[str, str]] = field(default_factory=set)

    def run(self, coro: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await coro

        return self.loop.run(wrapped())

    def request(self, method: str, path: str, body: bytes | None = None) -> httpx.Response:
        headers = {"content-type": "application/json"} if body is not None else {}
        response = self.run(self.client.request(method, path, content=body, headers=headers))
        assert_answered(response)
        return response

    def get(self, path: str, key: str) -> list[dict[str, Any]]:
        response = self.request("GET", path)
        assert response.status_code == 200, response.text
        value = response.json()[key]
        assert isinstance(value, list)
        return value

    def table(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/routes", "routes")

    def folders(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/folders", "folders")

    def counts(self) -> dict[str, int]:
        return {
            name: self.db.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            for name in MESSAGE_TABLES
        }

    def rows(self, message_id: str, chat_jid: str) -> list[tuple[str, str]]:
        return self.db.execute(
            "SELECT sender, content FROM messages WHERE id = ? AND chat_jid = ?",
            (message_id, chat_jid),
        ).fetchall()

    def restore_routing(self) -> None:
        """Folder main and the ``postroom init`` table again, after writers fuzzed them away."""
        if "main" not in {f["path"] for f in self.folders()}:
            created = self.request("POST", "/api/v1/folders", encode({"path": "main"}))
            assert created.status_code == 201, created.text
        table = [{"seq": 9999, "match": "", "target": "main"}]
        replaced = self.request("PUT", "/api/v1/routes", encode(table))
        assert replaced.status_code == 200, replaced.text

    def still_serving(self) -> None:
        """Health is 200, and a valid message is still accepted and stored once."""
        health = self.request("GET", "/healthz")
        assert health.status_code == 200, health.text
        message_id = uuid.uuid4().hex
        body = {"id": message_id, "chat_jid": CHAT, "sender": SENDER, "content": "still here"}
        response = self.request("POST", "/api/v1/messages", encode(body))
        assert response.status_code == 200, response.text
        assert response.json()["seq"] is not None
        assert self.rows(message_id, CHAT) == [(SENDER, "still here")]


def assert_answered(response: httpx.Response) -> None:
    """2xx or 4xx, never 5xx; a 4xx says why in one ``error`` string."""
    status = response.status_code
    assert status < 500, (status, response.request.method, response.request.url, response.text)
    assert 200 <= status < 300 or 400 <= status < 500, (status, response.text)
    if status >= 400:
        assert response.headers["content-type"].startswith("application/json"), response.headers
        payload = response.json()
        assert isinstance(payload, dict) and set(payload) == {"error"}, payload
        assert isinstance(payload["error"], str) and payload["error"].strip(), payload


def _clean_env() -> dict[str, str | None]:
    vendor = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
    return {name: None for name in os.environ if name.startswith("POSTROOM_") or name in vendor}


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI and ``configure_logging`` repoint logging; put the previous set-up back after."""
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
    """One ``postroom init`` data directory (folder main, route ``9999 "" → main``)."""
    directory = tmp_path_factory.mktemp("fuzz-template") / "d"
    with logging_kept():
        result = runner.invoke(cli_app, ["--data", str(directory), "init"], env=_clean_env())
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return directory


@pytest.fixture
def harness(initialized: Path, tmp_path: Path) -> Iterator[Harness]:
    data_dir = tmp_path / "d"
    shutil.copytree(initialized, data_dir)
    token = tomllib.loads((data_dir / "postroom.toml").read_text("utf-8"))["api"]["token"]
    with logging_kept(), asyncio.Runner() as loop:
        configure_logging(level="warning", stream=sys.stderr)

        async def build() -> tuple[Gateway, httpx.AsyncClient]:
            gateway = await Gateway.build(data_dir, load_config(data_dir, {}))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=gateway.http),
                base_url="http://test",
                headers={"Authorization": f"Bearer {token}"},
            )
            return gateway, client

        gateway, client = loop.run(build())
        db = sqlite3.connect(f"file:{data_dir / DATABASE_FILE}?mode=ro", uri=True)
        try:
            yield Harness(loop=loop, gateway=gateway, client=client, db=db)
        finally:
            db.close()

            async def close() -> None:
                await client.aclose()
                await gateway.close()

            loop.run(close())


# --------------------------------------------------------------------------- messages


def _check_message(harness: Harness, payload: bytes, body: Any) -> None:
    before = harness.counts()
    response = harness.request("POST", "/api/v1/messages", payload)
    if response.status_code >= 400:
        assert harness.counts() == before, (response.text, body)
        if isinstance(body, dict):
            message_id, chat = body.get("id"), body.get("chat_jid")
            if (
                isinstance(message_id, str)
                and isinstance(chat, str)
                and (message_id, chat) not in harness.accepted
            ):
                with contextlib.suppress(UnicodeEncodeError):
                    assert harness.rows(message_id, chat) == [], body
        return
    result = response.json()
    assert response.status_code == 200, result
    assert set(result) == {"id", "chat_jid", "seq", "duplicate", "decision"}, result
    harness.accepted.add((result["id"], result["chat_jid"]))
    if result["seq"] is not None:
        assert len(harness.rows(result["id"], result["chat_jid"])) == 1, result


def test_fuzzed_message_bodies_are_answered_and_never_half_stored(harness: Harness) -> None:
    @FUZZ
    @given(message_bodies())
    def check(body: Any) -> None:
        _check_message(harness, encode(body), body)

    check()
    harness.still_serving()


def test_raw_message_bodies_are_400_or_413_and_store_nothing(harness: Harness) -> None:
    @FEW
    @given(raw_bodies())
    def check(payload: bytes) -> None:
        before = harness.counts()
        response = harness.request("POST", "/api/v1/messages", payload)
        if response.status_code >= 400:
            assert harness.counts() == before, response.text

    check()
    harness.still_serving()


# Bodies the fuzzers found to crash the server (kept as plain cases so they stay checked).
FOUND_MESSAGES: list[dict[str, Any]] = [
    {"id": "\ud800"},
    {"chat_jid": "web:\ud800"},
    {"sender": "web:anon/\udfff"},
    {"attachments": [{"kind": "file", "data": "\ud800"}]},
    {"timestamp": "9999-12-31T23:59:59-23:59"},
    {"timestamp": "0001-01-01T00:00:00+23:59"},
]


@pytest.mark.parametrize("change", FOUND_MESSAGES, ids=repr)
def test_unstorable_message_fields_are_400_and_store_nothing(
    harness: Harness, change: dict[str, Any]
) -> None:
    body = {"id": uuid.uuid4().hex, "chat_jid": CHAT, "sender": SENDER, "content": "x"} | change
    before = harness.counts()
    response = harness.request("POST", "/api/v1/messages", encode(body))
    assert response.status_code == 400, response.text
    assert harness.counts() == before
    harness.still_serving()


# An empty message (nothing but white space) is refused (PIPELINE §1): it is checked apart.
contents = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=200),
    st.lists(atoms.filter(lambda a: a not in SURROGATES), max_size=10).map("".join),
    st.text(st.characters(codec="utf-8"), min_size=2000, max_size=20_000),
).filter(str.strip)


def test_an_accepted_message_is_stored_once_with_its_content(harness: Harness) -> None:
    @FUZZ
    @given(
        contents,
        st.sampled_from(["web:main/p", "telegram:group/../x", "web:a/b/c", "hook:x'; --/y"]),
        st.sampled_from([SENDER, "telegram:user/42", "web:'\"/..", "x:%2F..%2F"]),
    )
    def check(content: str, chat: str, sender: str) -> None:
        message_id = uuid.uuid4().hex
        body = {"id": message_id, "chat_jid": chat, "sender": sender, "content": content}
        response = harness.request("POST", "/api/v1/messages", encode(body))
        assert response.status_code == 200, response.text
        result = response.json()
        assert (result["id"], result["chat_jid"], result["duplicate"]) == (message_id, chat, False)
        if result["seq"] is None:  # dropped or a command: nothing stored, which is allowed
            assert harness.rows(message_id, chat) == []
            return
        assert harness.rows(message_id, chat) == [(sender, content)]
        again = harness.request("POST", "/api/v1/messages", encode(body))
        assert again.status_code == 200, again.text
        assert again.json()["duplicate"] is True
        assert harness.rows(message_id, chat) == [(sender, content)]

    check()
    harness.still_serving()


# --------------------------------------------------------------------------- route writers


def test_fuzzed_route_and_folder_writes_change_nothing_when_refused(harness: Harness) -> None:
    @FUZZ
    @given(st.lists(route_writes(), min_size=1, max_size=4))
    def check(writes: list[tuple[str, str, bytes | None]]) -> None:
        for method, path, payload in writes:
            table, folders = harness.table(), harness.folders()
            response = harness.request(method, path, payload)
            if response.status_code >= 400:
                assert harness.table() == table, (method, path, payload, response.text)
                assert harness.folders() == folders, (method, path, payload, response.text)
            elif method == "POST" and path == "/api/v1/routes":
                assert response.status_code == 201, response.text
                assert response.json()["id"] in {r["id"] for r in harness.table()}

    check()
    harness.restore_routing()
    harness.still_serving()


def test_raw_route_and_folder_bodies_change_nothing(harness: Harness) -> None:
    @FEW
    @given(
        st.sampled_from(
            [("POST", "/api/v1/routes"), ("PUT", "/api/v1/routes"), ("POST", "/api/v1/folders")]
        ),
        raw_bodies(),
    )
    def check(endpoint: tuple[str, str], payload: bytes) -> None:
        table, folders = harness.table(), harness.folders()
        response = harness.request(*endpoint, payload)
        if (endpoint, payload) == (("PUT", "/api/v1/routes"), b"[]"):
            assert response.status_code == 200, response.text  # an empty table is a table
            return
        assert 400 <= response.status_code < 500, response.text
        assert harness.table() == table
        assert harness.folders() == folders

    check()
    harness.restore_routing()
    harness.still_serving()


FOUND_WRITES: list[tuple[str, str, Any]] = [
    ("POST", "/api/v1/routes", {"seq": 1, "match": "room=\ud800", "target": "main"}),
    ("PUT", "/api/v1/routes", [{"seq": 1, "match": "sender=web:\udfff", "target": "main"}]),
    ("POST", "/api/v1/routes", {"seq": "²", "match": "", "target": "main"}),
    ("PUT", "/api/v1/routes", [{"seq": "٣", "target": "main"}, {"seq": "²", "target": "main"}]),
    ("DELETE", f"/api/v1/routes/{2**64}", None),
    ("DELETE", f"/api/v1/routes/{-(2**64)}", None),
    ("POST", "/api/v1/folders", {"path": "fz", "persona": "\ud800"}),
    ("POST", "/api/v1/folders", {"path": "fz", "model": "m\udc80"}),
    ("POST", "/api/v1/folders", {"path": "fz", "mirror": ["web:\ud800"]}),
    ("POST", "/api/v1/folders", {"path": "fz", "engagement_ttl": "99999999999999999999h"}),
]


@pytest.mark.parametrize("write", FOUND_WRITES, ids=repr)
def test_unstorable_route_and_folder_writes_are_4xx_and_change_nothing(
    harness: Harness, write: tuple[str, str, Any]
) -> None:
    method, path, body = write
    table, folders = harness.table(), harness.folders()
    response = harness.request(method, path, None if body is None else encode(body))
    assert 400 <= response.status_code < 500, response.text
    assert harness.table() == table
    assert harness.folders() == folders
    harness.still_serving()


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/messages?after_seq={2**64}",
        f"/api/v1/runs/{2**64}",
        f"/api/v1/jobs/{2**64}/retry",
        f"/api/v1/tasks/{2**64}/pause",
    ],
)
def test_ids_beyond_64_bits_are_4xx(harness: Harness, path: str) -> None:
    method = "GET" if "/runs/" in path or "messages" in path else "POST"
    response = harness.request(method, path)
    assert 400 <= response.status_code < 500, response.text
