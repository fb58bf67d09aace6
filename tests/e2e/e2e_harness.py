"""End-to-end harness: ``postroom serve`` as a real subprocess, and an outbound-webhook sink.

The server is started with ``python -m postroom --data DIR serve --port 0`` and configured only
through ``POSTROOM_<A>__<B>`` variables (INTERFACES §1). Its stderr is read by a thread, which
finds the port in ``postroom serving on http://127.0.0.1:<port>`` and keeps every line for failure
reports. The sink is a Starlette app under uvicorn in a background thread that records every POST
(INTERFACES §4: the body, ``Idempotency-Key`` and ``X-Postroom-Signature``) and answers 200.

Every process a test starts is killed in the fixture's teardown, whatever the outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SECRET = "s3cret"
#: Load tests run many turns a minute in one chat on purpose: lift the loop guard's limit.
UNLIMITED_TURNS = {"POSTROOM_LIMITS__TURNS_PER_MINUTE": "1000000"}
READY = re.compile(r"postroom serving on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 30.0
#: Variables that would make ``init`` detect another provider or point the server elsewhere.
_SCRUBBED = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any postroom or vendor setting, plus *extra*."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_") and k not in _SCRUBBED
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def postroom_cli(
    data_dir: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postroom", "--data", str(data_dir), *args],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 15.0,
    interval: float = 0.05,
    what: str = "",
    details: Callable[[], str] | None = None,
) -> Any:
    """Poll *predicate* until it returns something truthy; fail with *what* (and *details*, e.g.
    the server's stderr) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            pytest.fail(f"timed out after {timeout:.1f} s waiting for {what or predicate}{extra}")
        time.sleep(interval)


# -- the server ------------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """One ``postroom serve`` subprocess."""

    data_dir: Path
    env: dict[str, str]
    #: Options before ``serve`` (``--log-level debug``).
    options: tuple[str, ...] = ()
    proc: subprocess.Popen[str] | None = None
    port: int | None = None
    lines: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _reader: threading.Thread | None = None
    _clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.port is not None, "the server is not running"
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        config = tomllib.loads((self.data_dir / "postroom.toml").read_text("utf-8"))
        return str(config["api"]["token"])

    def start(self) -> ServerProcess:
        self.lines = []
        self.port = None
        self._ready = threading.Event()
        command = [sys.executable, "-m", "postroom", "--data", str(self.data_dir), *self.options]
        self.proc = subprocess.Popen(
            [*command, "serve", "--port", "0"],
            env=clean_env(self.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self._reader = threading.Thread(
            target=self._read, args=(self.proc,), name="postroom-stderr", daemon=True
        )
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"postroom serve did not start:\n{self.stderr()}")
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))
            match = READY.search(line)
            if match and not self._ready.is_set():
                self.port = int(match.group(1))
                self._ready.set()

    def stderr(self, last: int = 80) -> str:
        return "\n".join(self.lines[-last:])

    def interrupt(self, timeout: float = 15.0) -> int:
        """SIGINT (graceful stop); the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout)
        self._join_reader()
        return code

    def kill(self) -> None:
        """SIGKILL (a crash), if the process is still alive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._join_reader()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
            self._reader = None
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def close(self) -> None:
        """Kill the process (if alive) and close every client made for it."""
        self.kill()
        for http in self._clients:
            http.close()
        self._clients.clear()

    def client(self, timeout: float = 10.0) -> Api:
        """An API client for the current port, closed with the server fixture."""
        http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=timeout,
        )
        self._clients.append(http)
        return Api(http, details=lambda: f"server stderr (last lines):\n{self.stderr(40)}")


@dataclass
class Api:
    """Thin helpers over the HTTP API (INTERFACES §4)."""

    http: httpx.Client
    details: Callable[[], str] | None = None

    def wait_for(self, predicate: Callable[[], Any], **kwargs: Any) -> Any:
        """:func:`wait_for` whose failure shows the server's stderr."""
        return wait_for(predicate, details=self.details, **kwargs)

    def post(self, chat_jid: str, sender: str, content: str, **extra: Any) -> dict[str, Any]:
        body = {"chat_jid": chat_jid, "sender": sender, "content": content, **extra}
        response = self.http.post("/api/v1/messages", json=body)
        assert response.status_code == 200, (response.status_code, response.text)
        return dict(response.json())

    def post_raw(self, body: Mapping[str, Any]) -> httpx.Response:
        return self.http.post("/api/v1/messages", json=dict(body))

    def messages(self, chat_jid: str, limit: int = 1000) -> list[dict[str, Any]]:
        response = self.http.get("/api/v1/messages", params={"chat_jid": chat_jid, "limit": limit})
        assert response.status_code == 200, response.text
        return list(response.json()["messages"])

    def of_type(self, chat_jid: str, message_type: str) -> list[dict[str, Any]]:
        return [m for m in self.messages(chat_jid) if m["message_type"] == message_type]

    def jobs(self, status: str | None = None, chat_jid: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": 1000}
        if status:
            params["status"] = status
        response = self.http.get("/api/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        jobs = list(response.json()["jobs"])
        return [j for j in jobs if chat_jid is None or j["chat_jid"] == chat_jid]

    def run(self, run_id: Any) -> dict[str, Any]:
        response = self.http.get(f"/api/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def routes(self) -> list[dict[str, Any]]:
        response = self.http.get("/api/v1/routes")
        assert response.status_code == 200, response.text
        return list(response.json()["routes"])

    def add_route(self, seq: int, match: str, target: str) -> int:
        response = self.http.post(
            "/api/v1/routes", json={"seq": seq, "match": match, "target": target}
        )
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def delete_route(self, route_id: int) -> None:
        response = self.http.delete(f"/api/v1/routes/{route_id}")
        assert response.status_code == 204, response.text

    def idle(self) -> bool:
        """No turn queued or running and no delivery pending, as ``/metrics`` counts them."""
        return idle_in_metrics(self.http.get("/metrics").text)

    def wait_idle(self, timeout: float = 15.0) -> None:
        """Wait until everything the server was given has been worked off: the positive
        signal to wait for before asserting that nothing more happened."""
        self.wait_for(self.idle, timeout=timeout, what="the queue and the outbox to be idle")

    def wait_answers(
        self, chat_jid: str, count: int, timeout: float = 15.0
    ) -> list[dict[str, Any]]:
        """Wait until the chat holds at least *count* assistant rows; return them."""
        found: list[dict[str, Any]] = []

        def enough() -> bool:
            found[:] = self.of_type(chat_jid, "assistant")
            return len(found) >= count

        self.wait_for(enough, timeout=timeout, what=f"{count} answer(s) in {chat_jid}")
        return found


_GAUGES = re.compile(
    r'^(postroom_queue_depth\{status="(?:queued|running)"\}|postroom_outbox_pending) (\S+)$', re.M
)


def idle_in_metrics(text: str) -> bool:
    """Whether a ``/metrics`` page shows no queued or running turn and no pending delivery."""
    gauges = {name: float(value) for name, value in _GAUGES.findall(text)}
    return len(gauges) == 3 and not any(gauges.values())


def message_text(message: Any) -> str:
    """The text of one provider-shaped message of a run record (a string or content blocks)."""
    if isinstance(message, str):
        return message
    if isinstance(message, Mapping):
        content = message.get("content", "")
        if isinstance(content, str):
            return content
        return "\n".join(message_text(block) for block in content or [])
    if isinstance(message, list):
        return "\n".join(message_text(m) for m in message)
    return str(message)


def prepare_data_dir(path: Path) -> Path:
    done = postroom_cli(path, "init")
    assert done.returncode == 0, done.stderr
    return path


# -- the outbound-webhook sink -----------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    body: dict[str, Any]
    raw: bytes
    idempotency_key: str | None
    signature: str | None
    received_at: float = field(default_factory=time.time)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.body["id"], self.body["chat_jid"], self.body["chunk"])

    def signature_valid(self, secret: str = SECRET, path: str = "/hook") -> bool:
        """INTERFACES §4: ``t=<unix>,v1=<HMAC of "<t>.<path>.<body>">``, t within 5 minutes of
        when it arrived."""
        match = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", self.signature or "")
        if match is None or abs(int(match.group(1)) - self.received_at) > 300:
            return False
        signed = f"{match.group(1)}.{path}.".encode() + self.raw
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return hmac.compare_digest(match.group(2), expected)


class ThreadServer:
    """An ASGI app served by uvicorn in a background thread on a free loopback port, for tests
    whose own thread is busy (a synchronous browser, a subprocess to watch)."""

    def __init__(self, app: Starlette, name: str) -> None:
        self._app = app
        self._name = name
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            ws="websockets-sansio",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=self._name, daemon=True
        )
        self._thread.start()
        wait_for(lambda: server.started, what=self._name)
        return self

    def connections(self) -> int:
        """Connections the server holds open now."""
        return len(self._server.server_state.connections) if self._server is not None else 0

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)


class Sink:
    """Records every POST to ``/hook`` and answers 200."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Delivery] = []
        self._handling = 0
        self._server = ThreadServer(
            Starlette(routes=[Route("/hook", self._hook, methods=["POST"])]), "sink"
        )

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def env(self, platform: str = "api") -> dict[str, str]:
        prefix = f"POSTROOM_CHANNELS__HTTP__{platform.upper()}__"
        return {prefix + "OUTBOUND_URL": self.url, prefix + "SECRET": SECRET}

    @property
    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self._received)

    def for_chat(self, chat_jid: str) -> list[Delivery]:
        return [d for d in self.received if d.body.get("chat_jid") == chat_jid]

    def quiet(self) -> bool:
        """No connection open and no request being read: every byte a client sent has been
        recorded or dropped (after a server was killed, its requests are all settled)."""
        with self._lock:
            handling = self._handling
        return handling == 0 and not self._server.connections()

    async def _hook(self, request: Request) -> JSONResponse:
        with self._lock:
            self._handling += 1
        try:
            raw = await request.body()
            delivery = Delivery(
                body=json.loads(raw),
                raw=raw,
                idempotency_key=request.headers.get("idempotency-key"),
                signature=request.headers.get("x-postroom-signature"),
            )
            with self._lock:
                self._received.append(delivery)
        finally:
            with self._lock:
                self._handling -= 1
        return JSONResponse({"ok": True})

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()


# -- the HTTP API from a test's event loop (the loop may also serve fakes) ---------------------


def api_client(server: ServerProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=httpx.Timeout(15.0),
    )


async def get_ok(http: httpx.AsyncClient, path: str, **params: Any) -> Any:
    """``GET`` *path*; its JSON, asserting a 200."""
    response = await http.get(path, params=params)
    assert response.status_code == 200, (path, response.status_code, response.text)
    return response.json()


async def list_jobs(http: httpx.AsyncClient, status: str | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": 1000}
    if status is not None:
        params["status"] = status
    return list((await get_ok(http, "/api/v1/jobs", **params))["jobs"])
