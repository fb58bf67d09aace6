"""Folders are agents you can change (INTERFACES §1): the row is the truth for the persona and
every setting, every surface changes it through one function, the change reaches the next
turn, and ``AGENT.md`` mirrors the row both ways.

The server is the real one (``Gateway.build`` over a ``postroom init`` directory) with its
workers running, talking to a fake Anthropic Messages API through the real SDK, so "the next
turn uses it" is checked on the system prompt the provider actually receives.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs
from typer.testing import CliRunner, Result

from postroom.app.gateway import Gateway
from postroom.cli.main import app as cli_app
from postroom.config import load_config
from postroom.store.sqlite.migrate import available_migrations

from fake_llm import FakeLLM, Reply, serve
from support import api_client, cli_env, eventually, logging_kept

MESSAGES = "/v1/messages"
CHAT = "telegram:group/5"
SENDER = "telegram:user/ana"
FOLDER_KEYS = {
    "path",
    "persona",
    "provider",
    "model",
    "engagement_ttl",
    "session",
    "busy_policy",
    "role",
    "mirror",
    "budget_per_day",
    "parent",
    "created_at",
    "updated_at",
}

runner = CliRunner()


def cli(data_dir: Path, *args: str) -> Result:
    return runner.invoke(cli_app, ["--data", str(data_dir), *args], env=cli_env())


def ok(data_dir: Path, *args: str) -> str:
    result = cli(data_dir, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def refused(data_dir: Path, *args: str) -> str:
    result = cli(data_dir, *args)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.startswith("error: ")
    return " ".join(result.stderr.split())


def reply(text: str) -> Reply:
    return Reply(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 3},
        }
    )


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """``postroom init``: folder main, route ``9999 "" → main``."""
    directory = tmp_path / "d"
    with logging_kept():
        ok(directory, "init")
    return directory


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeLLM, str]]:
    llm = FakeLLM()
    async with serve(llm) as url:
        yield llm, url


@dataclass
class Server:
    gateway: Gateway
    client: httpx.AsyncClient
    fake: FakeLLM
    data_dir: Path

    async def turn(self, text: str, *, answer: str = "ok") -> dict[str, Any]:
        """Send *text* to main and return the request the provider received for it."""
        self.fake.answer(MESSAGES, reply(answer))
        before = len(self.fake.bodies(MESSAGES))
        response = await self.client.post(
            "/api/v1/messages", json={"chat_jid": CHAT, "sender": SENDER, "content": text}
        )
        assert response.status_code == 200, response.text
        await eventually(lambda: len(self.fake.bodies(MESSAGES)) > before, "the model call")
        body: dict[str, Any] = self.fake.bodies(MESSAGES)[-1]
        return body

    async def folder(self, path: str) -> dict[str, Any]:
        response = await self.client.get(f"/api/v1/folders/{path}")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found


@pytest.fixture
async def server(fresh: Path, fake: tuple[FakeLLM, str]) -> AsyncIterator[Server]:
    llm, url = fake
    config_file = fresh / "postroom.toml"
    text = config_file.read_text("utf-8").replace('provider = "echo"', 'provider = "anthropic"')
    config_file.write_text(
        text + f'\n[providers.anthropic]\napi_keys = ["sk-ant-test-0000"]\nbase_url = "{url}"\n'
    )
    with logging_kept():
        gateway = await Gateway.build(fresh, load_config(fresh, {}))
    await gateway.workers.start()
    try:
        async with api_client(gateway, fresh) as client:
            yield Server(gateway, client, llm, fresh)
    finally:
        await gateway.workers.stop()
        await gateway.close()


def _agent_file(data_dir: Path, path: str = "main") -> Path:
    return data_dir / "folders" / path / "AGENT.md"


def _edit_keeping_stamp(file: Path, text: str) -> None:
    """Replace the file's text with one of the same size and put its modification time back:
    an edit that a stamp check cannot see."""
    before = file.stat()
    assert len(text.encode()) == before.st_size
    file.write_text(text, "utf-8")
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))


def _edit(file: Path, text: str) -> None:
    """An edit as an editor makes it (a later modification time)."""
    before = file.stat()
    file.write_text(text, "utf-8")
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))


# --------------------------------------------------------------------------- every surface


async def test_a_persona_changed_by_patch_reaches_the_provider_on_the_next_turn(
    server: Server,
) -> None:
    first = await server.turn("hello")
    assert first["system"].startswith("You are Postroom's default agent.")

    response = await server.client.patch(
        "/api/v1/folders/main",
        json={"persona": "You are Atlas, the editor.", "model": "claude-opus-4-1"},
    )
    assert response.status_code == 200, response.text
    changed = response.json()
    assert set(changed) >= FOLDER_KEYS
    assert changed["persona"] == "You are Atlas, the editor."
    assert changed["updated_at"] > changed["created_at"]

    second = await server.turn("who are you?")
    assert second["system"].startswith("You are Atlas, the editor.")
    assert "default agent" not in second["system"]
    assert second["model"] == "claude-opus-4-1"
    # The file mirrors the row.
    text = _agent_file(server.data_dir).read_text("utf-8")
    assert 'model = "claude-opus-4-1"' in text and text.endswith("You are Atlas, the editor.\n")
    assert await server.folder("main") == changed


async def test_patch_takes_any_subset_null_unsets_and_refusals_change_nothing(
    server: Server,
) -> None:
    client = server.client
    response = await client.patch(
        "/api/v1/folders/main",
        json={"engagement_ttl": "10m", "busy_policy": "interrupt", "budget_per_day": 2.5},
    )
    assert response.status_code == 200, response.text
    folder = response.json()
    assert (folder["engagement_ttl"], folder["busy_policy"], folder["budget_per_day"]) == (
        "10m",
        "interrupt",
        2.5,
    )
    response = await client.patch("/api/v1/folders/main", json={"engagement_ttl": None})
    assert response.json()["engagement_ttl"] is None
    before = await server.folder("main")

    refusals = [
        ({"provider": "nosuchprovider"}, 400, "provider 'nosuchprovider' is not configured"),
        ({"engagement_ttl": "31d"}, 400, "engagement_ttl"),
        ({"session": "sometimes"}, 400, "session must be one of per-chat, shared"),
        ({"budget_per_day": -1}, 400, "budget_per_day"),
        ({"colour": "red"}, 400, "Unknown folder setting(s) colour"),
        ({}, 400, "Nothing to change"),
        ({"persona": "x" * 70_000}, 400, "persona is 70000 characters long"),
    ]
    for body, status, sentence in refusals:
        response = await client.patch("/api/v1/folders/main", json=body)
        assert response.status_code == status, (body, response.text)
        assert sentence in response.json()["error"], (body, response.text)
    response = await client.patch("/api/v1/folders/nowhere", json={"model": "m"})
    assert response.status_code == 404 and "There is no folder nowhere" in response.text
    response = await client.get("/api/v1/folders/nowhere")
    assert response.status_code == 404
    assert await server.folder("main") == before


async def test_an_edit_of_agent_md_is_imported_before_the_next_turn_and_audited(
    server: Server,
) -> None:
    await server.turn("hello")
    _edit(
        _agent_file(server.data_dir),
        '+++\nmodel = "claude-haiku-4-5"\nengagement_ttl = "5m"\n+++\nYou are Hand, edited.\n',
    )
    body = await server.turn("again")
    assert body["system"].startswith("You are Hand, edited.")
    assert body["model"] == "claude-haiku-4-5"
    folder = await server.folder("main")
    assert (folder["persona"], folder["model"], folder["engagement_ttl"]) == (
        "You are Hand, edited.",
        "claude-haiku-4-5",
        "5m",
    )
    (change, *_) = await server.gateway.services.folders.history("main")
    assert (change.actor, change.action) == ("file:AGENT.md", "import")
    assert change.after["persona"] == "You are Hand, edited."


async def test_an_unchanged_agent_md_is_not_read_again_for_a_turn(server: Server) -> None:
    """The persona comes from the row: a file whose stamp did not move is not read."""
    file = _agent_file(server.data_dir)
    original = file.read_text("utf-8")
    _edit_keeping_stamp(file, original.replace("default", "DEFAULT"))
    body = await server.turn("hello")
    assert body["system"].startswith("You are Postroom's default agent.")


async def test_an_invalid_agent_md_is_logged_reported_and_not_applied(server: Server) -> None:
    file = _agent_file(server.data_dir)
    _edit(file, '+++\nprovider = "nosuchprovider"\n+++\nYou are Broken.\n')
    with capture_logs() as logs:
        first = await server.turn("hello")
        second = await server.turn("hello again")
    for body in (first, second):
        assert body["system"].startswith("You are Postroom's default agent.")
    invalid = [e for e in logs if e["event"] == "folder.agent_file_invalid"]
    assert len(invalid) == 1, logs  # one line per bad edit, not one per turn
    assert "provider 'nosuchprovider' is not configured" in invalid[0]["error"]
    assert (await server.folder("main"))["persona"].startswith("You are Postroom's")

    # A write through another surface would overwrite the edit: it is refused instead.
    response = await server.client.patch("/api/v1/folders/main", json={"model": "m"})
    assert response.status_code == 400
    assert "folders/main/AGENT.md" in response.json()["error"]

    doctor = await asyncio.to_thread(cli, server.data_dir, "doctor")
    assert doctor.exit_code == 1
    assert "✗ agent files: folders/main/AGENT.md: provider 'nosuchprovider'" in doctor.stdout

    # Fixed, it is imported before the next turn.
    _edit(file, "You are Fixed.\n")
    body = await server.turn("and now?")
    assert body["system"].startswith("You are Fixed.")


async def test_a_conductor_update_agent_tag_changes_the_folder_like_any_write(
    server: Server,
) -> None:
    client = server.client
    await client.patch("/api/v1/folders/main", json={"role": "conductor"})
    response = await client.post("/api/v1/folders", json={"path": "main/writer"})
    assert response.status_code == 201, response.text
    await server.turn(
        "make the writer terse",
        answer="Done.\n[UPDATE_AGENT:main/writer]\npersona: You write tersely.\n"
        "busy_policy: steer\n[/UPDATE_AGENT]",
    )

    async def updated() -> bool:
        return (await server.folder("main/writer"))["persona"] == "You write tersely."

    await eventually(updated, "the conductor's update")
    writer = await server.folder("main/writer")
    assert writer["busy_policy"] == "steer"
    assert (
        _agent_file(server.data_dir, "main/writer")
        .read_text("utf-8")
        .endswith("You write tersely.\n")
    )
    (change, *_) = await server.gateway.services.folders.history("main/writer")
    assert (change.actor, change.action) == ("agent:main", "update")


# --------------------------------------------------------------------------- the CLI


def test_folders_set_and_show_round_trip_through_the_row_and_the_file(fresh: Path) -> None:
    out = ok(
        fresh,
        "folders",
        "set",
        "main",
        "--persona",
        "You are Main.",
        "--model",
        "gpt-4o",
        "--engagement-ttl",
        "10m",
        "--busy-policy",
        "steer",
        "--budget-per-day",
        "3",
        "--session",
        "shared",
        "--role",
        "conductor",
    )
    assert out.startswith("Changed folder main:")
    text = _agent_file(fresh).read_text("utf-8")
    assert tomllib.loads(text.split("+++")[1]) == {
        "model": "gpt-4o",
        "engagement_ttl": "10m",
        "busy_policy": "steer",
        "budget_per_day": 3.0,
        "session": "shared",
        "role": "conductor",
    }
    shown = ok(fresh, "folders", "show", "main", "--json")
    folder = json.loads(shown)
    assert set(folder) >= FOLDER_KEYS
    assert folder["persona"] == "You are Main." and folder["budget_per_day"] == 3.0
    human = ok(fresh, "folders", "show", "main")
    assert "model           gpt-4o" in human and "provider        · (not set: echo)" in human
    assert human.rstrip().endswith("You are Main.")

    ok(fresh, "folders", "set", "main", "--unset", "model", "--unset", "budget-per-day")
    folder = json.loads(ok(fresh, "folders", "show", "main", "--json"))
    assert folder["model"] is None and folder["budget_per_day"] is None
    assert "model" not in _agent_file(fresh).read_text("utf-8")


def test_folders_set_refuses_bad_values_with_one_sentence_and_changes_nothing(
    fresh: Path,
) -> None:
    before = ok(fresh, "folders", "show", "main", "--json")
    file_before = _agent_file(fresh).read_text("utf-8")
    cases = [
        (
            ["--provider", "nosuchprovider"],
            "provider 'nosuchprovider' is not configured; the "
            "providers are anthropic, echo, gemini, local, ollama, openai",
        ),
        (["--engagement-ttl", "45d"], "engagement_ttl must be a duration from 0 to 30d, not '45d'"),
        (["--busy-policy", "panic"], "busy_policy must be one of followup, interrupt, steer"),
        (["--budget-per-day", "lots"], "budget_per_day must be a number of USD"),
        (["--unset", "colour"], "Unknown folder setting(s) colour"),
        ([], "Nothing to change in folder main"),
    ]
    for args, sentence in cases:
        assert sentence in refused(fresh, "folders", "set", "main", *args), args
    missing = refused(fresh, "folders", "set", "nowhere", "--model", "m")
    assert "There is no folder nowhere" in missing
    assert ok(fresh, "folders", "show", "main", "--json") == before
    assert _agent_file(fresh).read_text("utf-8") == file_before


def test_folders_add_refuses_an_unknown_provider_naming_the_choices(fresh: Path) -> None:
    sentence = refused(fresh, "folders", "add", "x", "--provider", "nosuchprovider")
    assert "provider 'nosuchprovider' is not configured; the providers are anthropic, echo" in (
        sentence
    )
    assert "[providers.nosuchprovider]" in sentence
    assert '"x"' not in ok(fresh, "folders", "list", "--json")
    # A configured section makes the name valid.
    config = fresh / "postroom.toml"
    config.write_text(
        config.read_text("utf-8")
        + '\n[providers.lab]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\n'
    )
    ok(fresh, "folders", "add", "x", "--provider", "lab")


def test_folders_add_says_which_missing_parents_it_created(fresh: Path) -> None:
    out = ok(fresh, "folders", "add", "atlas/content/drafts")
    assert out.splitlines() == [
        "Added folder atlas (the parent of atlas/content/drafts, which was missing)",
        "Added folder atlas/content (the parent of atlas/content/drafts, which was missing)",
        "Added folder atlas/content/drafts",
    ]
    assert ok(fresh, "folders", "add", "atlas/social").splitlines() == ["Added folder atlas/social"]


# --------------------------------------------------------------------------- the migration


async def test_the_migration_imports_the_agent_md_files_an_older_version_wrote(
    tmp_path: Path,
) -> None:
    """A data directory of schema 3: the row holds the persona it was created with, while
    AGENT.md was edited since (an older server read the file per turn). The first start of
    this version imports the file into the row."""
    data_dir = tmp_path / "d"
    (data_dir / "folders" / "main").mkdir(parents=True)
    with sqlite3.connect(data_dir / "postroom.db") as db:
        db.execute(
            "CREATE TABLE schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for migration in available_migrations()[:3]:
            for statement in migration.statements():
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, '2026-01-01T00:00:00.000000Z')",
                (migration.version, migration.name),
            )
        db.execute(
            "INSERT INTO folders (path, persona, created_at) "
            "VALUES ('main', 'As created.', '2026-01-01T00:00:00.000000Z')"
        )
    _agent_file(data_dir).write_text('+++\nmodel = "m1"\n+++\nAs edited by hand.\n')
    gateway = await Gateway.build(data_dir, load_config(data_dir, {}))
    try:
        folder = await gateway.services.folders.get_folder("main")
    finally:
        await gateway.close()
    assert (folder.persona, folder.model) == ("As edited by hand.", "m1")
    assert folder.updated_at is not None and folder.file_stamp is not None
