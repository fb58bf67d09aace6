"""Agents end to end (PIPELINE §4–§6, MESSAGES §2–§4): messages go in through ingest, real workers
build each run's context, the real Anthropic adapter talks to a fake Messages API, and the answers,
traces, memory, state, conductor actions, delegations and compactions land in a real SQLite file;
a recording channel stands in for the platform behind the real delivery loop.

The server is the one ``postroom serve`` runs: ``Gateway.build`` from a :class:`Config` (so keys
become account labels exactly as in production) with the recording channel in its ``channels``
seam and a fake clock in its ``clock`` seam, then ``Gateway.run`` on a free port. Nothing is
wired by hand, so a component the gateway forgets to wire (tools, memory, the compactor, the
personas) fails a test here. One worker runs the turns so that the replies queued on the fake
are consumed in a known order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from postroom.app.gateway import Gateway
from postroom.app.providers import account_label
from postroom.config import Config
from postroom.core import Action, MessageType, StoredMessage
from postroom.core.context import SUMMARY_BRIDGE
from postroom.engine import FolderSpec, Services
from postroom.engine.ingest import IngestResult
from postroom.engine.views import message_to_dict
from postroom.llm.accounts import AccountPool
from postroom.llm.models import ModelInfo
from postroom.store.records import JobKind, JobRecord, JobStatus, RunRecord

from fake_llm import FakeLLM, Received, Reply, serve
from fakeclock import FakeClock
from gateway_support import RecordingChannel, new_data_dir, serving
from support import eventually, inbound, queue_idle, runs

# One fake Messages API per module (starting uvicorn costs ~0.2 s); each test starts from a clean
# slate of recorded requests and queued replies.
pytestmark = pytest.mark.asyncio(loop_scope="module")

MESSAGES = "/v1/messages"
KEY1 = "sk-ant-test-FIRST-key-0000-1111aaaa"
KEY2 = "sk-ant-test-SECOND-key-0000-2222bbbb"
LABEL1 = account_label("anthropic", 0, KEY1)
LABEL2 = account_label("anthropic", 1, KEY2)
CHAT = "telegram:group/5"
ANA = "telegram:user/ana"
BOB = "telegram:user/bob"
SONNET = "claude-sonnet-4-6"
BASIC_TOOLS = ["send_message", "memory_save", "memory_search", "state_set", "delegate"]
ROUTE_TOOLS = ["list_routes", "add_route", "delete_route", "set_routes", "create_folder"]


# --------------------------------------------------------------------------- the fake's replies


def message_body(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    model: str = SONNET,
    usage: tuple[int, int] = (25, 7),
) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def text_reply(text: str, **kwargs: Any) -> Reply:
    return Reply(body=message_body([{"type": "text", "text": text}], **kwargs))


_tool_ids = itertools.count(1)


def tool_reply(*calls: tuple[str, dict[str, Any]], **kwargs: Any) -> Reply:
    """The model asks for one tool per *calls* entry ``(name, input)``."""
    content = [
        {"type": "tool_use", "id": f"toolu_{next(_tool_ids):04d}", "name": name, "input": args}
        for name, args in calls
    ]
    return Reply(body=message_body(content, stop_reason="tool_use", **kwargs))


def error_reply(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_1"}
    return Reply(status=status, body=body, headers=headers or {})


def texts(body: Mapping[str, Any]) -> list[str]:
    """Every piece of text a request carries in its messages (text blocks and tool results)."""
    out: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content:
            if block["type"] == "text":
                out.append(block["text"])
            elif block["type"] == "tool_result":
                out.append(str(block.get("content", "")))
    return out


def key_of(received: Received) -> str:
    """The API key a request was made with (the SDK sends it as a header)."""
    headers = received.headers
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def tool_results(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def tool_names(body: Mapping[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


# --------------------------------------------------------------------------- the rig


@dataclass
class Rig:
    """``postroom serve`` over one data directory (``Gateway.build`` and ``Gateway.run``), with
    a recording channel for the ``telegram:`` chats."""

    data_dir: Path
    clock: FakeClock
    gateway: Gateway
    sink: RecordingChannel
    stack: contextlib.AsyncExitStack

    @classmethod
    async def start(
        cls,
        data_dir: Path,
        clock: FakeClock,
        url: str,
        *,
        keys: Sequence[str] = (KEY1,),
        models: Mapping[str, ModelInfo] | None = None,
    ) -> Rig:
        config = Config.model_validate(
            {
                "providers": {"anthropic": {"api_keys": list(keys), "base_url": url}},
                # One worker: the fake answers requests in the order they arrive.
                "queue": {"max_concurrent_turns": 1, "shutdown_grace": "200ms"},
                "models": {
                    name: {
                        "context_window": info.context_window,
                        "input_per_mtok": info.input_per_mtok,
                        "output_per_mtok": info.output_per_mtok,
                    }
                    for name, info in (models or {}).items()
                },
            }
        )
        sink = RecordingChannel()
        gateway = await Gateway.build(
            await new_data_dir(data_dir), config, clock=clock, channels=[sink]
        )
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(serving(gateway))
        return cls(data_dir, clock, gateway, sink, stack)

    async def close(self) -> None:
        await self.stack.aclose()

    @property
    def services(self) -> Services:
        return self.gateway.services

    def advance(self, **delta: float) -> None:
        """Move the clock and tell the workers time moved (as the backstop timer would)."""
        self.clock.advance(**delta)
        self.services.signals.turns.wake()

    @property
    def pool(self) -> AccountPool:
        pool = self.gateway.providers["anthropic"]
        assert isinstance(pool, AccountPool)
        return pool

    # -- set-up -----------------------------------------------------------------------------
    async def folder(self, path: str, *, persona: str = "", role: str | None = None) -> None:
        await self.services.folders.add_folder(
            path, FolderSpec(persona=persona, provider="anthropic", role=role), actor="test"
        )

    async def route(self, seq: int, match: str, target: str) -> int:
        return await self.services.routes.add_route(seq, match, target, actor="test")

    # -- messages in ------------------------------------------------------------------------
    async def ingest(self, chat: str, text: str, *, sender: str = ANA) -> IngestResult:
        return await self.services.ingest.ingest(inbound(chat, text, sender=sender))

    async def fire(self, chat: str, text: str, *, sender: str = ANA) -> int:
        result = await self.ingest(chat, text, sender=sender)
        assert result.decision.action is Action.FIRE, result.decision
        assert result.decision.job_id is not None
        return result.decision.job_id

    # -- reading back -----------------------------------------------------------------------
    async def job_when(
        self, job_id: int, check: Callable[[JobRecord], bool], what: str
    ) -> JobRecord:
        async def holds() -> bool:
            return check(await self.services.turns.get_job(job_id))

        await eventually(holds, f"job {job_id}: {what}")
        return await self.services.turns.get_job(job_id)

    async def done(self, job_id: int) -> JobRecord:
        job = await self.job_when(
            job_id, lambda j: j.status in (JobStatus.DONE, JobStatus.FAILED), "to finish"
        )
        assert job.status is JobStatus.DONE, job
        return job

    async def answer(self, chat: str, text: str) -> int:
        """Fire *text* and wait until its turn is done; return the job id."""
        job_id = await self.fire(chat, text)
        await self.done(job_id)
        return job_id

    async def rows(self, chat: str) -> list[StoredMessage]:
        async with self.services.store.read() as tx:
            return await tx.list_messages(chat_jid=chat, limit=10_000)

    async def of_type(self, chat: str, kind: MessageType) -> list[StoredMessage]:
        return [m for m in await self.rows(chat) if m.message_type is kind]

    async def runs(self) -> list[RunRecord]:
        return await runs(self.services)

    async def jobs(self) -> list[JobRecord]:
        return sorted(await self.services.turns.list_jobs(limit=1000), key=lambda j: j.id)

    async def delivered(self, chat: str, *expected: tuple[str, str]) -> None:
        """Wait until the sink has received exactly *expected* in *chat*, in that order."""
        await eventually(
            lambda: len(self.sink.to(chat)) >= len(expected), f"{len(expected)} sends to {chat}"
        )
        await eventually(lambda: queue_idle(self.services), "every turn and delivery to be done")
        assert self.sink.to(chat) == list(expected)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[tuple[FakeLLM, str]]:
    llm = FakeLLM()
    async with serve(llm) as base:
        yield llm, base


@pytest.fixture
def fake(server: tuple[FakeLLM, str]) -> FakeLLM:
    server[0].reset()
    return server[0]


@pytest_asyncio.fixture(loop_scope="module")
async def make(
    tmp_path: Path, clock: FakeClock, server: tuple[FakeLLM, str], fake: FakeLLM
) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    rigs: list[Rig] = []

    async def build(**options: Any) -> Rig:
        rig = await Rig.start(tmp_path / f"data-{len(rigs)}", clock, server[1], **options)
        rigs.append(rig)
        return rig

    try:
        yield build
    finally:
        for rig in rigs:
            await rig.close()


@pytest_asyncio.fixture(loop_scope="module")
async def rig(make: Callable[..., Awaitable[Rig]]) -> Rig:
    return await make()


async def main_folder(rig: Rig, *, persona: str = "You are Main.") -> None:
    await rig.folder("main", persona=persona)
    await rig.route(9999, "", "main")


async def conductor(rig: Rig) -> None:
    """``team`` (a conductor) answers the chat; ``main`` (an agent) exists outside its tree."""
    await rig.folder("main", persona="You are Main.")
    await rig.folder("team", persona="You run the team.", role="conductor")
    await rig.route(10, f"chat_jid={CHAT}", "team")


# --------------------------------------------------------------------------- context (MESSAGES §4)


async def test_the_model_sees_observed_rows_persona_and_notices_never_host_or_trace_rows(
    rig: Rig, fake: FakeLLM
) -> None:
    await rig.folder("main", persona="You are Main, version one.")
    await rig.route(10, f"sender={ANA}", "main")
    await rig.route(20, "", "main#observe")

    # A first turn with a tool call: its calls and results are stored as trace rows.
    fake.answer(
        MESSAGES,
        tool_reply(("memory_search", {"query": "probe-query-zebra"})),
        text_reply("I have nothing on file yet."),
    )
    await rig.answer(CHAT, "what do you know about me?")
    first = fake.bodies(MESSAGES)
    assert "You are Main, version one." in first[0]["system"]
    assert texts(first[0]) == ["what do you know about me?"]
    # Delivered first: a delivery renews the engagement that the reset below ends.
    await rig.delivered(CHAT, ("assistant", "I have nothing on file yet."))

    # A steering command: consumed, acknowledged with a host message.
    steering = await rig.ingest(CHAT, "@")
    assert steering.decision.action is Action.COMMAND
    assert steering.decision.ack == "routing reset to default"
    # Bob's message is only observed.
    observed = await rig.ingest(CHAT, "lunch at noon, anyone?", sender=BOB)
    assert observed.decision.action is Action.OBSERVE

    # AGENT.md is edited by hand between the turns: the next turn uses the new persona.
    agent_file = rig.data_dir / "folders" / "main" / "AGENT.md"
    agent_file.write_text(agent_file.read_text("utf-8").replace("version one", "version two"))
    stat = agent_file.stat()
    os.utime(agent_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))

    fake.answer(MESSAGES, text_reply("Bob suggests lunch at noon."))
    await rig.answer(CHAT, "anything new?")
    body = fake.bodies(MESSAGES)[-1]

    system = body["system"]
    assert system.startswith("You are Main, version two.")
    assert "version one" not in system
    notices = system.splitlines()[-3:]
    assert notices == [
        "Current time: 2026-01-05 12:00 UTC (Monday).",
        f"Chat: {CHAT} (group).",
        "You are the agent in folder main.",
    ]
    sent = texts(body)
    assert "[bob] lunch at noon, anyone?" in sent
    assert sent[-1] == "[ana] anything new?"
    assert "I have nothing on file yet." in sent  # the previous answer is history

    rows = await rig.rows(CHAT)
    hidden = [m for m in rows if m.message_type in (MessageType.HOST, MessageType.TRACE)]
    assert {m.sender for m in hidden} == {"host", "tool_use", "tool_result", "result_meta"}
    assert any(m.content == "routing reset to default" for m in hidden)
    everything = json.dumps(body, ensure_ascii=False)
    for row in hidden:
        assert row.content not in everything, row
    assert "probe-query-zebra" not in everything
    # The command itself is stored (as a user row) but never enters a context.
    (command,) = [
        m for m in rows if m.message_type is MessageType.USER and m.metadata.get("command")
    ]
    assert command.content == "@" and "@" not in sent
    (run,) = [r for r in await rig.runs() if r.system == system]
    assert [m["content"] for m in run.messages] == [
        "[ana] what do you know about me?",
        "I have nothing on file yet.",
        "[bob] lunch at noon, anyone?",
        "[ana] anything new?",
    ]


# --------------------------------------------------------------------------- accounts (PIPELINE §4)


def _stored_text(data_dir: Path) -> bytes:
    """Every byte of the database (and its WAL), to look for secrets in."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob("postroom.db*")))


async def test_a_rate_limited_key_rests_while_the_next_answers_and_keys_never_leak(
    make: Callable[..., Awaitable[Rig]],
    fake: FakeLLM,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("anthropic", "httpx", "httpx2", "httpcore", "postroom"):
        caplog.set_level(logging.DEBUG, logger=name)
    with capture_logs() as logs:
        rig = await make(keys=(KEY1, KEY2))
        await main_folder(rig)

        # Key 1 is rate-limited: the same run moves on to key 2 at once.
        fake.answer(
            MESSAGES,
            error_reply(429, "rate_limit_error", "slow down", {"retry-after": "30"}),
            text_reply("Answered by the second key."),
        )
        first = await rig.answer(CHAT, "hello")
        assert [key_of(r) for r in fake.received] == [KEY1, KEY2]
        (run,) = [r for r in await rig.runs() if r.job_id == first]
        assert (run.outcome, run.account) == ("ok", LABEL2)
        assert (await rig.services.turns.get_job(first)).attempts == 0
        resting, fresh = rig.pool.status()
        assert (resting.label, resting.limited_until, resting.strikes) == (
            LABEL1,
            clock.now + timedelta(seconds=30),
            1,
        )
        assert (fresh.label, fresh.limited_until) == (LABEL2, None)
        await rig.delivered(CHAT, ("assistant", "Answered by the second key."))

        # While key 1 rests, the next turn goes straight to key 2.
        fake.received.clear()
        fake.answer(MESSAGES, text_reply("Key two again."))
        second = await rig.answer(CHAT, "and again")
        assert [key_of(r) for r in fake.received] == [KEY2]
        assert [r.account for r in await rig.runs() if r.job_id == second] == [LABEL2]

        # Both keys limited: not a failure. The turn waits, without using an attempt, until
        # the first key is free again (key 1 in 30 s; key 2 would be 45 s).
        rig.advance(seconds=31)  # key 1 is free again, and is tried first
        fake.received.clear()
        fake.answer(
            MESSAGES,
            error_reply(429, "rate_limit_error", "slow down", {"retry-after": "30"}),
            error_reply(429, "rate_limit_error", "slow down", {"retry-after": "45"}),
        )
        third = await rig.fire(CHAT, "one more")
        job = await rig.job_when(third, lambda j: j.last_error is not None, "the rate limit")
        assert [key_of(r) for r in fake.received] == [KEY1, KEY2]
        assert job.status is JobStatus.QUEUED and job.lease_until is None
        assert job.attempts == 0
        assert job.run_at == clock.now + timedelta(seconds=30)
        assert "rate-limited" in job.last_error
        (limited,) = [r for r in await rig.runs() if r.job_id == third]
        assert limited.outcome == "rate_limited" and limited.error == job.last_error

        # No key anywhere: messages, runs, jobs, the database file, the logs.
        stored = [m.content for m in await rig.rows(CHAT)] + [
            json.dumps(m.metadata) for m in await rig.rows(CHAT)
        ]
        records = [repr(r) for r in await rig.runs()] + [repr(j) for j in await rig.jobs()]
        for key in (KEY1, KEY2):
            assert not any(key in text for text in stored + records)
            assert key.encode() not in _stored_text(rig.data_dir)
    assert any(entry["event"] == "provider.account_limited" for entry in logs)
    assert any(entry["event"] == "turn.rate_limited" for entry in logs)
    captured = capsys.readouterr()
    for key in (KEY1, KEY2):
        assert key not in repr(logs)
        assert key not in caplog.text
        assert key not in captured.out + captured.err


async def test_a_server_error_retries_the_turn_after_its_backoff(
    rig: Rig, fake: FakeLLM, clock: FakeClock
) -> None:
    await main_folder(rig)
    fake.answer(MESSAGES, error_reply(500, "api_error", "Internal server error"))
    job_id = await rig.fire(CHAT, "hello")
    job = await rig.job_when(job_id, lambda j: j.attempts == 1, "the first failure")
    assert job.status is JobStatus.QUEUED
    assert job.run_at == clock.now + timedelta(seconds=120)  # backoff_base × 2^1
    assert job.last_error is not None and "HTTP 500" in job.last_error
    # Not due yet: a turn queued after it in another chat is claimed and answered, it is not.
    fake.answer(MESSAGES, text_reply("Meanwhile, elsewhere."))
    await rig.answer("telegram:group/9", "meanwhile")
    assert len(fake.received) == 2
    assert (await rig.services.turns.get_job(job_id)).status is JobStatus.QUEUED
    # The chat is told how long it will wait, once.
    (notice,) = await rig.of_type(CHAT, MessageType.HOST)
    assert notice.content == "⚠️ trying again in 2 minutes"

    fake.answer(MESSAGES, text_reply("Sorry for the wait."))
    rig.advance(seconds=120)
    job = await rig.done(job_id)
    assert job.attempts == 1 and len(fake.received) == 3
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == "Sorry for the wait." and job.answer_id == answer.id
    assert [r.outcome for r in await rig.runs() if r.job_id == job_id] == ["error", "ok"]
    await rig.delivered(
        CHAT, ("host", "⚠️ trying again in 2 minutes"), ("assistant", "Sorry for the wait.")
    )


# --------------------------------------------------------------------------- the tool loop


async def test_memory_tools_store_a_fact_once_and_leave_traces(rig: Rig, fake: FakeLLM) -> None:
    await main_folder(rig)
    fake.answer(
        MESSAGES,
        tool_reply(("memory_save", {"fact": "The user likes green tea.", "category": "sticky"})),
        tool_reply(("memory_search", {"query": "tea"})),
        text_reply("Noted: green tea."),
    )
    job_id = await rig.answer(CHAT, "I like green tea")
    bodies = fake.bodies(MESSAGES)
    assert len(bodies) == 3
    assert [tool_names(b) for b in bodies] == [BASIC_TOOLS] * 3
    (saved,) = tool_results(bodies[1])
    assert saved["content"] == "Saved to memory (sticky)." and not saved["is_error"]
    assert bodies[1]["messages"][-2]["content"][0]["name"] == "memory_save"

    async with rig.services.store.read() as tx:
        facts = await tx.list_facts("main")
    assert [(f.category, f.fact) for f in facts] == [("sticky", "The user likes green tea.")]

    (run,) = await rig.runs()
    assert run.job_id == job_id and run.output == "Noted: green tea."
    assert [m["role"] for m in run.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert run.messages[1]["tool_calls"][0]["name"] == "memory_save"
    assert run.messages[3]["tool_calls"][0]["arguments"] == {"query": "tea"}
    assert [t["name"] for t in run.tools] == BASIC_TOOLS
    assert run.output_raw is not None and "memory_search" in run.output_raw
    traces = await rig.of_type(CHAT, MessageType.TRACE)
    assert [t.sender for t in traces] == [
        "tool_use",
        "tool_result",
        "tool_use",
        "tool_result",
        "result_meta",
    ]
    assert all(t.run_id == run.id and t.metadata["job_id"] == job_id for t in traces)
    assert traces[0].content.startswith("memory_save(") and "green tea" in traces[0].content
    assert traces[1].content == "Saved to memory (sticky)."
    assert "3 calls" in traces[4].content
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == "Noted: green tea." and answer.run_id == run.id
    await rig.delivered(CHAT, ("assistant", "Noted: green tea."))

    # The next turn: the fact is recalled (sticky), found by search, and not saved twice.
    fake.reset()
    fake.answer(
        MESSAGES,
        tool_reply(("memory_save", {"fact": "the user likes GREEN tea"})),
        tool_reply(("memory_search", {"query": "green tea"})),
        text_reply("I knew that already."),
    )
    await rig.answer(CHAT, "remember: green tea!")
    bodies = fake.bodies(MESSAGES)
    assert "- The user likes green tea." in bodies[0]["system"]
    (found,) = tool_results(bodies[2])[-1:]
    assert "The user likes green tea." in found["content"]
    async with rig.services.store.read() as tx:
        assert len(await tx.list_facts("main")) == 1


async def test_send_message_reaches_this_chat_and_refuses_an_unreachable_one(
    rig: Rig, fake: FakeLLM
) -> None:
    await main_folder(rig)
    elsewhere = "telegram:user/999"
    fake.answer(
        MESSAGES,
        tool_reply(
            ("send_message", {"text": "One moment, checking."}),
            ("send_message", {"text": "psst", "chat_jid": elsewhere}),
        ),
        text_reply("Here is the answer."),
    )
    await rig.answer(CHAT, "can you check?")
    ok, refused = tool_results(fake.bodies(MESSAGES)[1])
    assert not ok["is_error"] and CHAT in ok["content"]
    assert refused["is_error"] is True
    assert f"cannot reach {elsewhere}" in refused["content"]

    answers = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert sorted(a.content for a in answers) == ["Here is the answer.", "One moment, checking."]
    (extra,) = [a for a in answers if a.metadata.get("source") == "send_message"]
    assert extra.content == "One moment, checking."
    await eventually(lambda: len(rig.sink.to(CHAT)) == 2, "both messages to be delivered")
    assert sorted(rig.sink.to(CHAT)) == [
        ("assistant", "Here is the answer."),
        ("assistant", "One moment, checking."),
    ]
    assert await rig.rows(elsewhere) == []
    assert rig.sink.to(elsewhere) == []


async def test_a_run_makes_at_most_five_model_calls_the_last_without_tools(
    rig: Rig, fake: FakeLLM
) -> None:
    await main_folder(rig)
    fake.answer(
        MESSAGES,
        *(tool_reply(("memory_search", {"query": f"round {n}"})) for n in range(1, 5)),
        text_reply("Enough searching."),
    )
    await rig.answer(CHAT, "search forever")
    bodies = fake.bodies(MESSAGES)
    assert len(bodies) == 5
    assert [("tools" in b) for b in bodies] == [True, True, True, True, False]
    assert len(tool_results(bodies[4])) == 4
    (run,) = await rig.runs()
    assert run.output == "Enough searching."
    assert [t["name"] for t in run.tools] == BASIC_TOOLS  # what the run offered
    traces = await rig.of_type(CHAT, MessageType.TRACE)
    assert [t.sender for t in traces].count("tool_use") == 4
    assert traces[-1].sender == "result_meta" and "5 calls" in traces[-1].content


# --------------------------------------------------------------------------- response tags (§5)


async def test_memory_and_state_tags_are_applied_and_stripped_from_the_answer(
    rig: Rig, fake: FakeLLM
) -> None:
    await main_folder(rig)
    raw = "Sure thing.\n[MEMORY:sticky] likes tea\n[STATE:mood] happy\nTalk soon."
    fake.answer(MESSAGES, text_reply(raw))
    await rig.answer(CHAT, "I like tea and I am happy")
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == "Sure thing.\nTalk soon."
    await rig.delivered(CHAT, ("assistant", "Sure thing.\nTalk soon."))
    (run,) = await rig.runs()
    assert run.output == "Sure thing.\nTalk soon." and run.output_raw is not None
    assert json.loads(run.output_raw)["content"][0]["text"] == raw
    async with rig.services.store.read() as tx:
        assert [(f.category, f.fact) for f in await tx.list_facts("main")] == [
            ("sticky", "likes tea")
        ]
        assert await tx.get_state("main") == {"mood": "happy"}

    fake.answer(MESSAGES, text_reply("Tea it is."))
    await rig.answer(CHAT, "what should I drink?")
    system = fake.bodies(MESSAGES)[-1]["system"]
    assert "What you remember:\n- likes tea" in system
    assert "State:\n- mood: happy" in system
    assert "[MEMORY" not in json.dumps(fake.bodies(MESSAGES)[-1]["messages"])


async def test_an_invalid_conductor_tag_gives_a_host_notice_and_applies_nothing(
    rig: Rig, fake: FakeLLM
) -> None:
    await conductor(rig)
    before = sorted(f.path for f in await rig.services.folders.list_folders())
    fake.answer(
        MESSAGES,
        text_reply("Working on it.\n[CREATE_AGENT]\npersona: You have no home.\n[/CREATE_AGENT]"),
    )
    await rig.answer(CHAT, "make a helper")
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == "Working on it."
    (notice,) = await rig.of_type(CHAT, MessageType.HOST)
    assert notice.content == "[CREATE_AGENT] was not applied: it lacks the required 'path'."
    assert sorted(f.path for f in await rig.services.folders.list_folders()) == before
    await rig.delivered(CHAT, ("assistant", "Working on it."), ("host", notice.content))


# --------------------------------------------------------------------------- conductors


async def test_a_conductor_creates_agents_and_tasks_but_cannot_update_itself(
    rig: Rig, fake: FakeLLM
) -> None:
    await conductor(rig)
    fake.answer(
        MESSAGES,
        text_reply(
            "On it.\n"
            "[CREATE_AGENT]\npath: team/writer\npersona: You write.\n[/CREATE_AGENT]\n"
            "[CREATE_CRON]\nschedule: 0 9 * * *\nprompt: morning digest\n[/CREATE_CRON]\n"
            "[UPDATE_AGENT:team]\npersona: I rule everything.\n[/UPDATE_AGENT]"
        ),
    )
    job_id = await rig.answer(CHAT, "set up a writer and a morning digest")
    assert (await rig.services.turns.get_job(job_id)).priority == 3  # a conductor's turn

    await eventually(
        lambda: len(rig.sink.to(CHAT)) >= 4, "the answer and three notices to be delivered"
    )
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == "On it."
    notices = [m.content for m in await rig.of_type(CHAT, MessageType.HOST)]
    assert notices[0] == (
        "[UPDATE_AGENT:team] was not applied: the conductor cannot update itself "
        "('team' is this folder)."
    )
    (task,) = await rig.services.tasks.list()
    assert notices[1:] == ["created agent team/writer", f"scheduled task {task.id} (0 9 * * *)"]
    assert sorted(rig.sink.to(CHAT)) == sorted(
        [("assistant", "On it.")] + [("host", n) for n in notices]
    )

    writer = await rig.services.folders.get_folder("team/writer")
    assert writer.persona == "You write." and writer.created_by == "agent:team"
    agent_file = rig.data_dir / "folders" / "team" / "writer" / "AGENT.md"
    assert agent_file.read_text("utf-8").strip().endswith("You write.")
    assert (await rig.services.folders.get_folder("team")).persona == "You run the team."
    assert (task.folder, task.chat_jid, task.schedule, task.prompt) == (
        "team",
        CHAT,
        "0 9 * * *",
        "morning digest",
    )


async def test_a_heartbeat_faster_than_the_scheduler_tick_is_refused_naming_it(
    rig: Rig, fake: FakeLLM
) -> None:
    await conductor(rig)
    fake.answer(
        MESSAGES,
        text_reply("Done.\n[CREATE_HEARTBEAT]\nevery: 5s\nprompt: ping\n[/CREATE_HEARTBEAT]"),
    )
    await rig.answer(CHAT, "ping me every five seconds")
    await eventually(lambda: len(rig.sink.to(CHAT)) >= 2, "the answer and the notice")
    notices = [m.content for m in await rig.of_type(CHAT, MessageType.HOST)]
    assert notices == [
        "⚠️ CREATE_HEARTBEAT not applied: every 5s is more often than the scheduler's tick "
        "(10s) can run it; use every 10s or longer, or lower [scheduler] tick."
    ]
    assert await rig.services.tasks.list() == []


async def test_conductor_tags_are_plain_text_for_an_ordinary_agent(rig: Rig, fake: FakeLLM) -> None:
    await main_folder(rig)
    raw = "Here you go:\n[CREATE_AGENT]\npath: main/helper\n[/CREATE_AGENT]"
    fake.answer(MESSAGES, text_reply(raw))
    await rig.answer(CHAT, "create a helper")
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert answer.content == raw
    assert await rig.of_type(CHAT, MessageType.HOST) == []
    assert "main/helper" not in {f.path for f in await rig.services.folders.list_folders()}
    assert await rig.services.tasks.list() == []
    await rig.delivered(CHAT, ("assistant", raw))


async def test_a_conductor_edits_routes_inside_its_tree_only(rig: Rig, fake: FakeLLM) -> None:
    await conductor(rig)
    await rig.folder("team/writer", persona="You write.")
    fake.answer(
        MESSAGES,
        tool_reply(
            (
                "add_route",
                {"seq": 50, "match": "chat_jid=telegram:group/8", "target": "team/writer"},
            )
        ),
        tool_reply(
            ("add_route", {"seq": 60, "match": "chat_jid=telegram:group/9", "target": "main"})
        ),
        text_reply("Routed group 8 to the writer."),
    )
    await rig.answer(CHAT, "send group 8 to the writer, and group 9 to main")
    bodies = fake.bodies(MESSAGES)
    assert tool_names(bodies[0]) == BASIC_TOOLS + ROUTE_TOOLS
    (added,) = tool_results(bodies[1])
    assert not added["is_error"] and added["content"].startswith("Added route ")
    (refused,) = tool_results(bodies[2])[-1:]
    assert refused["is_error"] is True
    assert refused["content"] == "A route from team must target inside it."

    routes = {(v.seq, v.match, v.target): v for v in await rig.services.routes.list_routes()}
    assert set(routes) == {
        (10, f"chat_jid={CHAT}", "team"),
        (50, "chat_jid=telegram:group/8", "team/writer"),
    }
    assert routes[50, "chat_jid=telegram:group/8", "team/writer"].created_by == "agent:team"
    # The new route works: group 8 now reaches the writer.
    fake.answer(MESSAGES, text_reply("Hello from the writer."))
    routed = await rig.ingest("telegram:group/8", "hello writer")
    assert (routed.decision.action, routed.decision.folder) == (Action.FIRE, "team/writer")
    assert routed.decision.job_id is not None
    await rig.done(routed.decision.job_id)
    await rig.delivered("telegram:group/8", ("assistant", "Hello from the writer."))


async def test_ordinary_agents_get_no_route_tools(rig: Rig, fake: FakeLLM) -> None:
    await main_folder(rig)
    fake.answer(
        MESSAGES, tool_reply(("add_route", {"seq": 1, "target": "main"})), text_reply("No.")
    )
    await rig.answer(CHAT, "add a route")
    bodies = fake.bodies(MESSAGES)
    assert tool_names(bodies[0]) == BASIC_TOOLS
    (refused,) = tool_results(bodies[1])
    assert refused["is_error"] is True and "no tool 'add_route'" in refused["content"]
    assert len(await rig.services.routes.list_routes()) == 1


# --------------------------------------------------------------------------- busy_policy steer (§2)


async def steering_folder(rig: Rig) -> None:
    spec = FolderSpec(persona="You are Main.", provider="anthropic", busy_policy="steer")
    await rig.services.folders.add_folder("main", spec, actor="test")
    await rig.route(9999, "", "main")


def held(reply: Reply) -> tuple[Reply, asyncio.Event]:
    """*reply*, answered only once the returned event is set."""
    reply.hold = asyncio.Event()
    return reply, reply.hold


async def test_steer_brings_a_message_into_the_running_tool_loop_at_its_next_call(
    rig: Rig, fake: FakeLLM
) -> None:
    """PIPELINE §2: a message arriving while the turn runs reaches the run's next model call,
    and that turn answers it (``job_messages``); the follow-up it was queued as is cancelled."""
    await steering_folder(rig)
    first, release = held(tool_reply(("memory_search", {"query": "tea"})))
    fake.answer(MESSAGES, first, text_reply("Tea and biscuits, noted."))
    tea = await rig.ingest(CHAT, "I like tea")
    job_id = tea.decision.job_id
    assert job_id is not None
    await eventually(lambda: len(fake.received) == 1, "the first model call")
    biscuits = await rig.ingest(CHAT, "and biscuits")
    assert biscuits.decision.action is Action.FIRE
    followup = biscuits.decision.job_id
    assert followup is not None and followup != job_id  # queued behind the running turn
    release.set()

    job = await rig.done(job_id)
    bodies = fake.bodies(MESSAGES)
    assert len(bodies) == 2
    assert texts(bodies[0]) == ["I like tea"]
    assert texts(bodies[1])[0] == "I like tea" and texts(bodies[1])[-1] == "and biscuits"
    assert job.messages == ((tea.id, CHAT), (biscuits.id, CHAT))
    taken = await rig.services.turns.get_job(followup)
    assert (taken.status, taken.messages) == (JobStatus.CANCELLED, ())
    (answer,) = await rig.of_type(CHAT, MessageType.ASSISTANT)
    assert (answer.content, answer.metadata["job_id"]) == ("Tea and biscuits, noted.", job_id)
    assert answer.reply_to == biscuits.id
    (run,) = [r for r in await rig.runs() if r.job_id == job_id]
    assert run.messages[-1]["content"] == "and biscuits"
    await rig.delivered(CHAT, ("assistant", "Tea and biscuits, noted."))


async def test_steer_leaves_the_message_to_a_follow_up_when_the_run_calls_no_more(
    rig: Rig, fake: FakeLLM
) -> None:
    await steering_folder(rig)
    first, release = held(text_reply("One."))
    fake.answer(MESSAGES, first, text_reply("Two."))
    one = await rig.ingest(CHAT, "first")
    await eventually(lambda: len(fake.received) == 1, "the first model call")
    two = await rig.ingest(CHAT, "second")
    assert one.decision.job_id is not None and two.decision.job_id is not None
    release.set()
    first_job = await rig.done(one.decision.job_id)
    second_job = await rig.done(two.decision.job_id)
    assert (first_job.messages, second_job.messages) == (((one.id, CHAT),), ((two.id, CHAT),))
    assert texts(fake.bodies(MESSAGES)[1]) == ["first", "One.", "second"]
    await rig.delivered(CHAT, ("assistant", "One."), ("assistant", "Two."))


# --------------------------------------------------------------------------- delegation (§5)


async def test_a_delegated_turn_answers_the_same_chat(rig: Rig, fake: FakeLLM) -> None:
    await conductor(rig)
    await rig.folder("team/writer", persona="You write haiku.")
    fake.answer(
        MESSAGES,
        text_reply(
            "Asking the writer.\n"
            "[DELEGATE:team/writer] draft a haiku [/DELEGATE]\n"
            "[DELEGATE:main] and a limerick [/DELEGATE]"
        ),
        text_reply("Autumn moon rises"),
    )
    origin = await rig.answer(CHAT, "I need a haiku")
    await eventually(lambda: len(fake.received) == 2, "the delegated turn to call the model")
    jobs = await rig.jobs()
    assert jobs[0].id == origin
    (delegated,) = [j for j in jobs if j.kind is JobKind.DELEGATED]
    delegated = await rig.done(delegated.id)
    assert (delegated.folder, delegated.chat_jid, delegated.priority, delegated.depth) == (
        "team/writer",
        CHAT,
        4,
        1,
    )
    assert len(jobs) == 2  # nothing for main: it is outside team's tree

    body = fake.bodies(MESSAGES)[1]
    assert body["system"].startswith("You write haiku.")
    assert "You are the agent in folder team/writer." in body["system"]
    assert texts(body) == ["[system] draft a haiku"]

    async with rig.services.store.read() as tx:
        rows = [
            r.message for r in await tx.conversation_messages(delegated.conversation_id, limit=50)
        ]
    assert [(m.message_type, m.content) for m in rows] == [
        (MessageType.SYSTEM, "draft a haiku"),
        (MessageType.ASSISTANT, "Autumn moon rises"),
    ]
    assert rows[0].metadata["source"] == "delegate" and rows[0].metadata["from"] == "team"

    (notice,) = await rig.of_type(CHAT, MessageType.HOST)
    assert notice.content.startswith("[DELEGATE:main] was not applied:")
    assert "outside this folder's tree" in notice.content
    await eventually(lambda: len(rig.sink.to(CHAT)) == 3, "three sends to the chat")
    assert sorted(rig.sink.to(CHAT)) == sorted(
        [
            ("assistant", "Asking the writer."),
            ("host", notice.content),
            ("assistant", "Autumn moon rises"),
        ]
    )


async def test_delegation_deeper_than_the_cap_is_refused(rig: Rig, fake: FakeLLM) -> None:
    await conductor(rig)
    chain = ["team", "team/a", "team/a/b", "team/a/b/c", "team/a/b/c/d"]
    for path in chain[1:]:
        await rig.folder(path)
    fake.answer(
        MESSAGES,
        *(
            text_reply(f"Passing it on.\n[DELEGATE:{child}] write it [/DELEGATE]")
            for child in chain[1:]
        ),
    )
    await rig.answer(CHAT, "write it")

    async def chain_done() -> bool:
        jobs = await rig.jobs()
        return len(jobs) == 4 and all(j.status is JobStatus.DONE for j in jobs)

    await eventually(chain_done, "the chain of delegations to finish")
    # A fifth turn would have been queued in the commit of the fourth: none is left to run.
    await eventually(lambda: queue_idle(rig.services), "every turn and delivery to be done")
    jobs = await rig.jobs()
    assert [(j.folder, j.depth, j.kind.value) for j in jobs] == [
        ("team", 0, "turn"),
        ("team/a", 1, "delegated"),
        ("team/a/b", 2, "delegated"),
        ("team/a/b/c", 3, "delegated"),
    ]
    assert len(fake.received) == 4
    (notice,) = await rig.of_type(CHAT, MessageType.HOST)
    assert notice.content == (
        "delegation to team/a/b/c/d refused: delegation is limited to 3 levels"
    )


async def test_the_delegate_and_state_set_tools(rig: Rig, fake: FakeLLM) -> None:
    """PIPELINE §5: the same actions are available as tools."""
    await conductor(rig)
    await rig.folder("team/writer", persona="You write haiku.")
    fake.answer(
        MESSAGES,
        tool_reply(
            ("delegate", {"folder": "team/writer", "task": "draft a haiku"}),
            ("delegate", {"folder": "main", "task": "draft a limerick"}),
            ("delegate", {"folder": "team/ghost", "task": "haunt"}),
            ("state_set", {"key": "phase", "value": "drafting"}),
        ),
        text_reply("The writer is on it."),
        text_reply("Autumn moon rises"),
    )
    origin = await rig.answer(CHAT, "I need a haiku")
    delegated, outside, missing, state = tool_results(fake.bodies(MESSAGES)[1])
    assert not delegated["is_error"] and not state["is_error"]
    assert outside["is_error"] is True
    assert outside["content"] == "team may delegate only to folders inside it, not to main."
    assert missing["is_error"] is True
    assert missing["content"] == "There is no folder team/ghost."

    jobs = await rig.jobs()
    assert [(j.folder, j.kind, j.priority, j.depth) for j in jobs] == [
        ("team", JobKind.TURN, 3, 0),
        ("team/writer", JobKind.DELEGATED, 4, 1),
    ]
    assert jobs[0].id == origin
    await rig.done(jobs[1].id)
    assert texts(fake.bodies(MESSAGES)[2]) == ["[system] draft a haiku"]
    async with rig.services.store.read() as tx:
        assert await tx.get_state("team") == {"phase": "drafting"}
    await eventually(lambda: len(rig.sink.to(CHAT)) == 2, "both answers to be delivered")
    assert sorted(rig.sink.to(CHAT)) == [
        ("assistant", "Autumn moon rises"),
        ("assistant", "The writer is on it."),
    ]
    assert await rig.of_type(CHAT, MessageType.HOST) == []


async def test_delegating_by_tag_to_a_folder_that_does_not_exist_is_refused(
    rig: Rig, fake: FakeLLM
) -> None:
    """PIPELINE §5: the tag does what the ``delegate`` tool does, and the tool refuses a folder
    that does not exist ("There is no folder ..."); a refused tag gives a host notice and
    applies nothing. No turn may run for a folder that has no row (it would run on the default
    provider, with no persona)."""
    await conductor(rig)
    fake.answer(MESSAGES, text_reply("Asking the ghost.\n[DELEGATE:team/ghost] haunt [/DELEGATE]"))
    await rig.answer(CHAT, "boo")
    assert [j.folder for j in await rig.jobs()] == ["team"]
    notices = [m.content for m in await rig.of_type(CHAT, MessageType.HOST)]
    assert len(notices) == 1 and "team/ghost" in notices[0]


# --------------------------------------------------------------------------- compaction (§6)


LONG_TEXT = "Here is a very long message. " + "lorem ipsum dolor sit amet " * 80
SUMMARY = "Ana wrote notes 1 to 3; each was acknowledged."


async def compacted_conversation(
    make: Callable[..., Awaitable[Rig]], fake: FakeLLM
) -> tuple[Rig, int]:
    """Seven short exchanges with ``main`` (a model with a 400-token window), then one long
    message: its turn compacts the conversation first. Returns the rig and that turn's job."""
    rig = await make(models={"tiny-model": ModelInfo(400, 3.0, 15.0)})
    await rig.services.folders.add_folder(
        "main",
        FolderSpec(persona="You are Main.", provider="anthropic", model="tiny-model"),
        actor="test",
    )
    await rig.route(9999, "", "main")
    for n in range(1, 8):
        fake.answer(MESSAGES, text_reply(f"ok {n}"))
        await rig.answer(CHAT, f"note {n}")
    assert len(fake.received) == 7  # short so far: no compaction yet
    assert {r.purpose for r in await rig.runs()} == {"turn"}

    fake.reset()
    fake.answer(
        MESSAGES,
        text_reply("[MEMORY:sticky] The user is called Ana.", usage=(300, 20)),
        text_reply(SUMMARY, usage=(280, 15)),
        text_reply("That is a long one."),
    )
    job_id = await rig.answer(CHAT, LONG_TEXT)
    return rig, job_id


async def test_a_long_conversation_is_flushed_summarized_and_marked_compacted(
    make: Callable[..., Awaitable[Rig]], fake: FakeLLM
) -> None:
    rig, job_id = await compacted_conversation(make, fake)
    flush, summary, turn = fake.bodies(MESSAGES)

    assert "[MEMORY:<category>]" in flush["system"]
    assert texts(flush) == [
        "[ana] note 1\n[assistant] ok 1\n[ana] note 2\n[assistant] ok 2\n[ana] note 3"
    ]
    assert summary["system"].startswith("Summarize the conversation")
    assert texts(summary) == texts(flush)
    runs = [r for r in await rig.runs() if r.job_id == job_id]
    assert [r.purpose for r in runs] == ["memory_flush", "summary", "turn"]
    assert runs[1].output == SUMMARY
    assert [r.usage for r in runs[:2]] == [
        {"input_tokens": 300, "output_tokens": 20},
        {"input_tokens": 280, "output_tokens": 15},
    ]

    assert "- The user is called Ana." in turn["system"]
    assert f"Summary of the earlier conversation:\n{SUMMARY}" in turn["system"]
    # Only the last keep_last (10) rows are sent: from "ok 3" on, after a system row saying
    # where the rest went (the history may not open with an answer).
    assert [m["content"] for m in runs[2].messages] == [
        SUMMARY_BRIDGE,
        "ok 3",
        "note 4",
        "ok 4",
        "note 5",
        "ok 5",
        "note 6",
        "ok 6",
        "note 7",
        "ok 7",
        LONG_TEXT,
    ]
    sent = texts(turn)
    assert not any(text in sent for text in ("note 1", "note 2", "note 3", "ok 1", "ok 2"))

    rows = [m for m in await rig.rows(CHAT) if m.message_type is not MessageType.TRACE]
    compacted = [m.content for m in rows if m.compacted]
    assert compacted == ["note 1", "ok 1", "note 2", "ok 2", "note 3"]
    conversation = rows[0].conversation_id
    assert conversation is not None
    async with rig.services.store.read() as tx:
        record = await tx.latest_compaction(conversation)
        facts = await tx.list_facts("main")
    assert record is not None
    assert (record.messages_before, record.messages_after) == (15, 10)
    assert record.summary == SUMMARY
    assert record.up_to_seq == next(m.seq for m in rows if m.content == "note 3")
    assert record.tokens_saved > 0
    assert [f.fact for f in facts] == ["The user is called Ana."]
    # Marked, not deleted: the history still holds every row, in the public shape too.
    history = await rig.services.history.messages(chat_jid=CHAT, limit=1000)
    shown = [message_to_dict(m) for m in history if m.message_type is not MessageType.TRACE]
    assert [m["content"] for m in shown][:5] == compacted
    assert [m["content"] for m in shown][-2:] == [LONG_TEXT, "That is a long one."]


# --------------------------------------------------------------------------- usage and cost (§4)


async def test_runs_store_usage_and_cost_and_the_summary_sums_them(
    rig: Rig, fake: FakeLLM, clock: FakeClock
) -> None:
    await main_folder(rig)
    await rig.folder("scout")
    await rig.route(10, "chat_jid=telegram:group/6", "scout")
    fake.answer(
        MESSAGES,
        tool_reply(("memory_search", {"query": "x"}), usage=(100, 20)),
        text_reply("First.", usage=(150, 30)),
    )
    first = await rig.answer(CHAT, "one")
    fake.answer(MESSAGES, text_reply("Second.", usage=(1000, 100)))
    await rig.answer(CHAT, "two")
    fake.answer(MESSAGES, text_reply("Scouted.", model="claude-haiku-4-5", usage=(2000, 400)))
    await rig.answer("telegram:group/6", "three")
    clock.advance(days=1)
    fake.answer(MESSAGES, text_reply("Next day.", usage=(10, 10)))
    await rig.answer(CHAT, "four")

    runs = await rig.runs()
    assert [(r.folder, r.model, r.usage) for r in runs] == [
        ("main", SONNET, {"input_tokens": 250, "output_tokens": 50}),
        ("main", SONNET, {"input_tokens": 1000, "output_tokens": 100}),
        ("scout", "claude-haiku-4-5", {"input_tokens": 2000, "output_tokens": 400}),
        ("main", SONNET, {"input_tokens": 10, "output_tokens": 10}),
    ]
    costs = [r.cost for r in runs]
    expected = [
        (250 * 3 + 50 * 15) / 1e6,  # two calls, summed: $3 / $15 per Mtok
        (1000 * 3 + 100 * 15) / 1e6,
        (2000 * 1 + 400 * 5) / 1e6,  # claude-haiku-4: $1 / $5 per Mtok
        (10 * 3 + 10 * 15) / 1e6,
    ]
    assert costs == pytest.approx(expected)
    answer = next(
        m for m in await rig.of_type(CHAT, MessageType.ASSISTANT) if m.content == "First."
    )
    assert answer.metadata["usage"] == {"input_tokens": 250, "output_tokens": 50}
    assert answer.metadata["cost"] == pytest.approx(expected[0])
    assert first == runs[0].job_id

    async with rig.services.store.read() as tx:
        summary = await tx.usage_summary()
    assert [
        (u.day, u.folder, u.provider, u.model, u.runs, u.input_tokens, u.output_tokens)
        for u in summary
    ] == [
        ("2026-01-05", "main", "anthropic", SONNET, 2, 1250, 150),
        ("2026-01-05", "scout", "anthropic", "claude-haiku-4-5", 1, 2000, 400),
        ("2026-01-06", "main", "anthropic", SONNET, 1, 10, 10),
    ]
    assert [u.cost for u in summary] == pytest.approx(
        [expected[0] + expected[1], expected[2], expected[3]]
    )


async def test_compaction_calls_are_priced_like_any_run(
    make: Callable[..., Awaitable[Rig]], fake: FakeLLM
) -> None:
    """PIPELINE §4: usage *and cost* per run are stored in the run record; the memory flush and
    the summary are runs of the folder's model like the turn itself."""
    rig, job_id = await compacted_conversation(make, fake)
    flush, summary, _ = [r for r in await rig.runs() if r.job_id == job_id]
    assert (flush.purpose, summary.purpose) == ("memory_flush", "summary")
    assert flush.cost == pytest.approx((300 * 3 + 20 * 15) / 1e6)
    assert summary.cost == pytest.approx((280 * 3 + 15 * 15) / 1e6)


async def test_compaction_leaves_no_row_both_unsummarized_and_unsent(
    make: Callable[..., Awaitable[Rig]], fake: FakeLLM
) -> None:
    """PIPELINE §6 and MESSAGES §1, §4: after compaction every earlier row reaches the model,
    either in the summarized transcript or in the message list, and the run record holds
    exactly what was sent. The kept window starts at the answer to "note 3" ("ok 3"), which
    the summary does not cover."""
    rig, job_id = await compacted_conversation(make, fake)
    _, summary, turn = fake.bodies(MESSAGES)
    assert "ok 3" not in texts(summary)[0]
    assert "ok 3" in texts(turn)
    (run,) = [r for r in await rig.runs() if r.job_id == job_id and r.purpose == "turn"]
    assert len(run.messages) == len(turn["messages"])
