"""The dashboard's nodes page over HTTP through the real composition root: on SQLite the one
server, said to keep no heartbeat row; on PostgreSQL every node's row from the same listing as
``GET /api/v1/nodes`` — a second node's heartbeat row shown with its age, stale once it falls
silent — and the node serving the page marked."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from channels.channel_gateway import init_data_dir
from postroom import __version__
from postroom.app.gateway import Gateway
from postroom.config import load_config
from postroom.store.records import NodeRecord

from fakeclock import FakeClock
from gateway_support import serving

_ROW = re.compile(
    r'<tr data-testid="node" data-id="([^"]+)" data-alive="(yes|no)"( data-me="yes")?'
)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "d")  # the CLI runs its own event loop: not inside a test's


def _rows(page: str) -> dict[str, tuple[bool, bool]]:
    """Each node row's id: (alive, serving this page)."""
    return {m.group(1): (m.group(2) == "yes", bool(m.group(3))) for m in _ROW.finditer(page)}


async def _signed_in(http: httpx.AsyncClient, token: str) -> None:
    signed = await http.post("/dashboard/login", data={"token": token})
    assert signed.status_code == 303, signed.text


async def test_on_sqlite_the_page_shows_this_server_as_the_only_node(data: Path) -> None:
    config = load_config(data, {})
    gateway = await Gateway.build(data, config)
    async with serving(gateway) as url, httpx.AsyncClient(base_url=url) as http:
        await _signed_in(http, config.api.token)
        page = (await http.get("/dashboard/nodes")).text
        listed = (
            await http.get("/api/v1/nodes", headers={"Authorization": f"Bearer {config.api.token}"})
        ).json()["nodes"]
    assert [n["id"] for n in listed] == list(_rows(page))
    assert _rows(page) == {listed[0]["id"]: (True, True)}
    assert 'data-testid="single-node"' in page and "keeps no heartbeat row" in page
    port = url.rsplit(":", 1)[1]
    assert f"127.0.0.1:{port}" in page
    assert f"<td>{__version__}</td>" in page


async def test_on_postgresql_every_nodes_row_is_shown_with_its_heartbeats_age(
    data: Path, pg_url: str
) -> None:
    clock = FakeClock()
    config = load_config(data, {}, {"database": {"url": pg_url}})
    gateway = await Gateway.build(data, config, clock=clock)
    other = NodeRecord(
        id="node-b",
        name="worker-2:data",
        boot_id="b2",
        host="10.0.0.7",
        port=8765,
        pid=4242,
        started_at=clock() - timedelta(minutes=5),
        heartbeat_at=clock() - timedelta(seconds=3),
    )
    async with gateway.services.store.write() as tx:
        await tx.register_node(other)
    async with serving(gateway) as url, httpx.AsyncClient(base_url=url) as http:
        await _signed_in(http, config.api.token)
        page = (await http.get("/dashboard/nodes")).text
        assert gateway.nodes is not None
        me = gateway.nodes.me.id
        assert _rows(page) == {me: (True, True), "node-b": (True, False)}
        assert "10.0.0.7:8765" in page and "pid 4242" in page and "3 s ago" in page
        assert 'data-testid="single-node"' not in page
        clock.advance(seconds=60)  # node-b's last heartbeat is old now: stale
        page = (await http.get("/dashboard/nodes")).text
        assert _rows(page) == {me: (True, True), "node-b": (False, False)}
        assert "63 s ago" in page
