"""The dashboard over HTTP through the real composition root (the browser tests cover the
journeys): channel health from probes — an adapter that only started is idle, one whose probe
passed healthy, one whose probe failed down with its error; writes need the session's CSRF
token; a read token's writes are refused in one sentence; tasks made and changed on their page;
access writes need an admin token, and a stale or garbled pairing code is said in one sentence."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from channels.channel_gateway import init_data_dir
from postroom.app.gateway import Gateway
from postroom.config import load_config

from gateway_support import RecordingChannel, serving


class ProbedChannel(RecordingChannel):
    name: ClassVar[str] = "probed"
    #: What the next probe raises, if anything.
    refusal: ClassVar[list[str]] = []

    async def do_check(self) -> str:
        if self.refusal:
            raise RuntimeError(self.refusal[0])
        return "credentials answered"


def _health(page: str) -> str:
    found = re.search(r'data-testid="health" data-state="(\w+)">\s*<th scope="row">probed', page)
    assert found, page
    return found.group(1)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "d")  # the CLI runs its own event loop: not inside a test's


async def test_a_probe_makes_an_adapter_healthy_and_a_failed_one_down(data: Path) -> None:
    config = load_config(data, {})
    gateway = await Gateway.build(data, config, channels=[ProbedChannel()])
    async with serving(gateway) as url, httpx.AsyncClient(base_url=url) as http:
        signed = await http.post("/dashboard/login", data={"token": config.api.token})
        assert signed.status_code == 303
        page = (await http.get("/dashboard")).text
        assert _health(page) == "idle"
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None

        refused = await http.post("/dashboard/channels/check")
        assert refused.status_code == 403 and "CSRF" in refused.text
        checked = await http.post("/dashboard/channels/check", data={"csrf": csrf.group(1)})
        assert checked.status_code == 303
        assert _health((await http.get("/dashboard")).text) == "healthy"

        ProbedChannel.refusal.append("the bot token was revoked")
        try:
            await http.post("/dashboard/channels/check", data={"csrf": csrf.group(1)})
            page = (await http.get("/dashboard")).text
        finally:
            ProbedChannel.refusal.clear()
        assert _health(page) == "down"
        assert "the bot token was revoked" in page


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


async def test_a_read_token_sees_the_pages_and_its_writes_are_refused_in_one_sentence(
    data: Path,
) -> None:
    config = load_config(data, {})
    gateway = await Gateway.build(data, config)
    made = await gateway.services.tokens.add("viewer", scope="read", actor="test")
    async with serving(gateway) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.post("/dashboard/login", data={"token": made.secret})).status_code == 303
        page = (await http.get("/dashboard/routes")).text
        assert "viewer" in page
        refused = await http.post(
            "/dashboard/routes/save",
            data={"csrf": _csrf(page), "op": "add", "seq": "1", "match": "", "target": "main"},
        )
        assert refused.status_code == 403
        assert "Token viewer has scope read; changing routes needs scope routes or more." in (
            refused.text
        )
        assert len(await gateway.services.routes.list_routes()) == 1


async def test_tasks_are_created_paused_resumed_and_deleted_on_their_page(data: Path) -> None:
    config = load_config(data, {})
    gateway = await Gateway.build(data, config)
    async with serving(gateway) as url, httpx.AsyncClient(base_url=url) as http:
        await http.post("/dashboard/login", data={"token": config.api.token})
        csrf = _csrf((await http.get("/dashboard/tasks")).text)
        bad = await http.post(
            "/dashboard/tasks",
            data={
                "csrf": csrf,
                "folder": "main",
                "chat_jid": "api:1",
                "schedule": "soon",
                "prompt": "hello",
            },
        )
        assert bad.status_code == 400 and 'role="alert"' in bad.text
        assert await gateway.tasks.list() == []
        made = await http.post(
            "/dashboard/tasks",
            data={
                "csrf": csrf,
                "folder": "main",
                "chat_jid": "api:1",
                "schedule": "every 1h",
                "prompt": "the digest",
            },
        )
        assert made.status_code == 303
        (task,) = await gateway.tasks.list()
        await http.post(f"/dashboard/tasks/{task.id}/pause", data={"csrf": csrf})
        assert not (await gateway.tasks.get(task.id)).enabled
        await http.post(f"/dashboard/tasks/{task.id}/resume", data={"csrf": csrf})
        assert (await gateway.tasks.get(task.id)).enabled
        page = (await http.get("/dashboard/tasks")).text
        assert "the digest" in page and "Pause" in page
        await http.post(f"/dashboard/tasks/{task.id}/delete", data={"csrf": csrf})
        assert await gateway.tasks.list() == []


async def test_access_writes_need_an_admin_token_and_a_stale_code_is_said_in_one_sentence(
    data: Path,
) -> None:
    config = load_config(data, {})
    gateway = await Gateway.build(data, config)
    made = await gateway.services.tokens.add("viewer", scope="read", actor="test")
    async with (
        serving(gateway) as url,
        httpx.AsyncClient(base_url=url) as viewer,
        httpx.AsyncClient(base_url=url) as owner,
    ):
        await viewer.post("/dashboard/login", data={"token": made.secret})
        page = (await viewer.get("/dashboard/access")).text
        assert "Pending pairing codes" in page
        refused = await viewer.post(
            "/dashboard/access",
            data={"csrf": _csrf(page), "pattern": "telegram:*", "role": "member"},
        )
        assert refused.status_code == 403
        assert "Token viewer has scope read; adding principals needs scope admin or more." in (
            refused.text
        )
        assert await gateway.services.access.list_principals() == []

        await owner.post("/dashboard/login", data={"token": config.api.token})
        csrf = _csrf((await owner.get("/dashboard/access")).text)
        stale = await owner.post("/dashboard/access/pending/ABCD-2345/approve", data={"csrf": csrf})
        assert stale.status_code == 404 and 'role="alert"' in stale.text
        assert "Code ABCD-2345: There is no pending pairing request ABCD-2345" in stale.text
        garbled = await owner.post("/dashboard/access/pending/hello/deny", data={"csrf": csrf})
        assert garbled.status_code == 400 and "is not a pairing code" in garbled.text
        assert await gateway.services.access.list_principals() == []
