"""Scheduled tasks over a real SQLite file (PIPELINE §7, MESSAGES §4, ROUTING §4).

The task tools validate and compute the first run; the scheduler tick, driven by hand with a
FakeClock, turns due tasks into priority-10 turns in a conversation of their own, with the
flood guard; a WorkerPool with the echo provider and a DeliveryLoop run the turns for real; the
``postroom tasks`` commands are driven through Typer's CliRunner.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from structlog.testing import capture_logs
from typer.testing import CliRunner, Result

from postroom.app.gateway import Gateway
from postroom.channels.http import EventStreamSink
from postroom.cli.main import app
from postroom.core import Action, MessageType
from postroom.core.errors import InvalidInput, NotFound
from postroom.engine import FolderSpec, Services
from postroom.engine.delivery import (
    DeliveryLoop,
    DeliverySettings,
    OutgoingChunk,
    SendResult,
    SinkRouter,
)
from postroom.engine.tasks import Scheduler, TaskService, task_chat
from postroom.engine.worker import WorkerPool
from postroom.store.records import JobKind, JobRecord, JobStatus, TaskRecord
from postroom.store.sqlite import base as sqlite_base

from fakeclock import FakeClock
from support import SQLITE_ONLY, eventually, inbound, open_gateway

#: Every test runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("db_engine")

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # the FakeClock's start (a Monday)
CHAT = "telegram:group/7"
PERSONA = "You are the reporter. You write the daily report in three bullet points."

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
async def gateway(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Gateway]:
    built = await open_gateway(tmp_path / "data", clock)
    await built.services.folders.add_folder("reporter", FolderSpec(persona=PERSONA), actor="test")
    yield built
    await built.close()


@pytest.fixture
def services(gateway: Gateway) -> Services:
    return gateway.services


@pytest.fixture
def scheduler(services: Services, clock: FakeClock) -> Scheduler:
    return Scheduler(
        store=services.store,
        catalog=services.catalog,
        signals=services.signals,
        clock=clock,
        queue=services.queue,
    )


async def add_task(
    services: Services, schedule: str, *, prompt: str = "Write the report.", **extra: Any
) -> TaskRecord:
    options: dict[str, Any] = {"folder": "reporter", "chat_jid": CHAT}
    options.update(extra)
    return await services.tasks.add(schedule=schedule, prompt=prompt, actor="test", **options)


async def job(services: Services, job_id: int) -> JobRecord:
    return await services.turns.get_job(job_id)


async def claim(services: Services, clock: FakeClock) -> JobRecord:
    """Take the next queued turn as a worker would (status running, under a lease)."""
    async with services.store.write() as tx:
        claimed = await tx.claim_job(
            now=clock(),
            lease_until=clock() + timedelta(seconds=30),
            owner="test",
            boot_id="boot",
            token=uuid.uuid4().hex,
        )
    assert claimed is not None
    return claimed


async def finish(services: Services, clock: FakeClock, claimed: JobRecord) -> None:
    assert claimed.lease_token is not None
    async with services.store.write() as tx:
        assert await tx.finish_job(
            claimed.id, claimed.lease_token, status=JobStatus.DONE, now=clock()
        )


# --------------------------------------------------------------------------- the task tools


async def test_add_validates_with_a_clear_message(services: Services) -> None:
    cases = [
        ({"folder": "nosuch"}, "every 30m", "Write it.", "nosuch"),
        ({"chat_jid": "not a jid"}, "every 30m", "Write it.", "not a jid"),
        ({"chat_jid": ""}, "every 30m", "Write it.", "empty"),
        ({}, "every fortnight", "Write it.", "every fortnight"),
        ({}, "61 * * * *", "Write it.", "61"),
        ({}, "every 30m", "   ", "prompt"),
        ({"tz": "Mars/Olympus"}, "0 9 * * *", "Write it.", "Mars/Olympus"),
        # A one-shot time already past (the clock reads 2026-01-05 12:00 UTC), or now.
        ({}, "2026-01-05T11:00:00Z", "Write it.", "is in the past"),
        ({}, "2026-01-05T12:00Z", "Write it.", "2026-01-05T12:00Z is in the past"),
        ({"tz": "Europe/Berlin"}, "2026-01-05T12:30", "Write it.", "in the past"),  # 11:30 UTC
        # An interval the tick (10 s by default) cannot keep names the tick.
        ({}, "every 1s", "Write it.", "scheduler's tick (10s)"),
        ({}, "every 9s", "Write it.", "use every 10s or longer"),
    ]
    for extra, schedule, prompt, named in cases:
        with pytest.raises(InvalidInput) as caught:
            await add_task(services, schedule, prompt=prompt, **extra)
        message = str(caught.value)
        assert named in message, message
        assert message.rstrip().endswith((".", ")")), message
        assert "\n" not in message, message
    assert await services.tasks.list() == []


async def test_add_computes_the_first_run(services: Services, clock: FakeClock) -> None:
    every = await add_task(services, "every 30m")
    assert every.next_run == T0 + timedelta(minutes=30)
    assert (every.enabled, every.last_run, every.last_status) == (True, None, None)

    cron = await add_task(services, "0 9 * * *")
    assert cron.next_run == datetime(2026, 1, 6, 9, 0, tzinfo=UTC)
    weekdays = await add_task(services, "30 12 * * 1-5")
    assert weekdays.next_run == datetime(2026, 1, 5, 12, 30, tzinfo=UTC)
    berlin = await add_task(services, "0 9 * * *", tz="Europe/Berlin")  # UTC+1 in January
    assert berlin.next_run == datetime(2026, 1, 6, 8, 0, tzinfo=UTC)

    once = await add_task(services, "2026-02-01T10:00:00Z")
    assert once.next_run == datetime(2026, 2, 1, 10, 0, tzinfo=UTC)
    soon = await add_task(services, "2026-01-05T12:00:01Z")
    assert soon.next_run == datetime(2026, 1, 5, 12, 0, 1, tzinfo=UTC)
    # The shortest interval is the tick itself.
    tick = await add_task(services, "every 10s")
    assert tick.next_run == T0 + timedelta(seconds=10)

    listed = await services.tasks.list()
    assert [t.id for t in listed] == [
        every.id,
        cron.id,
        weekdays.id,
        berlin.id,
        once.id,
        soon.id,
        tick.id,
    ]
    assert listed[3].tz == "Europe/Berlin"


async def test_the_shortest_interval_follows_the_configured_tick(
    services: Services, clock: FakeClock
) -> None:
    coarse = TaskService(
        store=services.store,
        catalog=services.catalog,
        signals=services.signals,
        clock=clock,
        tick_s=60,
    )
    with pytest.raises(InvalidInput, match=r"every 30s is more often than .* tick \(1m\)"):
        await coarse.add(
            folder="reporter", chat_jid=CHAT, schedule="every 30s", prompt="x", actor="test"
        )
    task = await coarse.add(
        folder="reporter", chat_jid=CHAT, schedule="every 1m", prompt="x", actor="test"
    )
    assert task.next_run == T0 + timedelta(minutes=1)


async def test_pause_resume_and_remove(
    services: Services, clock: FakeClock, scheduler: Scheduler
) -> None:
    task = await add_task(services, "every 30m")
    paused = await services.tasks.pause(task.id)
    assert not paused.enabled
    clock.advance(hours=2)  # four runs would have been due
    assert await scheduler.tick() == []
    resumed = await services.tasks.resume(task.id)
    assert resumed.enabled
    # Missed runs are not replayed: the next run is in the future again.
    assert resumed.next_run is not None and resumed.next_run > clock()
    assert await scheduler.tick() == []
    clock.now = resumed.next_run
    assert len(await scheduler.tick()) == 1

    removed = await services.tasks.remove(task.id)
    assert removed.id == task.id
    assert await services.tasks.list() == []
    for action in (services.tasks.pause, services.tasks.resume, services.tasks.remove):
        with pytest.raises(NotFound):
            await action(task.id)


# --------------------------------------------------------------------------- the tick


async def test_a_due_task_becomes_one_scheduled_turn_in_its_own_conversation(
    services: Services, clock: FakeClock, scheduler: Scheduler
) -> None:
    task = await add_task(services, "every 30m", prompt="Summarize the day.")
    assert await scheduler.tick() == []  # not due yet
    clock.advance(minutes=30)
    due_at = clock()
    (job_id,) = await scheduler.tick()

    turn = await job(services, job_id)
    assert turn.kind is JobKind.SCHEDULED
    assert turn.priority == 10
    assert turn.status is JobStatus.QUEUED
    assert (turn.folder, turn.chat_jid, turn.topic, turn.task_id) == ("reporter", CHAT, "", task.id)
    assert turn.messages == ()  # it answers no inbound message
    async with services.store.read() as tx:
        conversation = await tx.get_conversation(turn.conversation_id)
        rows = [r.message for r in await tx.conversation_messages(turn.conversation_id, limit=100)]
    assert conversation is not None
    assert (conversation.folder, conversation.chat_jid) == ("reporter", task_chat(task.id))
    assert task_chat(task.id) == f"task:{task.id}"
    (prompt,) = rows
    assert prompt.message_type is MessageType.SYSTEM
    assert (prompt.content, prompt.chat_jid) == ("Summarize the day.", f"task:{task.id}")

    after = await services.tasks.get(task.id)
    assert after.last_run == due_at
    assert after.next_run == due_at + timedelta(minutes=30)
    # Nothing was written to the task's chat.
    assert await services.history.messages(chat_jid=CHAT) == []


@SQLITE_ONLY
async def test_the_running_scheduler_goes_on_after_a_tick_fails(
    services: Services, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock past the busy timeout fails a tick; the loop logs
    it and the next tick queues the task's turn."""
    monkeypatch.setattr(sqlite_base, "BUSY_TIMEOUT_MS", 100)
    await add_task(services, "every 30m")
    clock.advance(minutes=30)
    scheduler = Scheduler(
        store=services.store,
        catalog=services.catalog,
        signals=services.signals,
        clock=clock,
        queue=services.queue,
        tick_s=0.05,
    )
    other = sqlite3.connect(services.store.path, isolation_level=None)  # type: ignore[attr-defined]
    other.execute("BEGIN IMMEDIATE")
    running = asyncio.create_task(scheduler.run())
    try:
        with capture_logs() as logs:
            await eventually(
                lambda: any(e["event"] == "tasks.tick_failed" for e in logs), "a failed tick"
            )
        other.execute("ROLLBACK")

        async def queued() -> bool:
            return bool(await services.turns.list_jobs(limit=1))

        await eventually(queued, "the task's turn")
    finally:
        other.close()
        scheduler.stop()
        await running
    (turn,) = await services.turns.list_jobs(limit=10)
    assert turn.kind is JobKind.SCHEDULED


async def test_flood_guard_while_the_turn_is_queued_or_running(
    services: Services, clock: FakeClock, scheduler: Scheduler
) -> None:
    task = await add_task(services, "every 30m")
    clock.advance(minutes=30)
    (first,) = await scheduler.tick()
    next_run = (await services.tasks.get(task.id)).next_run
    assert next_run == clock() + timedelta(minutes=30)

    # Queued: due again, but nothing new is enqueued and next_run stays.
    clock.advance(minutes=45)
    assert await scheduler.tick() == []
    assert await scheduler.tick() == []
    assert (await services.tasks.get(task.id)).next_run == next_run

    # Running: the same.
    claimed = await claim(services, clock)
    assert claimed.id == first
    clock.advance(minutes=30)
    assert await scheduler.tick() == []
    assert (await services.tasks.get(task.id)).next_run == next_run
    assert [j.id for j in await services.turns.list_jobs()] == [first]

    # Once it ended, the task runs at the next tick, once, and next_run moves on from now.
    await finish(services, clock, claimed)
    (second,) = await scheduler.tick()
    assert second != first
    assert (await services.tasks.get(task.id)).next_run == clock() + timedelta(minutes=30)
    assert await scheduler.tick() == []


async def test_a_one_shot_runs_once_then_disables(
    services: Services, clock: FakeClock, scheduler: Scheduler
) -> None:
    task = await add_task(services, "2026-01-05T12:05:00Z")
    assert await scheduler.tick() == []
    clock.advance(minutes=5)
    (job_id,) = await scheduler.tick()
    after = await services.tasks.get(task.id)
    assert (after.enabled, after.next_run, after.last_run) == (False, None, clock())
    await finish(services, clock, await claim(services, clock))
    for _ in range(3):
        clock.advance(days=1)
        assert await scheduler.tick() == []
    assert [j.id for j in await services.turns.list_jobs()] == [job_id]


async def test_a_task_whose_folder_vanished_is_skipped_with_a_reason(
    services: Services, clock: FakeClock, scheduler: Scheduler
) -> None:
    await services.folders.add_folder("temp", FolderSpec(), actor="test")
    task = await add_task(services, "every 10m", folder="temp")
    await services.folders.remove_folder("temp", actor="test")
    clock.advance(minutes=10)
    assert await scheduler.tick() == []
    skipped = await services.tasks.get(task.id)
    assert skipped.last_status is not None
    assert "skipped" in skipped.last_status and "temp" in skipped.last_status
    assert "does not exist" in skipped.last_status
    assert await services.turns.list_jobs() == []


# --------------------------------------------------------------------------- a scheduled run


class RecordingSink:
    def __init__(self) -> None:
        self.sent: list[OutgoingChunk] = []

    async def send(self, chunk: OutgoingChunk) -> SendResult:
        self.sent.append(chunk)
        return SendResult(f"p{len(self.sent)}")


@pytest.fixture
async def workers(gateway: Gateway) -> AsyncIterator[WorkerPool]:
    """The gateway's turn workers (echo), claiming turns."""
    await gateway.workers.start()
    yield gateway.workers
    await gateway.workers.stop()


async def finished(services: Services, job_id: int) -> JobRecord:
    async with asyncio.timeout(20):
        while True:
            record = await services.turns.get_job(job_id)
            if record.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
                return record
            await asyncio.sleep(0.01)


async def test_a_scheduled_turn_runs_fresh_and_answers_the_tasks_chat_without_engaging(
    services: Services, clock: FakeClock, scheduler: Scheduler, workers: WorkerPool
) -> None:
    sink = RecordingSink()
    loop = DeliveryLoop(
        store=services.store,
        sinks=SinkRouter(fallback=EventStreamSink(), by_platform={"telegram": sink}),
        catalog=services.catalog,
        defaults=services.defaults,
        signals=services.signals,
        clock=clock,
        settings=DeliverySettings(backoff_base_s=2, ttl_s=3600),
    )
    # The task's chat has history with the same folder (observed, so nothing engages it).
    await services.routes.add_route(0, f"chat_jid={CHAT}", "reporter#observe", actor="test")
    for text in ("the secret launch date is friday", "do not tell anyone"):
        result = await services.ingest.ingest(inbound(CHAT, text))
        assert result.decision.action is Action.OBSERVE
    task = await add_task(services, "every 1h", prompt="Post the morning report.")

    clock.advance(hours=1)
    (job_id,) = await scheduler.tick()
    done = await finished(services, job_id)
    assert done.status is JobStatus.DONE and done.answer_id is not None

    # The request: the folder's persona in the system prompt, the prompt as the only message.
    (answer,) = [
        m
        for m in await services.history.messages(chat_jid=CHAT)
        if m.message_type is MessageType.ASSISTANT
    ]
    assert answer.id == done.answer_id and answer.run_id is not None
    # MESSAGES §4: shown in the task's chat, outside every conversation.
    assert answer.metadata["task_id"] == task.id
    assert (answer.conversation_id, answer.routed_to) == (None, "reporter")
    run = await services.history.run(answer.run_id)
    assert run.system.startswith(PERSONA)
    assert CHAT in run.system
    assert run.messages == [{"role": "system", "content": "Post the morning report."}]
    assert "secret launch date" not in json.dumps(run.messages)
    assert answer.content == "[system] Post the morning report."

    await drain(loop)
    (sent,) = sink.sent
    assert (sent.chat_jid, sent.kind, sent.message_id) == (CHAT, "scheduled", done.answer_id)
    assert (sent.message_type, sent.folder, sent.content) == (
        "assistant",
        "reporter",
        answer.content,
    )
    (row,) = await services.history.deliveries(message_id=done.answer_id)
    assert (row.status, row.engage) == ("sent", False)
    # Never engages the chat: the next plain message there is still only observed.
    async with services.store.read() as tx:
        assert (await tx.chat_state(CHAT)).engagements == {}
    again = await services.ingest.ingest(inbound(CHAT, "nice report"))
    assert again.decision.action is Action.OBSERVE

    after = await services.tasks.get(task.id)
    assert after.last_status == "ok"
    # The answer is in the chat's history, between what came before and after it.
    history = await services.history.messages(chat_jid=CHAT)
    assert [(m.message_type, m.content) for m in history] == [
        (MessageType.USER, "the secret launch date is friday"),
        (MessageType.USER, "do not tell anyone"),
        (MessageType.ASSISTANT, "[system] Post the morning report."),
        (MessageType.USER, "nice report"),
    ]
    # The task's own conversation keeps the prompt and the run's traces, not the answer.
    task_rows = await services.history.messages(chat_jid=task_chat(task.id))
    assert {m.message_type for m in task_rows} == {MessageType.SYSTEM, MessageType.TRACE}

    # The next run is a new generation: the earlier prompt and answer are not in its context.
    clock.advance(hours=1)
    (next_job,) = await scheduler.tick()
    second = await finished(services, next_job)
    assert second.status is JobStatus.DONE
    assert second.conversation_id != done.conversation_id
    answers = [
        m
        for m in await services.history.messages(chat_jid=CHAT)
        if m.message_type is MessageType.ASSISTANT
    ]
    assert [a.id for a in answers] == [done.answer_id, second.answer_id]
    assert answers[1].run_id is not None
    second_run = await services.history.run(answers[1].run_id)
    assert second_run.messages == [{"role": "system", "content": "Post the morning report."}]
    await drain(loop)
    assert [(c.kind, c.message_id) for c in sink.sent] == [
        ("scheduled", done.answer_id),
        ("scheduled", second.answer_id),
    ]
    async with services.store.read() as tx:
        assert (await tx.chat_state(CHAT)).engagements == {}


async def test_a_scheduled_answer_never_enters_a_later_context_of_its_chat(
    services: Services, clock: FakeClock, scheduler: Scheduler, workers: WorkerPool
) -> None:
    await services.routes.add_route(0, f"chat_jid={CHAT}", "reporter", actor="test")
    asked = await services.ingest.ingest(inbound(CHAT, "good morning"))
    assert asked.decision.job_id is not None
    assert (await finished(services, asked.decision.job_id)).status is JobStatus.DONE
    await add_task(services, "every 1h", prompt="Post the morning report.")
    clock.advance(hours=1)
    (job_id,) = await scheduler.tick()
    assert (await finished(services, job_id)).status is JobStatus.DONE

    later = await services.ingest.ingest(inbound(CHAT, "thanks"))
    assert later.decision.job_id is not None
    done = await finished(services, later.decision.job_id)
    (answer,) = [
        m for m in await services.history.messages(chat_jid=CHAT) if m.id == done.answer_id
    ]
    assert answer.run_id is not None
    run = await services.history.run(answer.run_id)
    # The conversation of the chat with the folder: its own exchange only.
    assert run.messages == [
        {"role": "user", "content": "good morning"},
        {"role": "assistant", "content": "good morning"},
        {"role": "user", "content": "thanks"},
    ]


async def drain(loop: DeliveryLoop) -> None:
    rounds = 0
    while await loop.deliver_due():
        rounds += 1
        assert rounds < 100


# --------------------------------------------------------------------------- the CLI

runner = CliRunner()
VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")


def cli(data: Path, *args: str, env: Mapping[str, str] | None = None) -> Result:
    clean: dict[str, str | None] = {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES
    }
    clean.update(env or {})
    return runner.invoke(app, ["--data", str(data), *args], env=clean)


def describe(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}"


def ok_json(data: Path, *args: str) -> Any:
    result = cli(data, *args, "--json")
    assert result.exception is None and result.exit_code == 0, describe(result)
    assert result.stderr == "", describe(result)
    return json.loads(result.stdout)


def bad(data: Path, *args: str) -> str:
    """A user mistake: exit 1, nothing on stdout, one sentence on stderr, no traceback."""
    result = cli(data, *args)
    assert result.exit_code == 1, describe(result)
    assert result.exception is None or isinstance(result.exception, SystemExit), describe(result)
    assert result.stdout == "", describe(result)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, describe(result)
    assert lines[0].rstrip().endswith((".", ")")), describe(result)
    return lines[0]


TASK_KEYS = {
    "id",
    "folder",
    "chat_jid",
    "schedule",
    "tz",
    "prompt",
    "enabled",
    "next_run",
    "last_run",
    "last_status",
}


def test_tasks_commands_through_the_cli(tmp_path: Path) -> None:
    data = tmp_path / "data"
    init = cli(data, "init")
    assert init.exit_code == 0, describe(init)

    before = datetime.now(UTC)
    added = ok_json(
        data,
        "tasks",
        "add",
        "--folder",
        "main",
        "--chat-jid",
        "web:main/anon-1",
        "--schedule",
        "every 30m",
        "--prompt",
        "Say good morning.",
    )
    after = datetime.now(UTC)
    assert set(added) == TASK_KEYS
    assert (added["folder"], added["chat_jid"], added["prompt"]) == (
        "main",
        "web:main/anon-1",
        "Say good morning.",
    )
    assert (added["enabled"], added["last_run"], added["last_status"]) == (True, None, None)
    next_run = datetime.fromisoformat(added["next_run"])
    assert before + timedelta(minutes=30) <= next_run <= after + timedelta(minutes=30)

    cron = ok_json(
        data,
        "tasks",
        "add",
        "--folder",
        "main",
        "--chat-jid",
        "telegram:user/42",
        "--schedule",
        "0 9 * * 1-5",
        "--prompt",
        "Standup reminder.",
        "--tz",
        "Europe/Berlin",
    )
    assert cron["tz"] == "Europe/Berlin"
    first = datetime.fromisoformat(cron["next_run"])
    assert first.astimezone(UTC) > before
    assert first.astimezone(ZoneInfo("Europe/Berlin")).hour == 9

    listed = ok_json(data, "tasks", "list")
    assert isinstance(listed, list)
    assert [t["id"] for t in listed] == [added["id"], cron["id"]]
    assert all(set(t) == TASK_KEYS for t in listed)

    paused = ok_json(data, "tasks", "pause", str(added["id"]))
    assert (paused["id"], paused["enabled"]) == (added["id"], False)
    assert [t["enabled"] for t in ok_json(data, "tasks", "list")] == [False, True]
    resumed = ok_json(data, "tasks", "resume", str(added["id"]))
    assert resumed["enabled"] is True

    removed = ok_json(data, "tasks", "rm", str(cron["id"]))
    assert removed["id"] == cron["id"]
    assert [t["id"] for t in ok_json(data, "tasks", "list")] == [added["id"]]

    # Mistakes: one sentence on stderr, exit 1, nothing changed.
    sentence = bad(
        data,
        "tasks",
        "add",
        "--folder",
        "main",
        "--chat-jid",
        "web:main/anon-1",
        "--schedule",
        "every fortnight",
        "--prompt",
        "x",
    )
    assert "every fortnight" in sentence
    sentence = bad(
        data,
        "tasks",
        "add",
        "--folder",
        "nosuch",
        "--chat-jid",
        "web:main/anon-1",
        "--schedule",
        "every 5m",
        "--prompt",
        "x",
    )
    assert "nosuch" in sentence
    past = ("--schedule", "2020-01-01T09:00", "--prompt", "x")
    where = ("tasks", "add", "--folder", "main", "--chat-jid", "web:main/anon-1")
    assert "2020-01-01T09:00 is in the past" in bad(data, *where, *past)
    fast = ("--schedule", "every 5s", "--prompt", "x")
    assert "scheduler's tick (10s)" in bad(data, *where, *fast)
    # The tick the server is configured with is the one that counts.
    result = cli(
        data,
        *where,
        "--schedule",
        "every 30s",
        "--prompt",
        "x",
        env={"POSTROOM_SCHEDULER__TICK": "1m"},
    )
    assert result.exit_code == 1 and "tick (1m)" in result.stderr, describe(result)
    assert "999" in bad(data, "tasks", "pause", "999")
    assert [t["id"] for t in ok_json(data, "tasks", "list")] == [added["id"]]
