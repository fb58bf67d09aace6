"""The dashboard's nodes page in a real browser against ``postroom serve`` on PostgreSQL
(PIPELINE §9): the serving node and a second node's heartbeat row both listed, the serving one
marked, and a third node that starts heartbeating appearing without a reload. The other nodes
are rows written through the store, as a node's heartbeat writes them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from chromium import chromium, needs_chromium
from playwright.sync_api import expect
from test_dashboard import _sign_in

from postroom.store.postgres import PostgresStore
from postroom.store.records import NodeRecord

from e2e_harness import ServerProcess, postroom_cli

pytestmark = needs_chromium


def _heartbeat(pg_url: str, node_id: str, port: int) -> None:
    """A node's row as its ``postroom serve`` registers it, heartbeating now."""

    async def write() -> None:
        now = datetime.now(UTC)
        node = NodeRecord(
            id=node_id,
            name=f"worker-{port}:data",
            boot_id=f"boot-{node_id}",
            host="10.0.0.7",
            port=port,
            pid=port,
            started_at=now,
            heartbeat_at=now,
        )
        async with await PostgresStore.open(pg_url) as store, store.write() as tx:
            await tx.register_node(node)

    # A thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result()


@pytest.fixture
def server(data_dir: Path, pg_url: str) -> Iterator[ServerProcess]:
    env = {"POSTROOM_DATABASE__URL": pg_url}
    done = postroom_cli(data_dir, "init", env=env)
    assert done.returncode == 0, done.stderr
    started = ServerProcess(data_dir=data_dir, env=env).start()
    try:
        yield started
    finally:
        started.close()


def test_every_nodes_row_is_listed_and_a_new_node_appears_live(
    server: ServerProcess, pg_url: str
) -> None:
    _heartbeat(pg_url, "node-b", 8002)
    with chromium() as browser:
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.goto(server.url + "/dashboard/nodes")
        _sign_in(page, server.token)
        rows = page.get_by_test_id("node")
        expect(rows).to_have_count(2)
        mine = page.locator('[data-testid="node"][data-me="yes"]')
        expect(mine).to_contain_text(f"127.0.0.1:{server.port}")
        expect(mine).to_contain_text("this node")
        expect(mine).to_contain_text("alive")
        other = page.locator('[data-testid="node"][data-id="node-b"]')
        expect(other).to_contain_text("10.0.0.7:8002")
        # alive or, on a machine slow enough to take 15 s from here, stale: either is shown
        expect(other.get_by_text(re.compile("^(alive|stale)$"))).to_have_count(1)
        expect(other).to_contain_text(re.compile(r"\d+ (s|min) ago"))
        expect(other).not_to_contain_text("this node")
        expect(page.get_by_test_id("single-node")).to_have_count(0)
        _heartbeat(pg_url, "node-c", 8003)
        expect(rows).to_have_count(3, timeout=15_000)
        expect(page.locator('[data-testid="node"][data-id="node-c"]')).to_contain_text(
            "10.0.0.7:8003"
        )
