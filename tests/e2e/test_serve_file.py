"""``DIR/serve.json`` (INTERFACES §1): while ``postroom serve`` runs it records its pid, host and
port, and the commands that talk to the server — ``doctor``, ``channels``, ``chat``, ``send
--wait`` — find it there, on whatever port it was started; the file goes when the server stops,
and a file left by a dead process is ignored."""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e_harness import ServerProcess, postroom_cli, wait_for

CHAT = "telegram:group/5"
SENDER = "telegram:user/ana"


def _checks(out: str) -> dict[str, tuple[str, str]]:
    return {c["check"]: (c["status"], c["detail"]) for c in json.loads(out)}


def test_the_cli_finds_the_running_server_through_serve_json(
    data_dir: Path, start_server: Callable[..., ServerProcess]
) -> None:
    server = start_server()
    record_file = data_dir / "serve.json"
    record = json.loads(record_file.read_text("utf-8"))
    assert server.proc is not None
    assert record == {"pid": server.proc.pid, "host": "127.0.0.1", "port": server.port}
    assert stat.S_IMODE(record_file.stat().st_mode) == 0o600
    assert server.port != 8484  # started with --port 0: the configuration says another port

    doctor = postroom_cli(data_dir, "doctor", "--json")
    assert _checks(doctor.stdout)["server"] == (
        "ok",
        f"running at {server.url} (pid {server.proc.pid})",
    )
    channels = json.loads(postroom_cli(data_dir, "channels", "--json").stdout)
    assert (channels["server"], channels["running"]) == (server.url, True)
    # The terminal UI's first request goes to the running server (its folders answer).
    chat = postroom_cli(data_dir, "chat", "--folder", "nosuch")
    assert chat.returncode == 1
    assert chat.stderr == "error: There is no folder nosuch on the server; the folders are main.\n"

    # send --wait: the answer of the running server's turn (echo: what was sent).
    sent = postroom_cli(
        data_dir, "send", "--chat-jid", CHAT, "--sender", SENDER, "--wait", "--json", "ping 7"
    )
    assert sent.returncode == 0, sent.stderr
    payload: dict[str, Any] = json.loads(sent.stdout)
    assert set(payload) == {"decision", "answers"}
    assert payload["decision"]["action"] == "fire"
    (answer,) = payload["answers"]
    assert answer["message_type"] == "assistant" and "ping 7" in answer["content"]
    assert answer["metadata"]["job_id"] == payload["decision"]["job_id"]
    human = postroom_cli(
        data_dir, "send", "--chat-jid", CHAT, "--sender", SENDER, "--wait", "pong 8"
    )
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("fire → main")
    assert "🤖 main:" in human.stdout and "pong 8" in human.stdout.splitlines()[-1]

    assert server.interrupt() == 0
    assert not record_file.exists()


def test_send_wait_without_a_server_or_past_its_timeout_exits_1(
    data_dir: Path, start_server: Callable[..., ServerProcess]
) -> None:
    refused = postroom_cli(data_dir, "send", "--chat-jid", CHAT, "--sender", SENDER, "--wait", "hi")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: --wait needs a running server, and none runs on")
    messages = postroom_cli(data_dir, "messages", "--chat-jid", CHAT, "--json")
    assert json.loads(messages.stdout) == []  # refused before anything was stored

    # The echo provider holds each answer for 5 s; --wait gives up after 1 s.
    server = start_server({"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "5000"})
    slow = postroom_cli(
        data_dir, "send", "--chat-jid", CHAT, "--sender", SENDER, "--wait", "--timeout", "1", "x"
    )
    assert slow.returncode == 1, slow.stdout
    assert slow.stderr.startswith("error: No answer within 1 s: job ")
    assert slow.stderr.rstrip().endswith(("is still queued.", "is still running."))
    server.close()


def test_a_serve_json_left_by_a_dead_server_is_ignored(
    data_dir: Path, start_server: Callable[..., ServerProcess]
) -> None:
    server = start_server()
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGKILL)  # a crash: nothing removes the file
    wait_for(lambda: server.proc is not None and server.proc.poll() is not None, what="the kill")
    assert (data_dir / "serve.json").exists()

    doctor = postroom_cli(data_dir, "doctor", "--json")
    status, detail = _checks(doctor.stdout)["server"]
    assert status == "warning" and "postroom serve is not running on" in detail
    channels = json.loads(postroom_cli(data_dir, "channels", "--json").stdout)
    assert channels["running"] is False
    # A new server replaces the file with its own record.
    again = start_server()
    assert again.proc is not None
    assert json.loads((data_dir / "serve.json").read_text("utf-8"))["pid"] == again.proc.pid
