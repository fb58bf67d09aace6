"""The overview's channel health through the real composition root: an adapter that only
started is idle, one whose probe passed is healthy, one whose probe failed is down with the
error and its time — and the dashboard's writes need the session's CSRF token."""

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
