"""Fault tests of ``postroom serve`` (PIPELINE §8), fast versions.

1. Repeated SIGKILL under load: 50 chats answered by a slowed ``echo`` runner; the server is
   killed three times at seeded random moments and restarted on the same data directory. Nothing
   acknowledged is lost or stored twice, every fired message is answered by exactly one turn with
   exactly one stored answer, every answer reaches the webhook sink, and a repeated delivery (same
   ``Idempotency-Key``) only ever straddles a kill.
2. A flaky model API: the real ``openai`` SDK against a local fake that fails a seeded 20% of calls
   with HTTP 500 and 10% with 429. Every fired message ends answered (stored and delivered) or in a
   failed turn with a host notice in its chat; nothing is silently lost and the queue ends empty.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from postroom.engine.delivery import DeliverySettings

from e2e_harness import (
    UNLIMITED_TURNS,
    Delivery,
    ServerProcess,
    Sink,
    api_client,
    get_ok,
    idle_in_metrics,
    list_jobs,
    wait_for,
)
from fake_openai import Call, FlakyChatCompletions, fault_statuses, serve_app

StartServer = Callable[..., ServerProcess]

POSTERS = 6
QUIET_TIMEOUT_S = 45.0


# -- helpers over the HTTP API (async: the test's loop also serves the fakes) ---------------------


async def _rows(http: httpx.AsyncClient, chats: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {
        chat: list((await get_ok(http, "/api/v1/messages", chat_jid=chat, limit=1000))["messages"])
        for chat in chats
    }


def _plan(prefix: str, chats: list[str], total: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}-{i:03d}",
            "chat_jid": chats[i % len(chats)],
            "sender": f"api:user/u{i % 7}",
            "sender_name": f"U{i % 7}",
            "content": f"{prefix} message number {i:03d}",
        }
        for i in range(total)
    ]


async def _wait_quiet(
    http: httpx.AsyncClient, server: ServerProcess, sink: Sink, chats: list[str]
) -> None:
    """Until no job is queued or running, every stored answer and host notice reached the sink
    and no delivery is pending (a delivery is pending until the sink answered it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUIET_TIMEOUT_S
    while True:
        active = [j for j in await list_jobs(http) if j["status"] in ("queued", "running")]
        rows = await _rows(http, chats)
        outbound = [
            m for chat in chats for m in rows[chat] if m["message_type"] in ("assistant", "host")
        ]
        delivered = {d.body["id"] for d in sink.received}
        undelivered = [m["id"] for m in outbound if m["id"] not in delivered]
        if not active and not undelivered and await _idle(http):
            return
        if loop.time() > deadline:
            pytest.fail(
                f"not quiet after {QUIET_TIMEOUT_S} s: active jobs {active}, undelivered "
                f"{undelivered}\n{server.stderr(60)}"
            )
        await asyncio.sleep(0.1)


def _check_headers(
    received: list[Delivery], stored: dict[tuple[str, str], dict[str, Any]]
) -> list[str]:
    """Each delivery carries its ``Idempotency-Key`` and a valid signature, and is of a stored
    message, with that message's content."""
    problems: list[str] = []
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
    return problems


def _check_inbound(
    by_id: dict[str, dict[str, Any]], acked: dict[str, int], messages: list[dict[str, Any]]
) -> list[str]:
    """Every acknowledged message is stored exactly once, as acknowledged."""
    problems: list[str] = []
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
    return problems


def _jobs_of_messages(jobs: list[dict[str, Any]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        for message_id in job["message_ids"]:
            found[message_id].append(job["id"])
    return found


def _answers_by_job(messages: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    found: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        if message["message_type"] == "assistant":
            found[message["metadata"].get("job_id")].append(message)
    return found


def _check_answer(
    job: dict[str, Any], answers: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]
) -> list[str]:
    """A done job has exactly one stored answer, in its chat, that repeats its messages."""
    if len(answers) != 1:
        return [
            f"job {job['id']} ({job['chat_jid']}, messages {job['message_ids']}, "
            f"{job['status']}) has {len(answers)} stored answers {[a['id'] for a in answers]}"
        ]
    [answer] = answers
    missing = [i for i in job["message_ids"] if by_id[i]["content"] not in answer["content"]]
    if missing or answer["chat_jid"] != job["chat_jid"] or answer["routed_to"] != "main":
        return [f"job {job['id']}'s answer does not answer {missing}: {answer['content']!r}"]
    return []


# -- 1. repeated SIGKILL under load -----------------------------------------------------------

KILL_CHATS = [f"api:faults/{i:02d}" for i in range(50)]
KILL_TOTAL = 150
KILLS = 3
KILL_SEED = 20_260_105


@dataclass
class _Load:
    """The messages of the kill test and what became of each POST."""

    plan: list[dict[str, Any]]
    rng: random.Random
    pending: list[dict[str, Any]] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)  # id → seq, for every 200
    unknown: list[str] = field(default_factory=list)  # cut by a kill: stored or not
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    reposted: list[tuple[str, bool]] = field(default_factory=list)  # (id, duplicate)
    by_id: dict[str, dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.pending = list(self.plan)
        self.by_id = {m["id"]: m for m in self.plan}

    async def repost_unknown(self, http: httpx.AsyncClient, server: ServerProcess) -> None:
        """After a restart: POST again what a kill cut off (the same id, so a no-op if stored)."""
        for message_id in self.unknown:
            response = await http.post("/api/v1/messages", json=self.by_id[message_id])
            assert response.status_code == 200, (message_id, response.text, server.stderr())
            self.acked[message_id] = response.json()["seq"]
            self.reposted.append((message_id, response.json()["duplicate"]))
        self.unknown.clear()

    async def post(
        self,
        http: httpx.AsyncClient,
        *,
        killed: asyncio.Event,
        kill_after: int | None = None,
        enough: asyncio.Event | None = None,
    ) -> None:
        """One poster: POST pending messages until none is left or the server was killed; set
        *enough* once *kill_after* messages in all were acknowledged."""
        while True:
            await asyncio.sleep(self.rng.uniform(0, 0.02))
            if killed.is_set() or not self.pending:
                return
            body = self.pending.pop(0)
            try:
                response = await http.post("/api/v1/messages", json=body)
            except httpx.TransportError:
                self.unknown.append(body["id"])
                continue
            if response.status_code != 200:
                self.refused.append((body["id"], response.status_code, response.text))
                continue
            self.acked[body["id"]] = response.json()["seq"]
            if enough is not None and kill_after is not None and len(self.acked) >= kill_after:
                enough.set()


@pytest.mark.timeout(150)
async def test_repeated_sigkill_under_load_loses_nothing_and_answers_once(
    start_server: StartServer, sink: Sink
):
    rng = random.Random(KILL_SEED)
    # Turns long enough that a kill finds some running, however fast the machine delivers.
    env = {"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "150", **sink.env(), **UNLIMITED_TURNS}
    load = _Load(_plan("kill", KILL_CHATS, KILL_TOTAL), rng)
    # A kill comes once about a quarter, half and three quarters of the messages were
    # acknowledged (give or take), then after a random pause of up to a few turns' length.
    share = KILL_TOTAL // (KILLS + 1)
    kill_after_acks = [rng.randint(share * k - 12, share * k + 8) for k in range(1, KILLS + 1)]
    kill_pauses = [rng.uniform(0.0, 0.06) for _ in range(KILLS)]
    running_at_kill: list[list[int]] = []
    # len(sink.received) once each killed process was surely gone: a delivery repeated because
    # of kill k has its first copy before marks[k] and its next one after.
    marks: list[int] = []

    server = start_server(env)
    for kill_after, pause in zip(kill_after_acks, kill_pauses, strict=True):
        killed, enough = asyncio.Event(), asyncio.Event()
        async with api_client(server) as http:
            await load.repost_unknown(http, server)

            async def killer(
                http: httpx.AsyncClient = http,
                killed: asyncio.Event = killed,
                enough: asyncio.Event = enough,
                kill_after: int = kill_after,
                pause: float = pause,
            ) -> None:
                if len(load.acked) < kill_after:
                    await asyncio.wait_for(enough.wait(), timeout=30)
                await asyncio.sleep(pause)
                running_at_kill.append([j["id"] for j in await list_jobs(http, "running")])
                killed.set()
                await asyncio.to_thread(server.kill)

            posters = [
                load.post(http, killed=killed, kill_after=kill_after, enough=enough)
                for _ in range(POSTERS)
            ]
            await asyncio.gather(*posters, killer())
        # A request the sink had begun to read when the process died is recorded (or dropped).
        await asyncio.to_thread(wait_for, sink.quiet, what="the killed server's requests")
        marks.append(len(sink.received))
        await asyncio.to_thread(server.start)

    async with api_client(server) as http:
        await load.repost_unknown(http, server)
        never = asyncio.Event()
        await asyncio.gather(*(load.post(http, killed=never) for _ in range(POSTERS)))
        assert not load.refused, load.refused
        assert not load.unknown, load.unknown
        assert set(load.acked) == set(load.by_id), sorted(set(load.by_id) - set(load.acked))
        # A redelivery of an acknowledged message is a no-op, also after the crashes.
        for message in load.plan[:: KILL_TOTAL // 4]:
            response = await http.post("/api/v1/messages", json=message)
            assert response.status_code == 200, response.text
            again = response.json()
            assert (again["duplicate"], again["seq"]) == (True, load.acked[message["id"]]), again

        await _wait_quiet(http, server, sink, KILL_CHATS)
        jobs = await list_jobs(http)
        rows = await _rows(http, KILL_CHATS)

    problems = _verify_kills(
        by_id=load.by_id,
        acked=load.acked,
        jobs=jobs,
        rows=rows,
        received=sink.received,
        marks=marks,
    )
    if not any(running_at_kill):
        problems.append("no turn was running at any kill")
    summary = (
        f"kills after {kill_after_acks} acks (+{[round(p, 3) for p in kill_pauses]} s); "
        f"jobs running at each kill: {running_at_kill}; re-posted after a restart "
        f"(id, duplicate): {load.reposted}; sink marks {marks}"
    )
    if problems:
        pytest.fail("\n".join([summary, *problems, "server stderr:", server.stderr(25)]))


def _verify_kills(
    *,
    by_id: dict[str, dict[str, Any]],
    acked: dict[str, int],
    jobs: list[dict[str, Any]],
    rows: dict[str, list[dict[str, Any]]],
    received: list[Delivery],
    marks: list[int],
) -> list[str]:
    """Every broken promise of PIPELINE §8 ("process killed at any point"), one line each."""
    messages = [m for chat in KILL_CHATS for m in rows[chat]]
    problems = _check_inbound(by_id, acked, messages)

    for job in jobs:
        if job["status"] != "done":
            problems.append(f"job {job['id']} ended {job['status']}: {job}")
    in_jobs = _jobs_of_messages(jobs)
    for message_id in sorted(acked):
        if len(in_jobs[message_id]) != 1:
            problems.append(f"inbound {message_id} is in jobs {in_jobs[message_id]}")

    answers_of = _answers_by_job(messages)
    for job_id in set(answers_of) - {j["id"] for j in jobs}:
        problems.append(f"answers with no job (metadata.job_id {job_id}): {answers_of[job_id]}")
    for job in sorted(jobs, key=lambda j: j["id"]):
        problems.extend(_check_answer(job, answers_of.get(job["id"], []), by_id))
    if any(m["message_type"] == "host" for m in messages):
        problems.append(f"host notices: {[m for m in messages if m['message_type'] == 'host']}")

    stored = {(m["id"], m["chat_jid"]): m for m in messages}
    problems.extend(_check_headers(received, stored))
    delivered = {d.body["id"] for d in received}
    problems.extend(
        f"answer {a['id']} (job {a['metadata'].get('job_id')}) never delivered"
        for answers in answers_of.values()
        for a in answers
        if a["id"] not in delivered
    )
    problems.extend(_check_repeats(received, marks))
    return problems


def _check_repeats(received: list[Delivery], marks: list[int]) -> list[str]:
    """A delivery is repeated only across a kill: between two copies of one ``Idempotency-Key``
    lies a kill's mark. A kill repeats at most what was in flight when it came: one row per chat,
    at most the delivery loop's concurrency."""
    problems: list[str] = []
    arrivals: dict[str | None, list[int]] = defaultdict(list)
    for index, delivery in enumerate(received):
        arrivals[delivery.idempotency_key].append(index)
    per_kill: Counter[int] = Counter()
    for key, indexes in arrivals.items():
        for first, second in itertools.pairwise(indexes):
            kill = bisect.bisect_right(marks, first)
            if kill == len(marks) or marks[kill] > second:
                problems.append(
                    f"{key} delivered again (arrivals #{first}, #{second}) with no kill between "
                    f"(sink marks at the kills: {marks})"
                )
            else:
                per_kill[kill] += 1
    in_flight = min(len(KILL_CHATS), DeliverySettings().concurrency)
    if any(n > in_flight for n in per_kill.values()):
        problems.append(f"a kill repeated more deliveries than can be in flight: {per_kill}")
    return problems


# -- 2. a flaky model API ----------------------------------------------------------------------

FLAKY_CHATS = [f"api:flaky/{i:02d}" for i in range(20)]
FLAKY_TOTAL = 40
FLAKY_SEED = 4242


@pytest.mark.timeout(150)
async def test_flaky_provider_answers_or_reports_every_message(
    start_server: StartServer, sink: Sink
):
    # The first 20 calls (there is at least one per chat) hold both faults: they really happen.
    first = list(
        itertools.islice(
            fault_statuses(FLAKY_SEED, server_error_share=0.2, rate_limit_share=0.1), 20
        )
    )
    assert {500, 429} <= set(first), first

    keys = ["sk-fault-test-key-one", "sk-fault-test-key-two"]
    fake = FlakyChatCompletions(seed=FLAKY_SEED, server_error_share=0.2, rate_limit_share=0.1)
    plan = _plan("flaky", FLAKY_CHATS, FLAKY_TOTAL)
    by_id = {m["id"]: m for m in plan}
    rng = random.Random(FLAKY_SEED)
    async with serve_app(fake.app) as fake_url:
        env = {
            "POSTROOM_DEFAULTS__PROVIDER": "openai",
            "POSTROOM_DEFAULTS__MODEL": "gpt-fault-test",
            "POSTROOM_PROVIDERS__OPENAI__BASE_URL": f"{fake_url}/v1",
            "POSTROOM_PROVIDERS__OPENAI__API_KEYS": json.dumps(keys),
            "POSTROOM_PROVIDERS__OPENAI__TIMEOUT": "10s",
            # Two runs per turn, 0.2 s apart: some turns fail for good, most are retried.
            "POSTROOM_QUEUE__MAX_ATTEMPTS": "2",
            "POSTROOM_QUEUE__BACKOFF_BASE": "100ms",
            **sink.env(),
            **UNLIMITED_TURNS,
        }
        server = await asyncio.to_thread(start_server, env)
        pending = list(plan)
        acked: dict[str, int] = {}
        async with api_client(server) as http:

            async def poster() -> None:
                while pending:
                    body = pending.pop(0)
                    response = await http.post("/api/v1/messages", json=body)
                    assert response.status_code == 200, (body, response.text)
                    acked[body["id"]] = response.json()["seq"]
                    await asyncio.sleep(rng.uniform(0, 0.05))

            await asyncio.gather(*(poster() for _ in range(4)))
            await _wait_quiet(http, server, sink, FLAKY_CHATS)
            jobs = await list_jobs(http)
            rows = await _rows(http, FLAKY_CHATS)

    statuses = fake.status_counts()
    problems = _verify_flaky(by_id=by_id, acked=acked, jobs=jobs, rows=rows, received=sink.received)
    if statuses[500] == 0 or statuses[429] == 0:
        problems.append(f"the faults did not happen: {statuses}")
    if len(acked) != FLAKY_TOTAL:
        problems.append(f"acknowledged {len(acked)} of {FLAKY_TOTAL}")
    models = {call.model for call in fake.calls}
    if models != {"gpt-fault-test"}:
        problems.append(f"the configured model was not asked for: {models}")
    if not any(j["attempts"] > 0 for j in jobs):
        problems.append("no turn was retried after a failed run")
    problems.extend(_check_rotation(fake.calls, keys))
    summary = (
        f"calls by status {dict(statuses)}; jobs by status "
        f"{dict(Counter(j['status'] for j in jobs))}; jobs with failed runs "
        f"{[(j['id'], j['status'], j['attempts']) for j in jobs if j['attempts']]}"
    )
    if problems:
        pytest.fail("\n".join([summary, *problems, "server stderr:", server.stderr(25)]))


def _verify_flaky(
    *,
    by_id: dict[str, dict[str, Any]],
    acked: dict[str, int],
    jobs: list[dict[str, Any]],
    rows: dict[str, list[dict[str, Any]]],
    received: list[Delivery],
) -> list[str]:
    """Each acknowledged message is in one turn; the turn is done with one delivered answer, or
    failed with a delivered host notice in each of its chats; no queued or running job is left."""
    messages = [m for chat in FLAKY_CHATS for m in rows[chat]]
    problems = _check_inbound(by_id, acked, messages)
    in_jobs = _jobs_of_messages(jobs)
    for message_id in sorted(acked):
        if len(in_jobs[message_id]) != 1:
            problems.append(f"inbound {message_id} is in jobs {in_jobs[message_id]}")

    answers_of = _answers_by_job(messages)
    notices_of: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    retries_of: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for message in messages:
        if message["message_type"] == "host":
            source = message["metadata"].get("source")
            if source == "turn_retry":
                # The first failed run of a turn says when it tries again, once per chat.
                retries_of[message["metadata"].get("job_id")].append(message)
                if not message["content"].startswith("⚠️ trying again in "):
                    problems.append(f"a malformed retry notice: {message}")
                continue
            if source != "turn_failed":
                problems.append(f"an unexpected host notice: {message}")
            notices_of[message["metadata"].get("job_id")].append(message)
    for job_id, retries in retries_of.items():
        if len(retries) != len({r["chat_jid"] for r in retries}):
            problems.append(f"job {job_id} announced its retry more than once: {retries}")
    for job in sorted(jobs, key=lambda j: j["id"]):
        answers = answers_of.get(job["id"], [])
        notices = notices_of.get(job["id"], [])
        if job["status"] == "failed" and not retries_of.get(job["id"]):
            problems.append(f"failed job {job['id']} never said it would try again")
        if job["status"] == "done":
            problems.extend(_check_answer(job, answers, by_id))
            if notices:
                problems.append(f"done job {job['id']} also has failure notices {notices}")
        elif job["status"] == "failed":
            chats = sorted({by_id[i]["chat_jid"] for i in job["message_ids"]})
            noticed = sorted(n["chat_jid"] for n in notices)
            well_formed = all(
                n["content"].startswith(f"⚠️ could not answer (job {job['id']})") for n in notices
            )
            if noticed != chats or not well_formed:
                problems.append(f"failed job {job['id']} ({chats}) has notices {notices}")
            if answers or job["attempts"] != job["max_attempts"] or not job["last_error"]:
                problems.append(f"failed job {job['id']} is not a spent turn: {job} {answers}")
        else:
            problems.append(f"job {job['id']} ended {job['status']}: {job}")
    known = {j["id"] for j in jobs}
    for job_id in (set(answers_of) | set(notices_of)) - known:
        problems.append(f"answers or notices of no job ({job_id})")

    stored = {(m["id"], m["chat_jid"]): m for m in messages}
    problems.extend(_check_headers(received, stored))
    delivered = Counter(d.idempotency_key for d in received)
    for message in messages:
        if message["message_type"] in ("assistant", "host"):
            key = f"{message['id']}:{message['chat_jid']}:0"
            if delivered[key] != 1:
                problems.append(f"{message['message_type']} {key} delivered {delivered[key]}×")
    return problems


def _check_rotation(calls: list[Call], keys: list[str]) -> list[str]:
    """A 429 to the first key is followed at once by the same request to the second (the account
    pool moves on; ``retry-after: 0`` rests neither key)."""
    problems: list[str] = []
    for index, call in enumerate(calls):
        if call.status != 429 or call.api_key != keys[0]:
            continue
        if not any(
            later.api_key == keys[1] and later.messages == call.messages
            for later in calls[index + 1 :]
        ):
            problems.append(f"call #{index} got a 429 and was not sent to the second key")
    if {call.api_key for call in calls} - set(keys):
        problems.append(f"calls with unknown keys: { ({c.api_key for c in calls}) }")
    return problems


async def _idle(http: httpx.AsyncClient) -> bool:
    """No turn queued or running and no delivery pending, as ``/metrics`` counts them."""
    response = await http.get("/metrics")
    return response.status_code == 200 and idle_in_metrics(response.text)
