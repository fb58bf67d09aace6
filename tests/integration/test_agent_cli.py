"""The agent side of the command line (PIPELINE §4, INTERFACES §1–§2): ``postroom init`` writes
the provider it detects and never a key, ``postroom usage`` sums the run records, ``postroom
doctor`` checks the configuration, the database, the routes and every provider account.

Commands run through Typer's ``CliRunner`` against ``postroom.cli.main.app``. Model APIs are the
fake of ``fake_llm.py`` served on a loopback port in the test's event loop: a fake Ollama
answering ``GET /api/tags`` for ``init``, a fake Anthropic answering the models list for
``doctor``. A command that talks to one runs in a worker thread (the CLI starts its own event
loop), while the fake keeps serving in the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import tomllib
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import structlog
from typer.testing import CliRunner, Result

from postroom.app.detect import ECHO_HINT
from postroom.app.providers import account_label
from postroom.cli.main import app
from postroom.config import CONFIG_FILE, DATABASE_FILE
from postroom.store import SqliteStore
from postroom.store.records import RunRecord

from fake_llm import FakeLLM, Received, Reply, serve

VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
KEY = "sk-ant-test-DOCTOR-secret-0000-9f3c"
LABEL = account_label("anthropic", 0, KEY)
module_loop = pytest.mark.asyncio(loop_scope="module")

runner = CliRunner()


# --------------------------------------------------------------------------- helpers


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration from the calling environment (CI may set some); no Ollama, and no
    server, answering on the ports the commands probe."""
    for name in list(os.environ):
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("OLLAMA_HOST", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("POSTROOM_SERVER__PORT", str(closed_port()))


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
        return runner.invoke(app, ["--data", str(data), *args])


def _describe(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}"


def ok(data: Path, *args: str) -> str:
    """Run a command that must succeed; return its stdout."""
    result = cli(data, *args)
    assert result.exception is None, _describe(result)
    assert result.exit_code == 0, _describe(result)
    assert result.stderr == "", _describe(result)
    return result.stdout


@contextlib.contextmanager
def leaks_recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Record the ResourceWarnings of connections a command left open, instead of failing on
    them at whatever later garbage collection happens to find them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield caught
        gc.collect()


def leaked(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def sent_key(request: Received) -> str:
    headers = request.headers
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def one_line(text: str) -> str:
    """*text* with every run of whitespace made one space (the console wraps long lines)."""
    return " ".join(text.split())


def config_text(data: Path) -> str:
    return (data / CONFIG_FILE).read_text("utf-8")


def written_config(data: Path) -> dict[str, Any]:
    return tomllib.loads(config_text(data))


def use_anthropic(data: Path, base_url: str) -> None:
    """Point the data directory's configuration at an Anthropic account with KEY."""
    text = config_text(data).replace('provider = "echo"', 'provider = "anthropic"')
    text += f'\n[providers.anthropic]\napi_keys = ["{KEY}"]\nbase_url = "{base_url}"\n'
    (data / CONFIG_FILE).write_text(text, "utf-8")


def checks_of(out: str) -> dict[str, tuple[str, str]]:
    """``doctor --json``: check name → (status, detail)."""
    found = json.loads(out)
    assert isinstance(found, list)
    return {c["check"]: (c["status"], c["detail"]) for c in found}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[tuple[FakeLLM, str]]:
    fake = FakeLLM()
    async with serve(fake) as base:
        yield fake, base


@pytest.fixture
def fake(server: tuple[FakeLLM, str]) -> tuple[FakeLLM, str]:
    server[0].reset()
    return server


# --------------------------------------------------------------------------- init


@pytest.mark.parametrize(
    ("variables", "provider"),
    [
        (("ANTHROPIC_API_KEY",), "anthropic"),
        (("OPENAI_API_KEY",), "openai"),
        (("GEMINI_API_KEY",), "gemini"),
        (("GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"), "anthropic"),
        (("GEMINI_API_KEY", "OPENAI_API_KEY"), "openai"),
    ],
)
def test_init_writes_the_provider_whose_key_is_set_and_never_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: tuple[str, ...], provider: str
) -> None:
    keys = {name: f"sk-test-{name.lower()}-SECRET-4242" for name in variables}
    for name, key in keys.items():
        monkeypatch.setenv(name, key)
    data = tmp_path / "d"
    out = ok(data, "init")

    config = written_config(data)
    assert config["defaults"]["provider"] == provider
    assert "providers" not in config  # no section, no key: keys stay in the environment
    reason = next(v for v in VENDOR_VARIABLES if v in variables)  # the first, in that order
    assert f"Provider: {provider} ({reason} is set)" in out
    assert one_line(ECHO_HINT) not in one_line(out)
    for key in keys.values():
        assert key not in config_text(data)
        assert key not in out
        assert key.encode() not in (data / DATABASE_FILE).read_bytes()


def test_init_with_no_key_and_no_ollama_writes_echo_and_says_how_to_add_a_model(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    out = ok(data, "init")
    assert written_config(data)["defaults"]["provider"] == "echo"
    assert "Provider: echo (no API key in the environment and no Ollama answering locally)" in (
        one_line(out)
    )
    assert "No language model is configured yet, so answers echo what you write." in out

    as_json = json.loads(ok(tmp_path / "e", "init", "--json"))
    assert (as_json["provider"], as_json["config_created"]) == ("echo", True)
    assert written_config(tmp_path / "e")["defaults"]["provider"] == "echo"


def test_init_prints_the_echo_hint_as_written(tmp_path: Path) -> None:
    """PIPELINE §4: the hint names the key to set, ``[defaults] provider``; printed as text,
    not as console markup (which would swallow the bracketed section name)."""
    out = ok(tmp_path / "d", "init")
    assert "then set [defaults] provider in postroom.toml" in one_line(out)
    assert one_line(ECHO_HINT) in one_line(out)


@module_loop
@pytest.mark.parametrize("with_scheme", [True, False])
async def test_init_detects_a_local_ollama_and_writes_its_first_model(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake: tuple[FakeLLM, str],
    with_scheme: bool,
) -> None:
    llm, base = fake
    tags = {
        "models": [
            {"name": "llama3.2:1b", "model": "llama3.2:1b", "size": 1321098329},
            {"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size": 397821319},
        ]
    }
    llm.answer("/api/tags", Reply(body=tags))
    # Ollama's own convention is host:port without a scheme; both forms work.
    monkeypatch.setenv("OLLAMA_HOST", base if with_scheme else base.removeprefix("http://"))
    data = tmp_path / "d"
    out = await asyncio.to_thread(ok, data, "init")

    config = written_config(data)
    assert config["defaults"]["provider"] == "ollama"
    assert config["providers"] == {"ollama": {"model": "llama3.2:1b"}}
    assert f"Provider: ollama (Ollama answers at {base})" in one_line(out)
    assert one_line(ECHO_HINT) not in one_line(out)
    assert [(r.method, r.path) for r in llm.received] == [("GET", "/api/tags")]


def test_init_again_keeps_the_provider_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d"
    ok(data, "init")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-LATER-0000-1111")
    out = ok(data, "init")
    assert written_config(data)["defaults"]["provider"] == "echo"
    assert "Kept the existing" in out and "Provider:" not in out


# --------------------------------------------------------------------------- usage


async def _insert_runs(database: Path, runs: list[RunRecord]) -> None:
    store = await SqliteStore.open(database)
    try:
        async with store.write() as tx:
            for run in runs:
                await tx.insert_run(run)
    finally:
        await store.close()


def _run(
    folder: str,
    model: str | None,
    started_at: datetime,
    usage: tuple[int, int] | None,
    cost: float | None,
    *,
    provider: str = "anthropic",
    outcome: str = "ok",
) -> RunRecord:
    return RunRecord(
        job_id=1,
        folder=folder,
        provider=provider,
        model=model,
        system="",
        messages=[],
        outcome=outcome,
        started_at=started_at,
        finished_at=started_at,
        usage=None if usage is None else {"input_tokens": usage[0], "output_tokens": usage[1]},
        cost=cost,
    )


@pytest.fixture
def used(tmp_path: Path) -> tuple[Path, str, str]:
    """An initialized data directory with runs on two recent days and one 40 days ago."""
    data = tmp_path / "d"
    ok(data, "init")
    now = datetime.now(UTC)
    # Noon of two different past days: never the same day, whatever the time of the run.
    recent = (now - timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
    earlier = recent - timedelta(days=1)
    sonnet, haiku = "claude-sonnet-4-6", "claude-haiku-4-5"
    runs = [
        _run("main", sonnet, recent, (1000, 200), 0.006),
        _run("main", sonnet, recent + timedelta(hours=1), (500, 100), 0.003),
        _run("main", sonnet, recent, None, None, outcome="error"),  # failed: no usage
        _run("main", haiku, recent, (2000, 400), 0.004),
        _run("team/writer", sonnet, earlier, (100, 10), 0.00045),
        _run("main", "echo", earlier, (0, 0), 0.0, provider="echo"),
        _run("main", sonnet, now - timedelta(days=40), (99_999, 9_999), 0.45),
    ]
    asyncio.run(_insert_runs(data / DATABASE_FILE, runs))
    return data, recent.date().isoformat(), earlier.date().isoformat()


def test_usage_sums_tokens_and_cost_per_day_folder_and_model(
    used: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # the table's columns at full width
    data, recent, earlier = used
    rows = json.loads(ok(data, "usage", "--json"))
    assert rows == [
        {
            "day": earlier,
            "folder": "main",
            "provider": "echo",
            "model": "echo",
            "runs": 1,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost": 0.0,
        },
        {
            "day": earlier,
            "folder": "team/writer",
            "provider": "anthropic",
            "model": "claude-sonnet-4-6",
            "runs": 1,
            "input_tokens": 100,
            "output_tokens": 10,
            "cost": 0.00045,
        },
        {
            "day": recent,
            "folder": "main",
            "provider": "anthropic",
            "model": "claude-haiku-4-5",
            "runs": 1,
            "input_tokens": 2000,
            "output_tokens": 400,
            "cost": 0.004,
        },
        {
            "day": recent,
            "folder": "main",
            "provider": "anthropic",
            "model": "claude-sonnet-4-6",
            "runs": 3,
            "input_tokens": 1500,
            "output_tokens": 300,
            "cost": 0.009,
        },
    ]

    # --days reaches further back.
    older = json.loads(ok(data, "usage", "--days", "60", "--json"))
    assert len(older) == 5
    assert (older[0]["input_tokens"], older[0]["cost"]) == (99_999, 0.45)

    out = ok(data, "usage")
    assert "Total: 6 runs, $0.0135" in out
    for text in (recent, earlier, "team/writer", "claude-haiku-4-5"):
        assert text in out


def test_usage_without_runs_says_so(tmp_path: Path) -> None:
    data = tmp_path / "d"
    ok(data, "init")
    assert ok(data, "usage").strip() == "No runs in that period."
    assert json.loads(ok(data, "usage", "--json")) == []


# --------------------------------------------------------------------------- doctor


def test_doctor_on_a_fresh_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "d"
    ok(data, "init")
    checks = checks_of(ok(data, "doctor", "--json"))
    assert list(checks) == [
        "config",
        "database",
        "routes",
        "agent files",
        "api",
        "provider echo",
        "model",
        "server",
    ]
    assert {name: status for name, (status, _) in checks.items()} == {
        "config": "ok",
        "database": "ok",
        "routes": "ok",
        "agent files": "ok",
        "api": "ok",
        "provider echo": "ok",
        "model": "warning",
        "server": "warning",
    }
    assert checks["routes"][1] == "1 routes, every target exists"
    assert "1 folders" in checks["database"][1]
    assert checks["model"][1] == ECHO_HINT
    assert "is not running" in checks["server"][1]

    out = ok(data, "doctor")
    assert "✓ routes: 1 routes, every target exists" in out
    assert "! model: No language model is configured yet" in one_line(out)


@module_loop
async def test_doctor_checks_each_provider_account_with_one_cheap_call(
    tmp_path: Path, fake: tuple[FakeLLM, str]
) -> None:
    llm, base = fake
    models = {
        "data": [
            {
                "id": "claude-sonnet-4-6",
                "type": "model",
                "display_name": "Claude Sonnet 4.6",
                "created_at": "2026-01-01T00:00:00Z",
            }
        ],
        "has_more": False,
        "first_id": "claude-sonnet-4-6",
        "last_id": "claude-sonnet-4-6",
    }
    llm.answer("/v1/models", Reply(body=models))
    data = tmp_path / "d"
    await asyncio.to_thread(ok, data, "init")
    use_anthropic(data, base)

    with leaks_recorded():
        checks = checks_of(await asyncio.to_thread(ok, data, "doctor", "--json"))
    assert checks[f"provider {LABEL}"] == (
        "ok",
        f"anthropic account '{LABEL}': key accepted; the API lists claude-sonnet-4-6",
    )
    assert "model" not in checks  # no echo warning: a real provider is the default
    assert not any(status == "error" for status, _ in checks.values())
    (request,) = llm.received
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert sent_key(request) == KEY


@module_loop
async def test_doctor_names_a_refused_account_by_its_label_never_its_key(
    tmp_path: Path, fake: tuple[FakeLLM, str]
) -> None:
    llm, base = fake
    refused = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    llm.answer("/v1/models", Reply(status=401, body=refused), Reply(status=401, body=refused))
    data = tmp_path / "d"
    await asyncio.to_thread(ok, data, "init")
    use_anthropic(data, base)

    with leaks_recorded():
        result = await asyncio.to_thread(cli, data, "doctor", "--json")
        text = await asyncio.to_thread(cli, data, "doctor")
    assert result.exit_code == 1, _describe(result)
    checks = checks_of(result.stdout)
    assert checks[f"provider {LABEL}"] == (
        "error",
        f"anthropic account '{LABEL}': the API key was refused (HTTP 401)",
    )
    assert text.exit_code == 1, _describe(text)
    assert f"✗ provider {LABEL}: anthropic account" in text.stdout
    for output in (result.stdout, result.stderr, text.stdout, text.stderr):
        assert KEY not in output


@module_loop
async def test_doctor_closes_the_connections_it_opens(
    tmp_path: Path, fake: tuple[FakeLLM, str]
) -> None:
    """A provider check makes one call per account and then lets go of its HTTP client: no
    socket is left for the garbage collector to find (pytest runs with warnings as errors)."""
    llm, base = fake
    llm.answer("/v1/models", Reply(body={"data": [], "has_more": False}))
    data = tmp_path / "d"
    await asyncio.to_thread(ok, data, "init")
    use_anthropic(data, base)
    with leaks_recorded() as caught:
        checks = checks_of(await asyncio.to_thread(ok, data, "doctor", "--json"))
    assert checks[f"provider {LABEL}"][0] == "ok"
    assert leaked(caught) == []


def test_doctor_reports_an_empty_route_table_as_an_error(tmp_path: Path) -> None:
    data = tmp_path / "d"
    ok(data, "init")
    (route,) = json.loads(ok(data, "routes", "list", "--json"))
    ok(data, "routes", "rm", str(route["id"]))

    result = cli(data, "doctor", "--json")
    assert result.exit_code == 1, _describe(result)
    status, detail = checks_of(result.stdout)["routes"]
    assert status == "error"
    assert detail.startswith("the route table is empty: nothing is answered")
    assert "postroom routes add" in detail
