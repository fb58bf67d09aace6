"""Three ``postroom serve`` nodes on one PostgreSQL database under load (PIPELINE §9), one of
them killed with SIGKILL twice and restarted: messages are posted round-robin to every node
(a message whose node is down goes to the next one, as a load balancer would send it), answers
go to an outbound-webhook sink. Afterwards every acknowledged message is stored once, every
fired message is answered by exactly one turn with one stored answer, every answer reached the
sink, a repeated delivery only ever straddles a kill, and no job is left running."""

from __future__ import annotations

import asyncio
import itertools
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_faults import (
    StartServer,
    _answers_by_job,
    _check_answer,
    _check_inbound,
    _idle,
    _jobs_of_messages,
    _plan,
)

from e2e_harness import ServerProcess, Sink, api_client, get_ok, list_jobs, postroom_cli

NODES = 3
CHATS = [f"api:nodes/{i:03d}" for i in range(45)]
TOTAL = 450
KILLED = 1  # the node killed and restarted
POSTERS = 6
# Generous: a loaded machine may take minutes; a quiet one is done in seconds.
QUIET_TIMEOUT_S = 240.0


class Cluster:
    """The nodes, and where each message's POST ended."""

    def __init__(self, servers: list[ServerProcess], plan: list[dict[str, Any]]) -> None:
        self.servers = servers
        self.clients = [api_client(s) for s in servers]
        self.down: set[int] = set()
        self.pending = list(enumerate(plan))
        self.acked: dict[str, int] = {}
        self.refused: list[tuple[str, int, str]] = []

    async def post_all(self, *, pause_at: int | None = None, paused: asyncio.Event) -> None:
        """One poster: POST pending messages, each to node ``i % 3`` or the next one up."""
        while self.pending:
            if pause_at is not None and len(self.acked) >= pause_at and not paused.is_set():
                await paused.wait()
            index, body = self.pending.pop(0)
            for attempt in range(NODES):
                node = (index + attempt) % NODES
                if node in self.down:
                    continue
                try:
                    response = await self.clients[node].post("/api/v1/messages", json=body)
                except httpx.TransportError:
                    continue  # killed mid-request: the next node takes it (same id: dedupe)
                if response.status_code != 200:
                    self.refused.append((body["id"], response.status_code, response.text))
                else:
                    self.acked[body["id"]] = response.json()["seq"]
                break
            else:
                self.pending.append((index, body))
                await asyncio.sleep(0.05)

    async def reopen(self, node: int) -> None:
        await self.clients[node].aclose()
        self.clients[node] = api_client(self.servers[node])

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


@pytest.mark.timeout(600)
async def test_three_nodes_lose_nothing_and_answer_once_through_two_kills(
    start_server: StartServer, sink: Sink, data_dir: Path, pg_url: str
) -> None:
    env = {
        "POSTROOM_DATABASE__URL": pg_url,
        "POSTROOM_PROVIDERS__ECHO__DELAY_MS": "20",
        **sink.env(),
    }
    done = await asyncio.to_thread(postroom_cli, data_dir, "init", env=env)
    assert done.returncode == 0, done.stderr
    dirs = [data_dir] + [
        Path(shutil.copytree(data_dir, data_dir.parent / f"node{n}")) for n in range(1, NODES)
    ]
    servers = [await asyncio.to_thread(start_server, env, d) for d in dirs]
    plan = _plan("node", CHATS, TOTAL)
    by_id = {m["id"]: m for m in plan}
    cluster = Cluster(servers, plan)
    # (sink arrivals when the kill came, sink arrivals once the node was back)
    kills: list[tuple[int, int]] = []
    try:
        for share in (TOTAL // 3, 2 * TOTAL // 3):
            paused = asyncio.Event()
            posting = [
                asyncio.create_task(cluster.post_all(pause_at=share, paused=paused))
                for _ in range(POSTERS)
            ]
            while len(cluster.acked) < share and any(not p.done() for p in posting):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            paused.set()  # the posters go on while the node dies and comes back
            cluster.down.add(KILLED)
            at_kill = len(sink.received)
            await asyncio.to_thread(servers[KILLED].kill)
            await asyncio.to_thread(servers[KILLED].start)
            await cluster.reopen(KILLED)
            cluster.down.discard(KILLED)
            kills.append((at_kill, len(sink.received)))
            await asyncio.gather(*posting)
        never = asyncio.Event()
        await asyncio.gather(*(cluster.post_all(paused=never) for _ in range(POSTERS)))
        assert not cluster.refused, cluster.refused
        assert set(cluster.acked) == set(by_id), sorted(set(by_id) - set(cluster.acked))

        http = cluster.clients[0]
        await _wait_quiet(cluster, sink)
        jobs = await list_jobs(http)
        rows = {
            chat: list(
                (await get_ok(http, "/api/v1/messages", chat_jid=chat, limit=1000))["messages"]
            )
            for chat in CHATS
        }
    finally:
        await cluster.close()

    messages = [m for chat in CHATS for m in rows[chat]]
    problems = _check_inbound(by_id, cluster.acked, messages)
    problems += [f"job {j['id']} ended {j['status']}" for j in jobs if j["status"] != "done"]
    in_jobs = _jobs_of_messages(jobs)
    problems += [
        f"inbound {m} is in jobs {in_jobs[m]}" for m in sorted(by_id) if len(in_jobs[m]) != 1
    ]
    answers_of = _answers_by_job(messages)
    for job in jobs:
        found = _check_answer(job, answers_of.get(job["id"], []), by_id)
        if found:
            chat = [
                (m["seq"], m["message_type"], m["id"], m["metadata"].get("job_id"))
                for m in rows[job["chat_jid"]]
            ]
            problems += [*found, f"  its chat: {chat}", f"  the job: {job}"]
    delivered = {d.body["id"] for d in sink.received}
    problems += [
        f"answer {a['id']} never delivered"
        for answers in answers_of.values()
        for a in answers
        if a["id"] not in delivered
    ]
    problems += _repeats_outside_kills(sink, kills)
    if problems:
        stderr = "\n".join(s.stderr(15) for s in servers)
        pytest.fail("\n".join([f"kills (sink marks): {kills}", *problems[:40], stderr]))


async def _wait_quiet(cluster: Cluster, sink: Sink) -> None:
    """Until no job is queued or running, no delivery is pending and every answer reached the
    sink."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUIET_TIMEOUT_S
    http = cluster.clients[0]
    while True:
        active = [j for j in await list_jobs(http) if j["status"] in ("queued", "running")]
        if not active and await _idle(http):
            return
        if loop.time() > deadline:
            pytest.fail(f"not quiet after {QUIET_TIMEOUT_S} s: {len(active)} active jobs")
        await asyncio.sleep(0.2)


def _repeats_outside_kills(sink: Sink, kills: list[tuple[int, int]]) -> list[str]:
    """A key arrives twice only when a kill lies between its two arrivals (the killed node was
    sending it)."""
    arrivals: dict[str | None, list[int]] = defaultdict(list)
    for index, delivery in enumerate(sink.received):
        arrivals[delivery.idempotency_key].append(index)
    counts = Counter({key: len(seen) for key, seen in arrivals.items()})
    problems: list[str] = []
    for key, seen in arrivals.items():
        for first, second in itertools.pairwise(seen):
            if not any(first < back and second >= at for at, back in kills):
                problems.append(f"{key} delivered twice (#{first}, #{second}) with no kill between")
    if any(n > 2 for n in counts.values()):
        problems.append(f"keys delivered more than twice: {counts.most_common(3)}")
    return problems
