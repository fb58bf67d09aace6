"""The API additions the dashboard stands on, each usable on its own: one message's journey,
the outbox's deliveries and retrying one, and the run listing — through the gateway's real ASGI
app over a data directory made by ``postroom init``."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from postroom.app.gateway import Gateway
from postroom.cli.main import app as cli_app
from postroom.config import load_config
from postroom.logs import configure_logging

from support import eventually

CHAT = "telegram:42"
WAIT_S = 15.0


@pytest.fixture(scope="module")
def initialized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("journey") / "d"
    result = CliRunner().invoke(cli_app, ["--data", str(directory), "init"], env={})
    assert result.exit_code == 0, result.stdout
    return directory


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def client(initialized: Path, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with workers and the delivery loop running; ``telegram:`` chats answered
    through an outbound webhook nobody listens to (every delivery there fails)."""
    data = Path(shutil.copytree(initialized, tmp_path / "d"))
    with (data / "postroom.toml").open("a", encoding="utf-8") as file:
        file.write(
            f'\n[channels.http.telegram]\noutbound_url = "http://127.0.0.1:{_dead_port()}/x"\n'
        )
    token = tomllib.loads((data / "postroom.toml").read_text("utf-8"))["api"]["token"]
    configure_logging(level="error", stream=sys.stderr)
    gateway = await Gateway.build(data, load_config(data, {}))
    await gateway.workers.start()
    delivery = asyncio.create_task(gateway.delivery.run(), name="test-delivery")
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway.http),
            base_url="http://test",
            headers={"Authorization": f"Bearer {token}"},
        ) as http:
            yield http
    finally:
        await gateway.workers.stop()
        gateway.delivery.stop()
        await asyncio.wait_for(delivery, WAIT_S)
        if gateway.webhooks is not None:
            await gateway.webhooks.close()
        await gateway.close()


async def _post(client: httpx.AsyncClient, chat: str, content: str) -> dict[str, Any]:
    answer = await client.post(
        "/api/v1/messages", json={"chat_jid": chat, "sender": chat, "content": content}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def test_a_journey_links_decision_job_run_answer_and_deliveries(
    client: httpx.AsyncClient,
) -> None:
    posted = await _post(client, "web:main/anon-1", "hello journey")

    async def delivered() -> dict[str, Any] | None:
        found = await client.get(f"/api/v1/messages/web:main/anon-1/{posted['id']}/journey")
        assert found.status_code == 200, found.text
        journey = found.json()
        sent = [d for d in journey["deliveries"] if d["status"] == "sent"]
        return journey if sent else None

    journey = await eventually(delivered, what="the answer to be delivered")
    assert journey["message"]["content"] == "hello journey"
    assert journey["decision"]["action"] == "fire"
    assert "main" in journey["decision"]["reason"]
    (job,) = journey["jobs"]
    assert job["status"] == "done" and job["folder"] == "main"
    (run,) = job["runs"]
    assert run["outcome"] == "ok" and run["model"] and "cost" in run and "usage" in run
    (answer,) = journey["answers"]
    assert answer["message_type"] == "assistant"
    assert journey["deliveries"][0]["message_id"] == answer["id"]


async def test_a_dropped_message_has_its_drop_record_and_no_message(
    client: httpx.AsyncClient,
) -> None:
    (route,) = (await client.get("/api/v1/routes")).json()["routes"]
    assert (await client.delete(f"/api/v1/routes/{route['id']}")).status_code == 204
    posted = await _post(client, "matrix:room/1", "nobody listens")
    assert posted["seq"] is None
    journey = (await client.get(f"/api/v1/messages/matrix:room/1/{posted['id']}/journey")).json()
    assert journey["message"] is None and journey["jobs"] == []
    assert journey["drop"]["reason"]
    missing = await client.get("/api/v1/messages/matrix:room/1/nope/journey")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


async def test_failed_deliveries_are_listed_and_retried(client: httpx.AsyncClient) -> None:
    await _post(client, CHAT, "answer me where nobody listens")

    async def failing() -> list[dict[str, Any]]:
        found = await client.get("/api/v1/deliveries", params={"status": "failed"})
        assert found.status_code == 200, found.text
        return found.json()["deliveries"]  # type: ignore[no-any-return]

    (row,) = await eventually(failing, what="a refused delivery")
    assert row["chat_jid"] == CHAT and row["attempts"] >= 1 and "unreachable" in row["last_error"]
    retried = await client.post(f"/api/v1/deliveries/{row['id']}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["attempts"] == 0 and retried.json()["status"] == "pending"

    missing = await client.post("/api/v1/deliveries/999999/retry")
    assert missing.status_code == 404
    bad = await client.get("/api/v1/deliveries", params={"status": "lost"})
    assert bad.status_code == 400 and "lost" in bad.json()["error"]


async def test_a_sent_delivery_cannot_be_retried(client: httpx.AsyncClient) -> None:
    await _post(client, "web:main/anon-2", "hello")

    async def sent() -> list[dict[str, Any]]:
        return (await client.get("/api/v1/deliveries", params={"status": "sent"})).json()[
            "deliveries"
        ]

    row = (await eventually(sent, what="a sent delivery"))[0]
    refused = await client.post(f"/api/v1/deliveries/{row['id']}/retry")
    assert refused.status_code == 409 and "sent" in refused.json()["error"]


async def test_the_new_endpoints_are_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/api/v1/openapi.json")).json()["paths"]
    assert "/api/v1/deliveries" in paths
    assert "/api/v1/deliveries/{delivery_id}/retry" in paths
    assert "/api/v1/runs" in paths
    assert any(p.endswith("/journey") for p in paths)
