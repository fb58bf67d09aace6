"""A Telegram bot configured on three ``postroom serve`` nodes on one PostgreSQL database
(PIPELINE §9): the fake Bot API sees exactly one process polling at a time; once that process is
killed with SIGKILL another node polls within 30 s, and a message sent after the failover is
answered once. The fake names each ``getUpdates`` caller by the process that owns the calling
socket (``/proc``), so "one poller" is what Telegram would see, not what postroom says."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from test_faults import StartServer

from channels.fake_telegram import TOKEN, FakeTelegram, private_message, serve_fake_telegram

from e2e_harness import ServerProcess, api_client, get_ok, postroom_cli

NODES = 3
#: PIPELINE §9: another node takes a single-connection adapter within this.
FAILOVER_S = 30.0
#: getUpdates calls to watch before calling the polling steady (each is held about 0.2 s).
STEADY_POLLS = 15
USER_ID = 4242


def _socket_inode(port: int) -> str | None:
    """The inode of the loopback socket whose local end is *port* (the caller's side)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return fields[9]
    return None


def _owner(port: int, pids: list[int]) -> int | None:
    """Which of *pids* holds the socket whose local port is *port*."""
    inode = _socket_inode(port)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        try:
            if any(fd.readlink().as_posix() == target for fd in fds.iterdir()):
                return pid
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return None


class PollWatch(FakeTelegram):
    """The fake Bot API, noting which process asks for updates and how many ask at once."""

    def __init__(self) -> None:
        super().__init__()
        self.pids: list[int] = []
        #: (monotonic time, pid) of every getUpdates.
        self.polls: list[tuple[float, int | None]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def _method(self, request: Request) -> Response:
        if request.path_params.get("method") != "getUpdates":
            return await super()._method(request)
        port = request.client.port if request.client else 0
        self.polls.append((time.monotonic(), _owner(port, self.pids)))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super()._method(request)
        finally:
            self.in_flight -= 1

    def pollers_since(self, since: float) -> set[int | None]:
        return {pid for at, pid in self.polls if at >= since}

    def polls_since(self, since: float) -> int:
        return sum(1 for at, _ in self.polls if at >= since)


async def _until(check: Any, *, timeout_s: float, what: str) -> None:
    """Wait for *check* (sync or async) to hold; fail naming *what* after *timeout_s*."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


@pytest.mark.timeout(180)
async def test_one_node_polls_telegram_and_another_takes_over_after_a_kill(
    start_server: StartServer, data_dir: Path, pg_url: str
) -> None:
    async with serve_fake_telegram(PollWatch()) as fake:
        assert isinstance(fake, PollWatch)
        env = {
            "POSTROOM_DATABASE__URL": pg_url,
            "POSTROOM_ACCESS__DM_POLICY": "open",
            "POSTROOM_CHANNELS__TELEGRAM__ENABLED": "true",
            "POSTROOM_CHANNELS__TELEGRAM__TOKEN": TOKEN,
            "POSTROOM_CHANNELS__TELEGRAM__BASE_URL": fake.url,
        }
        done = await asyncio.to_thread(postroom_cli, data_dir, "init", env=env)
        assert done.returncode == 0, done.stderr
        dirs = [data_dir] + [
            Path(shutil.copytree(data_dir, data_dir.parent / f"node{n}")) for n in range(1, NODES)
        ]
        servers: list[ServerProcess] = []
        for directory in dirs:
            servers.append(await asyncio.to_thread(start_server, env, directory))
            fake.pids.append(_pid(servers[-1]))

        # Every node is up: from here on, one process polls.
        steady = time.monotonic()
        await _until(
            lambda: fake.polls_since(steady) >= STEADY_POLLS, timeout_s=30, what="steady polling"
        )
        pollers = fake.pollers_since(steady)
        assert len(pollers) == 1 and None not in pollers, pollers
        assert fake.most_in_flight == 1
        (polling,) = pollers
        victim = next(i for i, s in enumerate(servers) if _pid(s) == polling)
        survivors = [s for i, s in enumerate(servers) if i != victim]
        http = api_client(survivors[0])
        try:
            listed = (await get_ok(http, "/api/v1/nodes"))["nodes"]
            assert [n["pid"] for n in listed if n["adapters"] == ["telegram"]] == [polling]

            await asyncio.to_thread(servers[victim].kill)
            killed_at = time.monotonic()
            others = {_pid(s) for s in survivors}
            await _until(
                lambda: fake.pollers_since(killed_at) & others,
                timeout_s=FAILOVER_S,
                what="another node polling",
            )
            took_over = fake.pollers_since(killed_at) & others
            assert len(took_over) == 1, took_over
            assert fake.most_in_flight == 1

            fake.push(private_message("are you still there?", user_id=USER_ID))
            await _until(lambda: _answers(fake), timeout_s=30, what="an answer")
            await _until(lambda: _quiet(http), timeout_s=30, what="every job done")
            assert len(_answers(fake)) == 1, _answers(fake)
            assert fake.pollers_since(killed_at) == took_over
            assert fake.most_in_flight == 1

            listed = (await get_ok(http, "/api/v1/nodes"))["nodes"]
            assert [n["pid"] for n in listed if n["adapters"] == ["telegram"]] == list(took_over)
        finally:
            await http.aclose()


def _pid(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


def _answers(fake: FakeTelegram) -> list[dict[str, Any]]:
    return [c for c in fake.called("sendMessage") if str(c.get("chat_id")) == str(USER_ID)]


async def _quiet(http: Any) -> bool:
    jobs = (await get_ok(http, "/api/v1/jobs", limit=1000))["jobs"]
    return bool(jobs) and all(job["status"] == "done" for job in jobs)
