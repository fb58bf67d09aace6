"""``postroom serve`` at start-up, as a real subprocess: one server per data directory, files
its owner's alone, the token rule, and start-up errors that end the process at once.

PIPELINE §2 (one server per SQLite file), INTERFACES §1 (token rule, file modes).
"""

from __future__ import annotations

import importlib.util
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e_harness import ServerProcess, clean_env, postroom_cli

StartServer = Callable[..., ServerProcess]
#: Generous for a loaded machine: the interpreter and postroom's imports take most of it.
EXIT_WITHIN_S = 15.0


def _serve_expecting_failure(data_dir: Path, *args: str) -> tuple[str, float]:
    """Run ``serve`` that must refuse to start: its one-sentence stderr and how long it took."""
    started = time.monotonic()
    done = postroom_cli(data_dir, "serve", "--port", "0", *args, timeout=EXIT_WITHIN_S)
    elapsed = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0], elapsed


def _set_config(data_dir: Path, old: str, new: str) -> None:
    path = data_dir / "postroom.toml"
    text = path.read_text("utf-8")
    assert re.search(old, text, flags=re.MULTILINE), text
    path.write_text(re.sub(old, new, text, count=1, flags=re.MULTILINE), "utf-8")


def test_a_second_serve_on_the_same_data_directory_exits_naming_the_holder(
    start_server: StartServer, data_dir: Path
) -> None:
    first = start_server()
    assert first.proc is not None
    line, _ = _serve_expecting_failure(data_dir)
    assert f"process {first.proc.pid}" in line, line
    assert "already running" in line, line
    # The first one is untouched: it still answers, and its serve.json is still there.
    first.client().wait_idle()
    assert (data_dir / "serve.json").exists()
    # Once it stops, the directory is free again.
    assert first.interrupt() == 0
    start_server().client().wait_idle()


def test_files_and_directory_are_owner_only_from_the_start(
    start_server: StartServer, tmp_path: Path
) -> None:
    data = tmp_path / "fresh" / "data"
    done = postroom_cli(data, "init")
    assert done.returncode == 0, done.stderr
    server = start_server(data=data)
    api = server.client()
    api.post("api:room/1", "api:user/1", "hello")  # the WAL and shared memory now exist
    api.wait_idle()
    expected = {
        data: 0o700,
        data / "folders": 0o700,
        data / "postroom.toml": 0o600,
        data / "postroom.db": 0o600,
        data / "postroom.db-wal": 0o600,
        data / "postroom.db-shm": 0o600,
        data / "web-secret": 0o600,
        data / "serve.lock": 0o600,
        data / "serve.json": 0o600,
    }
    found = {path: stat.S_IMODE(path.stat().st_mode) for path in expected}
    assert {p.name: oct(m) for p, m in found.items()} == {
        p.name: oct(m) for p, m in expected.items()
    }


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("                        ", id="whitespace-only"),
        pytest.param("short-token", id="short"),
        pytest.param("a long token with spaces", id="inner-whitespace"),
    ],
)
def test_a_token_breaking_the_rule_is_refused(data_dir: Path, token: str) -> None:
    _set_config(data_dir, r'^token = ".*"$', f'token = "{token}"')
    line, _ = _serve_expecting_failure(data_dir)
    assert "[api] token" in line and "16 characters" in line, line
    assert not (data_dir / "serve.json").exists()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_start_up_errors_end_the_process_at_once(data_dir: Path, busy_port: int) -> None:
    """Each start-up error: one sentence, status 1, and the process is gone."""
    line, elapsed = _serve_expecting_failure(data_dir, "--port", str(busy_port))
    assert "Cannot listen" in line and "in use" in line, line
    assert elapsed < EXIT_WITHIN_S

    config = data_dir / "postroom.toml"
    original = config.read_text("utf-8")
    config.write_text(original + '\n[channels.telegram]\nenabled = true\ntoken = "x"\n', "utf-8")
    line, _ = _serve_expecting_failure(data_dir)
    assert "[channels.telegram]" in line and "token" in line, line

    if importlib.util.find_spec("llama_cpp") is None:
        config.write_text(original + "\n[providers.local]\n", "utf-8")
        line, _ = _serve_expecting_failure(data_dir)
        assert "llama-cpp-python" in line, line
    # Nothing was left behind that would stop the next start.
    assert not (data_dir / "serve.json").exists()


@pytest.mark.parametrize("after_s", [0.3, 1.0, 2.0])
def test_ctrl_c_during_start_up_ends_it_without_a_traceback(data_dir: Path, after_s: float) -> None:
    """Wherever start-up is when Ctrl-C comes (loading modules, opening the store, listening),
    the process ends at once, quietly."""
    process = subprocess.Popen(
        [sys.executable, "-m", "postroom", "--data", str(data_dir), "serve", "--port", "0"],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A test runner may start us with SIGINT ignored; a terminal never does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(after_s)  # the moment of the Ctrl-C, not a wait for something to happen
        process.send_signal(signal.SIGINT)
        code = process.wait(EXIT_WITHIN_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.stderr is not None
    errors = process.stderr.read()
    process.stderr.close()
    # 0 after a graceful stop; 130 (or the signal itself) when interrupted while starting.
    assert code in (0, 130, -signal.SIGINT), (code, errors)
    # (A Ctrl-C while the interpreter itself starts, before any of postroom runs, is Python's.)
    assert "Traceback" not in errors or "/postroom/" not in errors, errors
    assert not (data_dir / "serve.json").exists()
