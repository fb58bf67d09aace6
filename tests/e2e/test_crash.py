"""Crash recovery of ``postroom serve`` (PIPELINE §1.3, §2 leases and recovery, §3, §8).

Messages are posted concurrently across several chats; the server is SIGKILLed while turns run,
restarted on the same data directory, and given the rest. Then: nothing acknowledged is lost or
stored twice, every fired message is answered by exactly one turn with exactly one stored answer,
every answer reaches the webhook sink (a repeat only of the same ``Idempotency-Key``), and the
queue is empty.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from e2e_harness import (
    UNLIMITED_TURNS,
    Delivery,
    ServerProcess,
    Sink,
    api_client,
    get_ok,
    idle_in_metrics,
    list_jobs,
)

pytestmark = pytest.mark.timeout(120)

StartServer = Callable[..., ServerProcess]

CHATS = [f"api:crash/{i}" for i in range(8)]
TOTAL = 40
KILL_AFTER_ACKS = TOTAL // 2
POSTERS = 6
KILLS = 1
QUIET_TIMEOUT_S = 45.0


def _plan() -> list[dict[str, Any]]:
    return [
        {
            "id": f"crash-{i:02d}",
            "chat_jid": CHATS[i % len(CHATS)],
            "sender": f"api:user/u{i % 5}",
            "sender_name": f"U{i % 5}",
            "content": f"message number {i:02d}",
        }
        for i in range(TOTAL)
    ]


async def _messages(http: httpx.AsyncClient, chat_jid: str) -> list[dict[str, Any]]:
    return list((await get_ok(http, "/api/v1/messages", chat_jid=chat_jid, limit=1000))["messages"])


async def test_sigkill_while_turns_run_loses_nothing_and_answers_once(
    start_server: StartServer, sink: Sink
):
    env = {"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "50", **sink.env(), **UNLIMITED_TURNS}
    server = start_server(env)
    plan = _plan()
    by_id = {m["id"]: m for m in plan}
    pending = list(plan)
    acked: dict[str, int] = {}  # id → seq, for every 200
    unknown: list[str] = []  # the POST failed with a transport error: stored or not
    refused: list[tuple[str, int, str]] = []
    killed = asyncio.Event()
    half_acked = asyncio.Event()
    rng = random.Random(7)

    # -- phase 1: concurrent posts, SIGKILL once about half were acknowledged -------------------
    async with api_client(server) as http:

        async def poster() -> None:
            while True:
                await asyncio.sleep(rng.uniform(0, 0.03))
                if killed.is_set() or not pending:
                    return
                body = pending.pop(0)
                try:
                    response = await http.post("/api/v1/messages", json=body)
                except httpx.TransportError:
                    unknown.append(body["id"])
                    continue
                if response.status_code != 200:
                    refused.append((body["id"], response.status_code, response.text))
                    continue
                acked[body["id"]] = response.json()["seq"]
                if len(acked) >= KILL_AFTER_ACKS:
                    half_acked.set()

        async def killer() -> list[dict[str, Any]]:
            await asyncio.wait_for(half_acked.wait(), timeout=30)
            running: list[dict[str, Any]] = []
            for _ in range(200):  # the turns take 50 ms each: one is running almost always
                running = await list_jobs(http, "running")
                if running:
                    break
                await asyncio.sleep(0.01)
            killed.set()
            await asyncio.to_thread(server.kill)
            return running

        *_, running_at_kill = await asyncio.gather(*(poster() for _ in range(POSTERS)), killer())

    assert not refused, refused
    assert running_at_kill, "no turn was running when the server was killed"
    assert len(acked) >= KILL_AFTER_ACKS, acked
    not_sent = [m["id"] for m in pending]
    pre_kill_acked = dict(acked)

    # -- phase 2: restart on the same data, re-post the unknown ones, post the rest --------------
    server.start()
    async with api_client(server) as http:
        for message_id in unknown:
            response = await http.post("/api/v1/messages", json=by_id[message_id])
            assert response.status_code == 200, (message_id, response.text, server.stderr())
            acked[message_id] = response.json()["seq"]
        redelivered = await asyncio.gather(
            *(http.post("/api/v1/messages", json=by_id[i]) for i in not_sent)
        )
        for message_id, response in zip(not_sent, redelivered, strict=True):
            assert response.status_code == 200, (message_id, response.text, server.stderr())
            assert response.json()["duplicate"] is False, response.json()
            acked[message_id] = response.json()["seq"]
        # A redelivery of an acknowledged message is a no-op, also after a crash.
        for message_id in list(pre_kill_acked)[:3]:
            response = await http.post("/api/v1/messages", json=by_id[message_id])
            assert response.status_code == 200, response.text
            again = response.json()
            assert again["duplicate"] is True, again
            assert again["seq"] == pre_kill_acked[message_id], again
        assert set(acked) == set(by_id)

        # -- wait until quiet: no queued or running job, every stored answer delivered ----------
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIET_TIMEOUT_S
        while True:
            active = [j for j in await list_jobs(http) if j["status"] in ("queued", "running")]
            rows = {chat: await _messages(http, chat) for chat in CHATS}
            answers = [m for chat in CHATS for m in rows[chat] if m["message_type"] == "assistant"]
            delivered = {d.body["id"] for d in sink.received}
            metrics = await http.get("/metrics")
            idle = metrics.status_code == 200 and idle_in_metrics(metrics.text)
            if not active and all(a["id"] in delivered for a in answers) and idle:
                break
            if loop.time() > deadline:
                pytest.fail(
                    f"not quiet after {QUIET_TIMEOUT_S} s: active jobs {active}, undelivered "
                    f"{[a['id'] for a in answers if a['id'] not in delivered]}\n"
                    f"{server.stderr(60)}"
                )
            await asyncio.sleep(0.1)

        jobs = await list_jobs(http)
        rows = {chat: await _messages(http, chat) for chat in CHATS}

    problems = _verify(
        by_id=by_id, acked=acked, jobs=jobs, rows=rows, received=sink.received, kills=KILLS
    )
    summary = (
        f"acked before the kill: {len(pre_kill_acked)}; POSTs cut by the kill: {unknown}; "
        f"sent after the restart: {len(not_sent)}; jobs running at the kill: "
        f"{[j['id'] for j in running_at_kill]}"
    )
    if problems:
        pytest.fail("\n".join([summary, *problems, "server stderr:", server.stderr(25)]))


def _verify(
    *,
    by_id: dict[str, dict[str, Any]],
    acked: dict[str, int],
    jobs: list[dict[str, Any]],
    rows: dict[str, list[dict[str, Any]]],
    received: list[Delivery],
    kills: int,
) -> list[str]:
    """Every broken promise of PIPELINE §8 ("process killed at any point"), one line each."""
    problems: list[str] = []
    messages = [m for chat in CHATS for m in rows[chat]]

    # Every acknowledged message is stored exactly once, in its chat, with its content.
    users = [m for m in messages if m["message_type"] == "user"]
    counts = Counter(m["id"] for m in users)
    for message_id in sorted(set(acked) | set(counts)):
        if counts[message_id] != 1:
            problems.append(f"inbound {message_id} stored {counts[message_id]} times")
    for message in users:
        expected = by_id.get(message["id"])
        if expected is None or (message["chat_jid"], message["content"], message["seq"]) != (
            expected["chat_jid"],
            expected["content"],
            acked.get(message["id"]),
        ):
            problems.append(f"stored user row differs from what was acknowledged: {message}")

    # No job is left queued or running (or failed).
    for job in jobs:
        if job["status"] != "done":
            problems.append(f"job {job['id']} ended {job['status']}: {job}")

    # Every fired message is answered by exactly one done job.
    answered_by: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        for message_id in job["message_ids"]:
            answered_by[message_id].append(job["id"])
    for message_id in sorted(acked):
        if len(answered_by[message_id]) != 1:
            problems.append(f"inbound {message_id} is in jobs {answered_by[message_id]}")

    # Every done job has exactly one stored answer, and that answer answers its messages.
    answers = [m for m in messages if m["message_type"] == "assistant"]
    answers_of: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for answer in answers:
        answers_of[answer["metadata"].get("job_id")].append(answer)
    job_ids = {j["id"] for j in jobs}
    for job_id in set(answers_of) - job_ids:
        problems.append(f"answers with no job (metadata.job_id {job_id}): {answers_of[job_id]}")
    for job in sorted(jobs, key=lambda j: j["id"]):
        found = answers_of.get(job["id"], [])
        if len(found) != 1:
            problems.append(
                f"job {job['id']} ({job['chat_jid']}, messages {job['message_ids']}, "
                f"{job['status']}) has {len(found)} stored answers {[a['id'] for a in found]}"
            )
            continue
        [answer] = found
        missing = [i for i in job["message_ids"] if by_id[i]["content"] not in answer["content"]]
        if missing or answer["chat_jid"] != job["chat_jid"] or answer["routed_to"] != "main":
            problems.append(
                f"job {job['id']}'s answer does not answer {missing}: {answer['content']!r}"
            )

    # Every answer reaches the sink; a repeat only of the same (id, chat, chunk), signed, and
    # only stored messages are delivered.
    stored = {(m["id"], m["chat_jid"]): m for m in messages}
    for delivery in received:
        body = delivery.body
        key = f"{body['id']}:{body['chat_jid']}:{body['chunk']}"
        if delivery.idempotency_key != key or not delivery.signature_valid():
            problems.append(f"bad headers {delivery.idempotency_key} {delivery.signature}: {body}")
        message = stored.get((body["id"], body["chat_jid"]))
        if message is None:
            problems.append(f"delivered a message that is not stored: {body}")
        elif body["content"] != message["content"] or body["chunks"] != 1:
            problems.append(f"delivered {body} for the stored {message}")
    delivered = {d.body["id"] for d in received}
    problems.extend(
        f"answer {a['id']} (job {a['metadata'].get('job_id')}) never delivered"
        for a in answers
        if a["id"] not in delivered
    )
    repeats = {k: n - 1 for k, n in Counter(d.idempotency_key for d in received).items() if n > 1}
    # One delivery per chat is in flight at a time, so a kill can repeat at most one per chat.
    if any(n > kills for n in repeats.values()) or sum(repeats.values()) > kills * len(CHATS):
        problems.append(f"repeated deliveries beyond the kills ({kills}): {repeats}")
    return problems
