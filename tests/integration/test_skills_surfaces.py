"""Skills through the surfaces (INTERFACES §2, §4): ``postroom skills list|add|show|set|rm``
with ``--json`` and one-sentence errors, and ``/api/v1/folders/{path}/skills`` with the API's
statuses and scopes. The data directory is made by ``postroom init``; the API is the gateway's
real ASGI app (``Gateway.build`` over that directory)."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from typer.testing import CliRunner, Result

from postroom.app.doctor import run_doctor
from postroom.app.gateway import Gateway
from postroom.cli.main import app
from postroom.config import CONFIG_FILE, load_config

from support import cli_env, logging_kept

runner = CliRunner()
SKILL_FILE = """+++
name = "invoices"
description = "How we write invoices"
keywords = ["invoice", "billing"]
+++
Invoices are numbered INV-<year>-<n>.
"""


def cli(data: Path, *args: str) -> Result:
    with logging_kept():
        return runner.invoke(app, ["--data", str(data), *args], env=cli_env())


def ok(data: Path, *args: str) -> str:
    result = cli(data, *args)
    assert (result.exit_code, result.stderr) == (0, ""), (result.stdout, result.stderr)
    return result.stdout


def refused(data: Path, *args: str) -> str:
    """A command that must fail with one sentence on stderr; returns the sentence."""
    result = cli(data, *args)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert message.startswith("error: "), message
    return message


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    ok(directory, "init")
    ok(directory, "folders", "add", "acme/support")
    return directory


def test_the_skills_commands_add_list_show_set_and_remove(data: Path, tmp_path: Path) -> None:
    source = tmp_path / "anything.md"
    source.write_text(SKILL_FILE, "utf-8")

    added = json.loads(ok(data, "skills", "add", "acme", str(source), "--json"))
    assert added == {
        "name": "invoices",
        "description": "How we write invoices",
        "keywords": ["invoice", "billing"],
        "body": "Invoices are numbered INV-<year>-<n>.",
        "inherited_from": None,
        "folder": "acme",
        "updated_at": added["updated_at"],
    }
    mirror = data / "folders" / "acme" / "skills" / "invoices.md"
    assert mirror.read_text("utf-8") == SKILL_FILE

    listed = json.loads(ok(data, "skills", "list", "--folder", "acme/support", "--json"))
    assert [(s["name"], s["inherited_from"]) for s in listed] == [("invoices", "acme")]
    assert json.loads(ok(data, "skills", "list", "--json"))[0]["folder"] == "acme"
    table = ok(data, "skills", "list", "--folder", "acme/support")
    assert "invoices" in table and "inherited from acme" in table

    shown = json.loads(ok(data, "skills", "show", "acme/support", "invoices", "--json"))
    assert shown["body"] == "Invoices are numbered INV-<year>-<n>."
    assert "INV-<year>-<n>" in ok(data, "skills", "show", "acme", "invoices")

    changed = json.loads(
        ok(data, "skills", "set", "acme", "invoices", "--keywords", "Invoice, VAT ", "--json")
    )
    assert changed["keywords"] == ["invoice", "vat"]
    assert 'keywords = ["invoice", "vat"]' in mirror.read_text("utf-8")

    removed = ok(data, "skills", "rm", "acme", "invoices")
    assert removed == "Removed skill invoices from folder acme\n"
    assert not mirror.exists()
    assert json.loads(ok(data, "skills", "list", "--json")) == []


def test_the_skills_commands_refuse_bad_input_in_one_sentence(data: Path, tmp_path: Path) -> None:
    source = tmp_path / "invoices.md"
    source.write_text(SKILL_FILE, "utf-8")
    ok(data, "skills", "add", "acme", str(source))

    assert "already has a skill invoices" in refused(data, "skills", "add", "acme", str(source))
    assert "There is no folder nowhere" in refused(data, "skills", "add", "nowhere", str(source))
    missing = refused(data, "skills", "add", "acme", str(tmp_path / "missing.md"))
    assert "Cannot read" in missing
    broken = tmp_path / "broken.md"
    broken.write_text("+++\nkeywords = [\n+++\nbody\n", "utf-8")
    assert "not valid TOML" in refused(data, "skills", "add", "acme", str(broken))
    badly_named = tmp_path / "Bad Name.md"
    badly_named.write_text("text", "utf-8")
    assert "may use only a-z" in refused(data, "skills", "add", "acme", str(badly_named))
    assert "has no skill" in refused(data, "skills", "show", "acme", "nothing")
    assert "Give one or more of" in refused(data, "skills", "set", "acme", "invoices")
    assert "has no skill taxes" in refused(data, "skills", "rm", "acme", "taxes")
    # Nothing was changed by any of them.
    (only,) = json.loads(ok(data, "skills", "list", "--json"))
    assert (only["folder"], only["name"]) == ("acme", "invoices")


@pytest_asyncio.fixture
async def api(data: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    token = tomllib.loads((data / CONFIG_FILE).read_text("utf-8"))["api"]["token"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
    gateway = await Gateway.build(data, load_config(data, environ))
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway.http),
        base_url="http://test",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        yield client, data
    finally:
        await client.aclose()
        await gateway.close()


async def test_the_skills_api(api: tuple[httpx.AsyncClient, Path]) -> None:
    client, data = api
    skill: dict[str, Any] = {
        "name": "invoices",
        "description": "How we write invoices",
        "keywords": ["invoice"],
        "body": "INV rules",
    }

    created = await client.post("/api/v1/folders/acme/skills", json=skill)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "invoices"
    assert (data / "folders" / "acme" / "skills" / "invoices.md").exists()
    again = await client.post("/api/v1/folders/acme/skills", json=skill)
    assert again.status_code == 409 and set(again.json()) == {"error"}

    listed = await client.get("/api/v1/folders/acme/support/skills")
    assert listed.status_code == 200
    (item,) = listed.json()["skills"]
    assert {k: item[k] for k in ("name", "description", "keywords", "body", "inherited_from")} == {
        **skill,
        "inherited_from": "acme",
    }
    one = await client.get("/api/v1/folders/acme/support/skills/invoices")
    assert one.json()["inherited_from"] == "acme"
    # The folder itself is still reached at its own path.
    folder = await client.get("/api/v1/folders/acme/support")
    assert folder.json()["path"] == "acme/support"

    patched = await client.patch(
        "/api/v1/folders/acme/skills/invoices", json={"keywords": ["invoice", "vat"]}
    )
    assert patched.status_code == 200 and patched.json()["keywords"] == ["invoice", "vat"]

    for method, path, payload, status in (
        ("POST", "/api/v1/folders/acme/skills", {**skill, "name": "Bad Name"}, 400),
        ("POST", "/api/v1/folders/acme/skills", {**skill, "keywords": "invoice"}, 400),
        ("POST", "/api/v1/folders/acme/skills", {**skill, "extra": 1}, 400),
        ("POST", "/api/v1/folders/nowhere/skills", skill, 404),
        ("PATCH", "/api/v1/folders/acme/skills/invoices", {"name": "other"}, 400),
        ("DELETE", "/api/v1/folders/acme/skills/nothing", None, 404),
    ):
        response = await client.request(method, path, json=payload)
        assert response.status_code == status, (method, path, payload, response.text)
        assert set(response.json()) == {"error"}

    deleted = await client.delete("/api/v1/folders/acme/skills/invoices")
    assert deleted.status_code == 204
    assert (await client.get("/api/v1/folders/acme/skills")).json() == {"skills": []}


async def test_a_read_token_reads_skills_and_cannot_write_them(
    api: tuple[httpx.AsyncClient, Path],
) -> None:
    client, _ = api
    made = await client.post("/api/v1/tokens", json={"name": "reader", "scope": "read"})
    assert made.status_code == 201, made.text
    reader = {"Authorization": f"Bearer {made.json()['secret']}"}

    assert (await client.get("/api/v1/folders/acme/skills", headers=reader)).status_code == 200
    refused = await client.post(
        "/api/v1/folders/acme/skills", json={"name": "x", "body": "y"}, headers=reader
    )
    assert refused.status_code == 403
    assert (await client.get("/api/v1/folders/acme/skills")).json() == {"skills": []}


async def test_doctor_reports_an_invalid_skill_file(data: Path) -> None:
    skills = data / "folders" / "acme" / "skills"
    skills.mkdir()
    (skills / "broken.md").write_text("+++\nkeywords = [\n+++\nbody\n", "utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}

    checks = await run_doctor(data, load_config(data, environ), timeout_s=2)

    (files,) = [c for c in checks if c.name == "agent files"]
    assert not files.ok
    assert "folders/acme/skills/broken.md" in files.detail
    assert "not valid TOML" in files.detail
