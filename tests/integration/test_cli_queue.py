"""The queue commands of the CLI (INTERFACES §2): ``send`` enqueues a turn, ``jobs list|retry|
cancel``, ``runs show``, and ``serve``'s refusals.

Commands run through Typer's ``CliRunner`` against ``postroom.cli.main.app``; ``serve`` on a
non-loopback address runs as a subprocess (it must refuse before it listens). A run record is
produced by the gateway's real workers with the echo provider, run in-process between two
commands over the same data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner, Result

from postroom.app.gateway import Gateway
from postroom.cli.main import app
from postroom.config import load_config
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
VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
CHAT = "web:main/anon-1"
SENDER = "web:anon/1"

runner = CliRunner()


# --------------------------------------------------------------------------- helpers


def _clean_env() -> dict[str, str | None]:
    """Unset every configuration variable of the calling environment (CI may set some)."""
    return {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES
    }


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI points logging at the stream ``CliRunner`` lends it, which is closed once the
    command ends; put the previous set-up back so later tests never log into a closed file."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


def cli(data: Path, *args: str) -> Result:
    with logging_kept():
        return runner.invoke(app, ["--data", str(data), *args], env=_clean_env())


def _describe(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}"


def ok(data: Path, *args: str) -> str:
    """Run a command that must succeed; return its stdout."""
    result = cli(data, *args)
    assert result.exception is None, _describe(result)
    assert result.exit_code == 0, _describe(result)
    assert result.stderr == "", _describe(result)
    return result.stdout


def ok_json(data: Path, *args: str) -> Any:
    """Run a ``--json`` command; stdout must be one JSON document and nothing else."""
    return json.loads(ok(data, *args, "--json"))


def assert_one_sentence(stderr: str) -> str:
    """INTERFACES §2: an error is one clear sentence on stderr, never a traceback."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {stderr!r}"
    sentence = lines[0].strip()
    assert len(sentence) > 10, sentence
    assert sentence.endswith((".", "!", "?", ")")), f"not a sentence: {sentence!r}"
    return sentence


def bad(data: Path, *args: str) -> str:
    """Run a command that must fail as a user mistake; return its one-sentence error."""
    result = cli(data, *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), _describe(result)
    assert result.exit_code == 1, _describe(result)
    assert result.stdout == "", _describe(result)
    return assert_one_sentence(result.stderr)


def send(data: Path, text: str, *, chat_jid: str = CHAT, message_id: str | None = None) -> Any:
    extra = ["--id", message_id] if message_id else []
    out = ok(data, "send", "--json", "--chat-jid", chat_jid, "--sender", SENDER, *extra, "--", text)
    decision = json.loads(out)
    assert isinstance(decision, dict)
    assert set(decision) == DECISION_KEYS
    return decision


def jobs(data: Path, *args: str) -> list[dict[str, Any]]:
    listed = ok_json(data, "jobs", "list", *args)
    assert isinstance(listed, list), "jobs list --json prints a bare JSON array"
    for job in listed:
        assert set(job) >= JOB_KEYS, job
    return listed


def answer_queued_turns(data: Path) -> None:
    """Run the gateway's workers over *data* until no turn is queued or running."""

    async def body() -> None:
        gateway = await Gateway.build(data, load_config(data, {}))
        await gateway.workers.start()
        try:
            async with asyncio.timeout(20):
                while True:
                    pending = [
                        job
                        for status in ("queued", "running")
                        for job in await gateway.services.turns.list_jobs(status=status)
                    ]
                    if not pending:
                        break
                    await asyncio.sleep(0.02)
        finally:
            await gateway.workers.stop()
            await gateway.close()

    with logging_kept():
        configure_logging(level="warning", stream=sys.stderr)
        asyncio.run(body())


def _subprocess_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("POSTROOM_") and k not in VENDOR_VARIABLES
    }
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.fixture(scope="module")
def initialized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory made by ``postroom init``, copied for every test."""
    directory = tmp_path_factory.mktemp("template") / "d"
    ok(directory, "init")
    return directory


@pytest.fixture
def data(initialized: Path, tmp_path: Path) -> Path:
    """A fresh initialized data directory: folder main, route ``9999 "" → main``."""
    directory = tmp_path / "d"
    shutil.copytree(initialized, directory)
    return directory


# --------------------------------------------------------------------------- send and jobs list


def test_send_enqueues_a_turn_that_jobs_list_shows(data: Path) -> None:
    assert jobs(data) == []

    decision = send(data, "hello queue", message_id="m-1")
    assert decision["action"] == "fire"
    assert decision["folder"] == "main"
    job_id = decision["job_id"]
    assert isinstance(job_id, int) and not isinstance(job_id, bool)

    (job,) = jobs(data)
    assert job["id"] == job_id
    assert job["status"] == "queued"
    assert job["folder"] == "main"
    assert job["chat_jid"] == CHAT
    assert job["topic"] == ""
    assert job["message_ids"] == ["m-1"]
    assert job["started_at"] is None
    assert job["finished_at"] is None
    assert isinstance(job["priority"], int)
    assert isinstance(job["max_attempts"], int)

    # A message arriving while the turn is queued joins it (PIPELINE §2): no second job.
    again = send(data, "and another thing", message_id="m-2")
    assert again["job_id"] == job_id
    (job,) = jobs(data)
    assert job["message_ids"] == ["m-1", "m-2"]

    # Another chat is another conversation, so another job.
    other = send(data, "elsewhere", chat_jid="web:main/anon-2", message_id="m-3")
    assert other["job_id"] != job_id
    assert {j["id"] for j in jobs(data)} == {job_id, other["job_id"]}


def test_a_miss_enqueues_nothing(data: Path) -> None:
    ok(data, "routes", "set", str(_write(data.parent / "empty.json", [])))
    decision = send(data, "nobody listens")
    assert (decision["action"], decision["layer"], decision["job_id"]) == ("ignore", "miss", None)
    assert jobs(data) == []


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), "utf-8")
    return path


def test_jobs_list_filters_by_status(data: Path) -> None:
    first = send(data, "one")["job_id"]
    second = send(data, "two", chat_jid="web:main/anon-2")["job_id"]
    ok(data, "jobs", "cancel", str(first))

    assert [j["id"] for j in jobs(data, "--status", "queued")] == [second]
    cancelled = jobs(data, "--status", "cancelled")
    assert [j["id"] for j in cancelled] == [first]
    assert cancelled[0]["status"] == "cancelled"
    assert jobs(data, "--status", "done") == []
    assert {j["id"] for j in jobs(data)} == {first, second}

    sentence = bad(data, "jobs", "list", "--status", "sleeping")
    assert "sleeping" in sentence


def test_jobs_list_prints_a_table_without_json(data: Path) -> None:
    job_id = send(data, "hello")["job_id"]
    out = ok(data, "jobs", "list")
    assert re.search(rf"\b{job_id}\b", out)
    assert "queued" in out
    assert "main" in out
    assert CHAT in out
    assert not out.lstrip().startswith(("[", "{"))


# --------------------------------------------------------------------------- retry and cancel


def test_jobs_cancel_then_retry(data: Path) -> None:
    job_id = send(data, "hello")["job_id"]

    out = ok(data, "jobs", "cancel", str(job_id))
    assert str(job_id) in out
    assert [j["status"] for j in jobs(data)] == ["cancelled"]

    retried = ok_json(data, "jobs", "retry", str(job_id))
    assert set(retried) >= JOB_KEYS
    assert retried["id"] == job_id
    assert retried["status"] == "queued"
    assert [j["status"] for j in jobs(data)] == ["queued"]

    cancelled = ok_json(data, "jobs", "cancel", str(job_id))
    assert cancelled["status"] == "cancelled"
    out = ok(data, "jobs", "retry", str(job_id))
    assert str(job_id) in out
    assert [j["status"] for j in jobs(data)] == ["queued"]


def test_jobs_retry_and_cancel_refuse_the_wrong_state_in_one_sentence(data: Path) -> None:
    job_id = send(data, "hello")["job_id"]
    before = jobs(data)

    # A queued job cannot be retried.
    sentence = bad(data, "jobs", "retry", str(job_id))
    assert str(job_id) in sentence
    assert jobs(data) == before

    ok(data, "jobs", "cancel", str(job_id))
    cancelled = jobs(data)
    # A cancelled job cannot be cancelled again.
    sentence = bad(data, "jobs", "cancel", str(job_id))
    assert str(job_id) in sentence
    assert jobs(data) == cancelled


def test_jobs_retry_and_cancel_of_an_unknown_job_exit_1(data: Path) -> None:
    for action in ("retry", "cancel"):
        sentence = bad(data, "jobs", action, "4242")
        assert "4242" in sentence
        sentence = bad(data, "jobs", action, "4242", "--json")
        assert "4242" in sentence
    assert jobs(data) == []


def test_a_finished_job_can_be_neither_cancelled_nor_retried(data: Path) -> None:
    job_id = send(data, "finish me")["job_id"]
    answer_queued_turns(data)
    (job,) = jobs(data)
    assert job["status"] == "done"
    assert isinstance(job["started_at"], str)
    assert isinstance(job["finished_at"], str)
    for action in ("retry", "cancel"):
        assert str(job_id) in bad(data, "jobs", action, str(job_id))
    assert jobs(data) == [job]


# --------------------------------------------------------------------------- runs show


def _run_id(data: Path) -> tuple[int, dict[str, Any]]:
    history = ok_json(data, "messages", "--chat-jid", CHAT)
    replies = [m for m in history if m["message_type"] == "assistant"]
    assert len(replies) == 1, history
    reply = replies[0]
    assert isinstance(reply["run_id"], int)
    return reply["run_id"], reply


def test_runs_show_prints_the_system_prompt_the_messages_and_the_output(data: Path) -> None:
    job_id = send(data, "tell me about tides")["job_id"]
    answer_queued_turns(data)
    run_id, reply = _run_id(data)
    (main,) = ok_json(data, "folders", "list")
    persona = main["persona"]
    assert persona

    record = ok_json(data, "runs", "show", str(run_id))
    assert set(record) >= RUN_KEYS
    assert record["id"] == run_id
    assert record["job_id"] == job_id
    assert record["folder"] == "main"
    assert record["provider"] == "echo"
    assert persona in record["system"]
    assert any("tell me about tides" in str(m.get("content")) for m in record["messages"])
    assert record["output"] == reply["content"]
    assert record["outcome"] == "ok"
    assert record["error"] is None

    out = ok(data, "runs", "show", str(run_id))
    assert str(run_id) in out
    assert persona in out, "the system prompt is shown"
    assert record["system"].splitlines()[-1] in out
    assert "tell me about tides" in out, "the messages are shown"
    for line in record["output"].splitlines():
        assert line in out, "the output is shown"
    # The sections come in order: the system prompt, the messages, then the output (the echo
    # provider's output repeats the message, so the text appears twice).
    system_at = out.index(persona)
    message_at = out.index("tell me about tides")
    output_at = out.rindex(record["output"].splitlines()[-1])
    assert system_at < message_at < output_at


def test_runs_show_of_an_unknown_run_exits_1(data: Path) -> None:
    assert "777" in bad(data, "runs", "show", "777")
    assert "777" in bad(data, "runs", "show", "777", "--json")


# --------------------------------------------------------------------------- serve


def test_serve_help(data: Path) -> None:
    out = ok(data, "serve", "--help")
    assert "--host" in out
    assert "--port" in out


def test_serve_on_an_uninitialized_directory_exits_1(tmp_path: Path) -> None:
    directory = tmp_path / "empty"
    result = cli(directory, "serve", "--port", "0")
    assert result.exit_code == 1, _describe(result)
    assert result.stdout == ""
    assert "postroom init" in assert_one_sentence(result.stderr)
    assert not (directory / "postroom.db").exists()


def test_serve_on_a_public_address_without_a_token_refuses_to_start(data: Path) -> None:
    config = data / "postroom.toml"
    text = config.read_text("utf-8")
    without_token = re.sub(r"(?m)^token\s*=.*\n", "", text)
    assert without_token != text
    config.write_text(without_token, "utf-8")
    assert load_config(data, {}).api.token == ""

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "postroom",
            "--data",
            str(data),
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=_subprocess_env(),
        cwd=data.parent,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert "serving on" not in done.stderr
    sentence = assert_one_sentence(done.stderr)
    assert "0.0.0.0" in sentence
    assert "token" in sentence.lower()
