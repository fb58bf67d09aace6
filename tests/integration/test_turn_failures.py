"""How a turn meets a provider that misbehaves (PIPELINE §4), through the composition root
(``Gateway.build`` over a directory made by ``postroom init``, served by ``Gateway.run``) and
the real SDKs against the fake model server of ``fake_llm_servers``:

* a rate limit is not a failure: when every account rests, the turn waits for the first to be
  free without using an attempt, and no ``retry-after`` rests an account past ``llm.max_rest``;
* deadlines: a stream that trickles is cut at ``llm.call_timeout``, a run at
  ``llm.run_timeout``; either is a failed run;
* the chat is told what went wrong in one sentence naming the provider; the details (the SDK's
  exception, the API's message) are in the run record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from postroom.app.gateway import Gateway
from postroom.config import CONFIG_FILE, load_config
from postroom.core import InboundMessage, MessageType
from postroom.store.records import JobRecord, JobStatus

from fake_llm_servers import FakeServer, Reply, json_reply, serve_fake
from support import eventually

CHAT = "http:chat/1"
KEYS = ("sk-ant-test-FIRST-key-0000-1111aaaa", "sk-ant-test-SECOND-key-0000-2222bbbb")
#: Words that mean Python or an SDK spoke to the chat.
INTERNALS = ("Error", "Traceback", "attribute", "object", "NoneType", "Expecting value", "account")


def anthropic_text(text: str) -> Reply:
    return json_reply(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 3},
        }
    )


def anthropic_limited(retry_after: str) -> Reply:
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    return json_reply(body, status=429, headers={"retry-after": retry_after})


def anthropic_stream(pieces: Sequence[str], *, pause_s: float = 0.0, ends: bool = True) -> Reply:
    """A streamed answer, one text delta per piece, *pause_s* apart; cut short unless *ends*."""

    def frame(event: str, data: dict[str, Any]) -> bytes:
        return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    block = {"type": "text", "text": ""}
    frames = [
        frame("message_start", {"type": "message_start", "message": message}),
        frame(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
    ]
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        frames.append(
            frame(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    if ends:
        stop = {"stop_reason": "end_turn", "stop_sequence": None}
        frames += [
            frame("content_block_stop", {"type": "content_block_stop", "index": 0}),
            frame(
                "message_delta",
                {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 3}},
            ),
            frame("message_stop", {"type": "message_stop"}),
        ]
    return Reply(200, b"".join(frames), "text/event-stream", pieces=tuple(frames), every_s=pause_s)


def anthropic_trickle(pause_s: float) -> Reply:
    """A stream that starts well, then sends one small delta every *pause_s* for a minute."""
    return anthropic_stream(
        [f"{n} " for n in range(int(60 / pause_s))], pause_s=pause_s, ends=False
    )


@dataclass
class Served:
    gateway: Gateway
    fake: FakeServer

    async def send(self, text: str, *, id: str) -> int:
        """Ingest a message for the chat (as ``POST /api/v1/messages`` does); its turn's id."""
        result = await self.gateway.services.ingest.ingest(
            InboundMessage(
                id=id,
                chat_jid=CHAT,
                sender="http:user/1",
                content=text,
                timestamp=datetime.now(UTC),
                sender_name="Ann",
            )
        )
        assert result.decision.job_id is not None, result.decision.reason
        return result.decision.job_id

    async def job(self, job_id: int) -> JobRecord:
        return await self.gateway.services.turns.get_job(job_id)

    async def finished(self, job_id: int, *, timeout_s: float = 20.0) -> JobRecord:
        async def ended() -> bool:
            return (await self.job(job_id)).status not in (JobStatus.QUEUED, JobStatus.RUNNING)

        await eventually(ended, f"job {job_id} to end", timeout_s=timeout_s)
        return await self.job(job_id)

    async def notices(self) -> list[str]:
        rows = await self.gateway.services.history.messages(chat_jid=CHAT, limit=100)
        return [m.content for m in rows if m.message_type is MessageType.HOST]

    async def answers(self) -> list[str]:
        rows = await self.gateway.services.history.messages(chat_jid=CHAT, limit=100)
        return [m.content for m in rows if m.message_type is MessageType.ASSISTANT]

    async def runs(self, job_id: int) -> list[Any]:
        store = self.gateway.services.store
        async with store.read() as tx:
            ids = await tx._all("SELECT id FROM runs WHERE job_id = ? ORDER BY id", (job_id,))
            return [await tx.get_run(int(row[0])) for row in ids]


@pytest.fixture(scope="module")
def initialized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory made by ``postroom init``, once for the module (it takes seconds)."""
    directory = tmp_path_factory.mktemp("init") / "data"
    subprocess.run(
        [sys.executable, "-m", "postroom", "--data", str(directory), "init"],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    return directory


@pytest.fixture
def data(initialized: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(initialized, tmp_path / "data"))


@contextlib.asynccontextmanager
async def served(data: Path, settings: str) -> AsyncIterator[Served]:
    """``postroom serve`` in this event loop, with *settings* (TOML, ``{fake}`` for the fake
    server's URL) added to ``postroom.toml``."""
    async with serve_fake() as fake:
        config_file = data / CONFIG_FILE
        token = tomllib.loads(config_file.read_text("utf-8"))["api"]["token"]
        text = f'[api]\ntoken = "{token}"\n\n' + settings.replace("{fake}", fake.base_url)
        config_file.write_text(text, "utf-8")
        # A turn still running at the end (a deadline that did not hold) must not hold the
        # shutdown for the default 30 s.
        environ = {"POSTROOM_QUEUE__SHUTDOWN_GRACE": "0.2s"}
        gateway = await Gateway.build(data, load_config(data, environ))
        ready = asyncio.Event()
        task = asyncio.create_task(
            gateway.run(host="127.0.0.1", port=0, on_ready=lambda *_: ready.set()), name="gateway"
        )
        await eventually(lambda: ready.is_set() or task.done(), "the gateway to listen")
        assert not task.done(), task
        try:
            yield Served(gateway, fake)
        finally:
            gateway.request_stop()
            await asyncio.wait_for(task, 30)


def anthropic(*, keys: Sequence[str] = KEYS[:1], extra: str = "", **settings: str) -> str:
    llm = "".join(f'{key} = "{value}"\n' for key, value in settings.items())
    return (
        f'[defaults]\nprovider = "anthropic"\n\n[queue]\nmax_attempts = 1\n\n[llm]\n{llm}\n'
        f'[providers.anthropic]\nbase_url = "{{fake}}"\napi_keys = {json.dumps(list(keys))}\n'
        f"{extra}"
    )


# --------------------------------------------------------------------------- rate limits


async def test_when_every_account_rests_the_turn_waits_without_using_an_attempt(
    data: Path,
) -> None:
    """``max_attempts = 1``: had the rate limit used the attempt, the turn would have failed."""
    async with served(data, anthropic(keys=KEYS)) as server:
        server.fake.script(anthropic_limited("1"), anthropic_limited("30"))
        job_id = await server.send("hello?", id="m1")

        async def resting() -> bool:
            job = await server.job(job_id)
            return job.status is JobStatus.QUEUED and job.last_error is not None

        await eventually(resting, "the turn to wait for the accounts")
        waiting = await server.job(job_id)
        assert waiting.attempts == 0
        # The first account is free again in about a second: the turn waits for that one.
        now = datetime.now(UTC)
        assert now <= waiting.run_at <= now + timedelta(seconds=1.5), waiting.run_at
        server.fake.script(anthropic_text("sorry for the wait"))
        done = await server.finished(job_id)
        assert done.status is JobStatus.DONE and done.attempts == 0
        assert await server.answers() == ["sorry for the wait"]
        assert await server.notices() == []
        assert [r.outcome for r in await server.runs(job_id)] == ["rate_limited", "ok"]
        # Two 429s and the answer: the second account was never asked before its rest ended.
        keys = [r.headers["authorization"].split()[-1] for r in server.fake.requests]
        assert keys == [KEYS[0], KEYS[1], KEYS[0]]


@pytest.mark.parametrize("retry_after", ["1e15", "99999999999", "soon"])
async def test_no_retry_after_rests_an_account_past_max_rest(data: Path, retry_after: str) -> None:
    """``1e15`` seconds used to raise OverflowError into the chat; ``99999999999`` rested the
    account until the year 5195. Either, or one that cannot be read, is ``llm.max_rest``."""
    async with served(data, anthropic(max_rest="1s")) as server:
        server.fake.script(anthropic_limited(retry_after))
        job_id = await server.send("hello?", id="m1")

        async def resting() -> bool:
            return (await server.job(job_id)).last_error is not None

        await eventually(resting, "the turn to wait for the account")
        waiting = await server.job(job_id)
        assert waiting.run_at <= datetime.now(UTC) + timedelta(seconds=1)
        server.fake.script(anthropic_text("back"))
        done = await server.finished(job_id)
        assert (done.status, done.attempts) == (JobStatus.DONE, 0)
        assert await server.answers() == ["back"]


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize(
    ("deadlines", "sentence", "key"),
    [
        # A delta every 0.3 s for a minute: the call ends after 0.5 s.
        ({"call_timeout": "0.5s"}, "anthropic did not answer within 0.5s", "llm.call_timeout"),
        # Each call is within its own deadline, but the run as a whole is not.
        (
            {"call_timeout": "1m", "run_timeout": "0.5s"},
            "the turn took longer than 0.5s",
            "llm.run_timeout",
        ),
    ],
    ids=["call", "run"],
)
async def test_a_trickling_stream_is_cut_at_the_deadline(
    data: Path, deadlines: dict[str, str], sentence: str, key: str
) -> None:
    async with served(data, anthropic(extra="stream = true\n", **deadlines)) as server:
        server.fake.script(anthropic_trickle(0.3))
        job_id = await server.send("tell me a long story", id="m1")
        done = await server.finished(job_id, timeout_s=15)
        assert done.status is JobStatus.FAILED
        assert await server.notices() == [f"⚠️ could not answer (job {job_id}): {sentence}"]
        assert key in (done.last_error or "")
        (run,) = await server.runs(job_id)
        assert run.outcome == "error" and key in (run.error or "")


async def test_a_failed_deadline_is_retried_as_usual(data: Path) -> None:
    # A deadline the quick second answer meets on a loaded machine too; the trickle never does.
    settings = anthropic(call_timeout="3s", extra="stream = true\n").replace(
        "max_attempts = 1", 'max_attempts = 2\nbackoff_base = "0.1s"'
    )
    async with served(data, settings) as server:
        server.fake.script(anthropic_trickle(0.3), anthropic_stream(["quicker ", "this time"]))
        job_id = await server.send("hello", id="m1")
        done = await server.finished(job_id, timeout_s=60)
        assert (done.status, done.attempts) == (JobStatus.DONE, 1)
        assert await server.answers() == ["quicker this time"]


# --------------------------------------------------------------------------- errors people see


MALFORMED = [
    ("a JSON string", b'"just a string"', "application/json"),
    ("a list", b"[1, 2]", "application/json"),
    ("an error page", b"<html>502 Bad Gateway</html>", "application/json"),
]


#: A stream whose event is not JSON (every provider's stream, SSE or NDJSON, chokes on it).
BROKEN_STREAM = ("a broken stream", b"data: {not json}\n\n", "text/event-stream")


@pytest.mark.parametrize(
    ("what", "body", "media"),
    [*MALFORMED, BROKEN_STREAM],
    ids=[m[0] for m in [*MALFORMED, BROKEN_STREAM]],
)
@pytest.mark.parametrize("provider", ["anthropic", "openai", "gemini", "ollama"])
async def test_a_malformed_answer_is_one_sentence_in_the_chat_and_details_in_the_run(
    data: Path, provider: str, what: str, body: bytes, media: str
) -> None:
    """``AttributeError: 'str' object has no attribute 'choices'`` once reached a chat."""
    base_url = "{fake}/v1" if provider == "openai" else "{fake}"
    keys = "" if provider == "ollama" else 'api_keys = ["k-0123456789abcdef"]\n'
    stream = "true" if what == BROKEN_STREAM[0] else "false"
    if provider == "anthropic" and stream == "true":
        body = b"event: message_start\n" + body  # its SDK skips events without a name
    settings = (
        f'[defaults]\nprovider = "{provider}"\n\n[queue]\nmax_attempts = 1\n\n'
        f'[providers.{provider}]\nbase_url = "{base_url}"\nstream = {stream}\n{keys}'
    )
    async with served(data, settings) as server:
        server.fake.script(Reply(200, body, media))
        job_id = await server.send("hello", id="m1")
        done = await server.finished(job_id)
        assert done.status is JobStatus.FAILED
        (notice,) = await server.notices()
        assert notice == f"⚠️ could not answer (job {job_id}): {provider}'s answer could not be read"
        (run,) = await server.runs(job_id)
        assert run.outcome == "error" and run.error
        # The details are for the operator: the record says what the SDK choked on.
        assert any(word in run.error for word in ("Error", "choices", "content", "JSON")), run.error


async def test_a_server_error_names_the_provider_and_the_status(data: Path) -> None:
    async with served(data, anthropic()) as server:
        server.fake.script(
            json_reply(
                {"type": "error", "error": {"type": "api_error", "message": "db down"}}, status=500
            )
        )
        job_id = await server.send("hello", id="m1")
        await server.finished(job_id)
        (notice,) = await server.notices()
        assert notice == f"⚠️ could not answer (job {job_id}): anthropic answered HTTP 500"
        assert not any(word in notice for word in INTERNALS)
        (run,) = await server.runs(job_id)
        assert "db down" in run.error
