"""Principals, pairing and budgets from every surface (INTERFACES §2, §4, §5): the HTTP API's
``is_dm`` and ``/api/v1/access``, the MCP tools ``list_principals`` and ``approve_pairing``, and
``postroom access`` / ``postroom usage``, over a data directory made by ``postroom init`` and a
gateway built by ``Gateway.build``."""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_mcp import call, mcp_http, refused

from channels.channel_gateway import cli, init_data_dir, running_gateway
from postroom.app.gateway import Gateway

pytestmark = pytest.mark.timeout(120)

STRANGER = "telegram:user/9"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "data")


@pytest.fixture
async def server(data: Path) -> AsyncIterator[tuple[Gateway, str]]:
    async with running_gateway(data) as running:
        yield running


def token_of(data: Path) -> str:
    token = tomllib.loads((data / "postroom.toml").read_text("utf-8"))["api"]["token"]
    assert isinstance(token, str)
    return token


@pytest.fixture
async def api(server: tuple[Gateway, str], data: Path) -> AsyncIterator[httpx.AsyncClient]:
    _, url = server
    headers = {"Authorization": f"Bearer {token_of(data)}"}
    async with httpx.AsyncClient(base_url=f"{url}/api/v1", headers=headers) as client:
        yield client


async def stranger_dm(api: httpx.AsyncClient, text: str = "hi", **extra: Any) -> dict[str, Any]:
    body = {"chat_jid": STRANGER, "sender": STRANGER, "content": text, "is_dm": True, **extra}
    response = await api.post("/messages", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_is_dm_over_the_api_and_the_access_endpoints(api: httpx.AsyncClient) -> None:
    # Without is_dm, a message is group-like and admitted by the routes, as it always was.
    plain = (
        await api.post("/messages", json={"chat_jid": STRANGER, "sender": STRANGER, "content": "x"})
    ).json()
    assert plain["decision"]["layer"] == "route"
    assert (
        await api.post(
            "/messages",
            json={"chat_jid": STRANGER, "sender": STRANGER, "content": "x", "is_dm": "yes"},
        )
    ).status_code == 400
    explained = (
        await api.post(
            "/routes/explain",
            json={
                "chat_jid": "telegram:user/8",
                "sender": "telegram:user/8",
                "content": "x",
                "is_dm": True,
            },
        )
    ).json()
    assert (explained["layer"], explained["action"]) == ("access", "ignore")
    refused_dm = await stranger_dm(api)
    assert refused_dm["seq"] is None
    assert refused_dm["decision"]["layer"] == "access"
    assert refused_dm["decision"]["reason"].endswith("(dm_policy pairing): code sent")
    (pending,) = (await api.get("/access/pending")).json()["pending"]
    assert set(pending) == {
        "code",
        "platform",
        "chat_jid",
        "sender",
        "sender_name",
        "created_at",
        "expires_at",
    }
    assert (await api.post("/access/pending/ZZZZ-ZZZZ/approve")).status_code == 404
    assert (await api.post("/access/pending/nope/approve")).status_code == 400
    approved = await api.post(f"/access/pending/{pending['code']}/approve")
    assert approved.status_code == 200, approved.text
    principal = approved.json()["principal"]
    assert (principal["pattern"], principal["role"], principal["created_by"]) == (
        STRANGER,
        "member",
        "api:owner",
    )
    fired = await stranger_dm(api, "and now?")
    assert fired["decision"]["action"] == "fire"
    # Principals written and removed over the API.
    made = await api.post(
        "/access", json={"pattern": "telegram:user/66", "role": "blocked", "note": "spam"}
    )
    assert made.status_code == 201, made.text
    bad = await api.post("/access", json={"pattern": "telegram:user/66", "role": "boss"})
    assert bad.status_code == 400 and "roles are" in bad.json()["error"]
    listed = (await api.get("/access")).json()["principals"]
    assert [(p["pattern"], p["role"]) for p in listed] == [
        (STRANGER, "member"),
        ("telegram:user/66", "blocked"),
    ]
    assert (await api.delete(f"/access/{made.json()['id']}")).status_code == 204
    assert (await api.delete(f"/access/{made.json()['id']}")).status_code == 404
    # A denied code is gone.
    await stranger_dm(api, "hi", chat_jid="telegram:user/10", sender="telegram:user/10")
    (other,) = (await api.get("/access/pending")).json()["pending"]
    assert (await api.post(f"/access/pending/{other['code']}/deny")).status_code == 200
    assert (await api.get("/access/pending")).json()["pending"] == []


async def test_budgets_over_the_api_and_a_warning_for_an_unpriced_model(
    api: httpx.AsyncClient,
) -> None:
    patched = await api.patch(
        "/folders/main", json={"budget_per_day": 2, "provider": "openai", "model": "my-own-model"}
    )
    assert patched.status_code == 200, patched.text
    (warning,) = patched.json()["warnings"]
    assert "no price for model my-own-model" in warning
    priced = await api.patch("/folders/main", json={"model": "gpt-4o"})
    assert "warnings" not in priced.json()
    (budget,) = (await api.get("/budgets")).json()["budgets"]
    assert budget == {
        "folder": "main",
        "budget_per_day": 2.0,
        "spent_today": 0.0,
        "remaining": 2.0,
        "reached": False,
        "unpriced_runs": 0,
    }


async def test_mcp_lists_principals_and_approves_a_code(
    server: tuple[Gateway, str], data: Path, api: httpx.AsyncClient
) -> None:
    _, url = server
    await stranger_dm(api)
    async with mcp_http(url, token_of(data)) as client:
        listed = await call(client, "list_principals")
        assert listed["principals"] == []
        (pending,) = listed["pending"]
        assert "not a pairing code" in await refused(client, "approve_pairing", {"code": "x"})
        done = await call(client, "approve_pairing", {"code": pending["code"]})
        assert done["principal"]["created_by"] == "mcp:owner"
        listed = await call(client, "list_principals")
        assert [p["pattern"] for p in listed["principals"]] == [STRANGER]
        assert listed["pending"] == []
    assert (await stranger_dm(api, "thanks"))["decision"]["action"] == "fire"


def test_the_cli_manages_principals_with_json_and_one_sentence_errors(data: Path) -> None:
    made = cli(data, "access", "allow", "telegram:user/*", "--role", "owner", "--json")
    assert made.exit_code == 0, made.output
    principal = json.loads(made.output)
    assert (principal["pattern"], principal["role"]) == ("telegram:user/*", "owner")
    blocked = cli(data, "access", "block", "telegram:user/13", "--note", "spam")
    assert blocked.exit_code == 0 and "blocked" in blocked.output
    listed = json.loads(cli(data, "access", "list", "--json").output)
    assert [(p["id"], p["role"], p["note"]) for p in listed] == [
        (1, "owner", ""),
        (2, "blocked", "spam"),
    ]
    assert json.loads(cli(data, "access", "pending", "--json").output) == []
    explained = cli(
        data,
        "routes",
        "explain",
        "--chat-jid",
        "telegram:group/5",
        "--sender",
        "telegram:user/13",
        "--json",
    )
    decision = json.loads(explained.output)
    assert (decision["layer"], decision["reason"]) == (
        "access",
        "sender matched principal 2 (blocked): dropped",
    )
    for args, words in (
        (("access", "allow", "user 13"), "whitespace"),
        (("access", "allow", "telegram:user/1", "--role", "blocked"), "postroom access block"),
        (("access", "approve", "nope"), "not a pairing code"),
        (("access", "deny", "ABCD-2345"), "no pending pairing request"),
        (("access", "rm", "99"), "no principal 99"),
        (("access", "rm", "abc"), "ID"),
    ):
        result = cli(data, *args)
        assert result.exit_code == 1, (args, result.output)
        assert words in result.output and "Traceback" not in result.output
    removed = cli(data, "access", "rm", "2")
    assert removed.exit_code == 0 and "Removed principal 2" in removed.output
    usage = cli(data, "usage", "--budgets", "--json")
    assert usage.exit_code == 0 and json.loads(usage.output) == []


async def test_a_read_token_reads_access_but_cannot_approve(
    server: tuple[Gateway, str], data: Path, api: httpx.AsyncClient
) -> None:
    made = await asyncio.to_thread(
        cli, data, "tokens", "add", "viewer", "--scope", "read", "--json"
    )
    secret = json.loads(made.output)["secret"]
    _, url = server
    await stranger_dm(api)
    headers = {"Authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=f"{url}/api/v1", headers=headers) as viewer:
        (pending,) = (await viewer.get("/access/pending")).json()["pending"]
        assert (await viewer.post(f"/access/pending/{pending['code']}/approve")).status_code == 403
        assert (
            await viewer.post("/access", json={"pattern": "x:y", "role": "member"})
        ).status_code == 403
