"""Named tokens on the HTTP API (INTERFACES §4, §5): made, listed and removed; each scope
reaching exactly its endpoints; a token confined to a folder; route previews, dry runs and
the history of route writes. Requests go through the gateway's real ASGI app."""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from channels.channel_gateway import init_data_dir, stored_rows
from postroom.api.scopes import ENDPOINTS, endpoint_for
from postroom.app.gateway import Gateway
from postroom.config import load_config

TOKEN_KEYS = {"name", "scope", "folder", "secret", "created_at"}
PREVIEW_KEYS = {"examined", "changed", "messages"}


def assert_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    payload = response.json()
    assert set(payload) == {"error"}, payload
    sentence = payload["error"]
    assert sentence.strip() and "\n" not in sentence
    return str(sentence)


def stored_anywhere(data: Path, secret: str) -> bool:
    """Whether the database or its write-ahead log holds *secret* in any form."""
    return any(secret.encode() in file.read_bytes() for file in data.glob("postroom.db*"))


class Api:
    def __init__(self, gateway: Gateway, owner: str) -> None:
        self.gateway = gateway
        self.owner = owner

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token or self.owner}"}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.gateway.http),
            base_url="http://test",
            headers=headers,
        )

    async def token(self, name: str, scope: str, folder: str | None = None) -> str:
        async with self.client() as http:
            response = await http.post(
                "/api/v1/tokens", json={"name": name, "scope": scope, "folder": folder}
            )
        assert response.status_code == 201, response.text
        made = response.json()
        assert set(made) == TOKEN_KEYS
        return str(made["secret"])

    async def routes(self) -> list[tuple[int, str, str]]:
        async with self.client() as http:
            found = (await http.get("/api/v1/routes")).json()["routes"]
        return [(r["seq"], r["match"], r["target"]) for r in found]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "data")


@pytest.fixture
async def api(data: Path) -> AsyncIterator[Api]:
    gateway = await Gateway.build(data, load_config(data, {}))
    owner = tomllib.loads((data / "postroom.toml").read_text("utf-8"))["api"]["token"]
    try:
        yield Api(gateway, owner)
    finally:
        await gateway.close()


async def test_tokens_are_made_listed_and_removed(api: Api, data: Path) -> None:
    secret = await api.token("ci", "routes")
    async with api.client() as owner, api.client(secret) as ci:
        listed = (await owner.get("/api/v1/tokens")).json()["tokens"]
        assert [(t["name"], t["scope"], t["folder"]) for t in listed] == [("ci", "routes", None)]
        assert "secret" not in listed[0] and listed[0]["created_by"] == "api:owner"
        assert (await ci.get("/api/v1/routes")).status_code == 200
        assert_error(await owner.post("/api/v1/tokens", json={"name": "ci"}), 409)
        assert "scope" in assert_error(
            await owner.post("/api/v1/tokens", json={"name": "x", "scope": "root"}), 400
        )
        assert "reserved" in assert_error(
            await owner.post("/api/v1/tokens", json={"name": "owner"}), 400
        )
        assert "no folder" in assert_error(
            await owner.post("/api/v1/tokens", json={"name": "x", "folder": "nosuch"}), 400
        )
        assert (await owner.delete("/api/v1/tokens/ci")).status_code == 204
        assert_error(await owner.delete("/api/v1/tokens/ci"), 404)
        assert assert_error(await ci.get("/api/v1/routes"), 401) == "Missing or wrong bearer token."
    # Only a hash of a secret is kept: neither the database nor its log holds one.
    kept = await api.token("kept", "read")
    stored = stored_rows(data, "SELECT secret_hash FROM tokens WHERE name = 'kept'")
    assert stored == [(hashlib.sha256(b"postroom-token:" + kept.encode()).hexdigest(),)]
    assert not stored_anywhere(data, kept) and not stored_anywhere(data, secret)


# Each endpoint with what read, routes and admin tokens get.
SCOPED: list[tuple[str, str, Any, tuple[int, int, int]]] = [
    ("GET", "/api/v1/routes", None, (200, 200, 200)),
    ("GET", "/api/v1/routes/history", None, (200, 200, 200)),
    ("POST", "/api/v1/routes/preview", [], (200, 200, 200)),
    ("POST", "/api/v1/routes", {"seq": 5, "target": "main"}, (403, 201, 201)),
    ("PUT", "/api/v1/routes?dry_run=true", [], (403, 200, 200)),
    ("DELETE", "/api/v1/routes/999", None, (403, 404, 404)),
    ("POST", "/api/v1/folders", {"path": "x"}, (403, 201, 409)),
    (
        "POST",
        "/api/v1/messages",
        {"chat_jid": "a:b", "sender": "a:c", "content": "hi"},
        (403, 403, 200),
    ),
    ("GET", "/api/v1/jobs", None, (200, 200, 200)),
    ("POST", "/api/v1/jobs/999/retry", None, (403, 403, 404)),
    ("GET", "/api/v1/runs", None, (200, 200, 200)),
    ("GET", "/api/v1/drops", None, (200, 200, 200)),
    ("GET", "/api/v1/tasks", None, (200, 200, 200)),
    ("GET", "/api/v1/tokens", None, (403, 403, 200)),
    ("DELETE", "/api/v1/tokens/nosuch", None, (403, 403, 404)),
    ("GET", "/metrics", None, (200, 200, 200)),
]


async def test_each_scope_reaches_exactly_its_endpoints(api: Api) -> None:
    secrets = [await api.token(scope, scope) for scope in ("read", "routes", "admin")]
    failures = []
    for method, path, body, expected in SCOPED:
        for secret, scope, status in zip(
            secrets, ("read", "routes", "admin"), expected, strict=True
        ):
            async with api.client(secret) as http:
                response = await http.request(method, path, json=body)
            if response.status_code != status:
                failures.append(f"{scope} {method} {path}: {response.status_code} {response.text}")
            elif status == 403:
                sentence = assert_error(response, 403)
                assert sentence.startswith(f"Token {scope} has scope {scope};"), sentence
    assert not failures, "\n".join(failures)


async def test_every_endpoint_of_the_api_has_its_scope_decided(api: Api) -> None:
    # The OpenAPI document lists every endpoint the router serves (the ingest lane's included).
    async with api.client(api.owner) as http:
        document = (await http.get("/api/v1/openapi.json")).json()
    endpoints = [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    ]
    assert ("GET", "/api/v1/runs") in endpoints and len(endpoints) > 30
    undecided = [
        f"{method} {path}"
        for method, path in endpoints
        if endpoint_for(method, path) not in ENDPOINTS
    ]
    assert not undecided


async def test_a_token_confined_to_a_folder_sees_and_changes_only_its_tree(api: Api) -> None:
    async with api.client() as owner:
        for path in ("team", "team/bot", "other"):
            assert (await owner.post("/api/v1/folders", json={"path": path})).status_code == 201
        await owner.post(
            "/api/v1/routes", json={"seq": 10, "match": "platform=a", "target": "team"}
        )
        other = await owner.post("/api/v1/routes", json={"seq": 20, "target": "other"})
    secret = await api.token("team-agent", "routes", "team")
    outside = await api.routes()
    async with api.client(secret) as http:
        shown = (await http.get("/api/v1/routes")).json()["routes"]
        assert [r["target"] for r in shown] == ["team"]
        assert "outside team" in assert_error(
            await http.post("/api/v1/routes", json={"seq": 1, "target": "other"}), 403
        )
        assert "outside team" in assert_error(
            await http.delete(f"/api/v1/routes/{other.json()['id']}"), 403
        )
        assert "outside team" in assert_error(
            await http.post("/api/v1/folders", json={"path": "other/x"}), 403
        )
        assert "confined" in assert_error(await http.get("/api/v1/drops"), 403)
        assert "confined" in assert_error(await http.get("/api/v1/events"), 403)
        assert "folder" in assert_error(await http.get("/api/v1/messages"), 403)
        assert (
            await http.get("/api/v1/messages", params={"folder": "team/bot"})
        ).status_code == 200
        assert await api.routes() == outside  # nothing changed by the refusals
        folders = (await http.get("/api/v1/folders")).json()["folders"]
        assert [f["path"] for f in folders] == ["team", "team/bot"]
        put = await http.put("/api/v1/routes", json=[{"seq": 3, "target": "team/bot"}])
        assert put.status_code == 200, put.text
        history = (await http.get("/api/v1/routes/history")).json()["history"]
    assert await api.routes() == [(3, "", "team/bot"), (20, "", "other"), (9999, "", "main")]
    assert history[0]["actor"] == "api:team-agent" and history[0]["action"] == "set:team"
    assert [row["target"] for row in history[0]["before"]] == ["team"]
    assert [row["target"] for row in history[0]["after"]] == ["team/bot"]


async def test_dry_runs_and_previews_write_nothing(api: Api) -> None:
    async with api.client() as http:
        message = {"chat_jid": "shop:room/1", "sender": "shop:user/1", "content": "hi"}
        sent = (await http.post("/api/v1/messages", json=message)).json()
        await http.post("/api/v1/folders", json={"path": "support"})
        before = await api.routes()
        add = await http.post(
            "/api/v1/routes",
            params={"dry_run": "true"},
            json={"seq": 0, "match": "platform=shop", "target": "support"},
        )
        remove = await http.delete("/api/v1/routes/1", params={"dry_run": "true"})
        put = await http.put("/api/v1/routes", params={"dry_run": "true"}, json=[])
        preview = await http.post("/api/v1/routes/preview", json=[], params={"limit": 10})
        assert_error(await http.post("/api/v1/routes/preview", json=[], params={"limit": 0}), 400)
        assert_error(await http.post("/api/v1/routes/preview", json={"seq": 1}), 400)
        assert "Row 1 of the table" in assert_error(
            await http.post("/api/v1/routes/preview", json=[{"seq": 1, "target": "nosuch"}]), 400
        )
        history = (await http.get("/api/v1/routes/history")).json()["history"]
    assert await api.routes() == before
    assert add.status_code == 200 and set(add.json()) == PREVIEW_KEYS
    (moved,) = add.json()["messages"]
    assert moved["id"] == sent["id"] and moved["after"]["folder"] == "support"
    for response in (remove, put, preview):
        assert response.status_code == 200, response.text
        assert response.json()["changed"] == 1
        assert response.json()["messages"][0]["after"]["action"] == "ignore"
    assert [e["action"] for e in history] == ["add"]  # postroom init's catch-all only
    assert set(history[0]) == {"id", "time", "actor", "action", "route_id", "before", "after"}
