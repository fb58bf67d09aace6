"""Command-line runners (PIPELINE §4) end to end: a provider of ``kind = "cli"`` configured in
the :class:`Config` the server is built from (``Gateway.build`` and ``Gateway.run``, nothing
wired by hand), running a stand-in agent command this test writes. The stand-in records its
arguments, stdin, working directory and environment, then answers, prints a rate-limit
message and fails, or hangs (with a child of its own) — as the test's message asks.

What is checked: the conversation arrives on stdin and the answer is stored, delivered and
recorded; each conversation has a directory of its own (0700), always the same one; a hung
command's process group is killed at ``llm.call_timeout``; a rate-limited account hands the
call to the next one; the server's ``POSTROOM_`` variables never reach the command.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.core import Action, MessageType, StoredMessage
from postroom.engine import FolderSpec, Services
from postroom.llm.accounts import AccountPool
from postroom.store.records import JobRecord, JobStatus, RunRecord

from fakeclock import FakeClock
from gateway_support import RecordingChannel, new_data_dir, serving
from support import eventually, inbound, queue_idle, runs

pytestmark = pytest.mark.asyncio(loop_scope="module")

ANA_CHAT = "telegram:user/ana"
BOB_CHAT = "telegram:user/bob"

STAND_IN = r"""
import json, os, re, subprocess, sys, time

stdin = sys.stdin.read()
record = {
    "argv": sys.argv,
    "stdin": stdin,
    "cwd": os.getcwd(),
    "pid": os.getpid(),
    "account": os.environ.get("STANDIN_ACCOUNT", ""),
    "postroom_variables": sorted(k for k in os.environ if k.startswith("POSTROOM_")),
}
hang = "please hang" in stdin
if hang:
    record["child"] = subprocess.Popen(["sleep", "300"]).pid
with open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as out:
    out.write(json.dumps(record) + "\n")
if hang:
    time.sleep(300)
print("working on it", file=sys.stderr)
if os.environ.get("STANDIN_LIMITED"):
    print("Claude AI usage limit reached|1767225600")
    sys.exit(1)
asked = re.findall(r'<message role="user">\n(.*?)\n</message>', stdin, re.S)[-1]
print(f"answer from {record['account'] or 'the account'}: {asked}")
"""


class Rig:
    def __init__(self, data_dir: Path, gateway: Gateway, sink: RecordingChannel, record: Path):
        self.data_dir = data_dir
        self.gateway = gateway
        self.sink = sink
        self.record = record

    @property
    def services(self) -> Services:
        return self.gateway.services

    def calls(self) -> list[dict[str, Any]]:
        """What the stand-in recorded, one entry per time it ran."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text("utf-8").splitlines()]

    async def send(self, chat: str, text: str) -> JobRecord:
        """Fire *text* in *chat*; the turn once it has ended (done or failed)."""
        result = await self.services.ingest.ingest(inbound(chat, text, sender=chat))
        assert result.decision.action is Action.FIRE, result.decision
        job_id = result.decision.job_id
        assert job_id is not None

        async def ended() -> bool:
            job = await self.services.turns.get_job(job_id)
            return job.status in (JobStatus.DONE, JobStatus.FAILED)

        await eventually(ended, f"job {job_id} to end")
        return await self.services.turns.get_job(job_id)

    async def rows(self, chat: str, kind: MessageType) -> list[StoredMessage]:
        async with self.services.store.read() as tx:
            found = await tx.list_messages(chat_jid=chat, limit=1000)
        return [m for m in found if m.message_type is kind]

    async def runs(self) -> list[RunRecord]:
        return await runs(self.services)


@pytest.fixture(autouse=True)
def server_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable of the server's own that the agent command must never see."""
    monkeypatch.setenv("POSTROOM_TEST_SECRET", "never-for-the-agent")


@pytest_asyncio.fixture(loop_scope="module")
async def make(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    stack = contextlib.AsyncExitStack()
    script = tmp_path / "stand_in_agent.py"
    script.write_text(STAND_IN, "utf-8")
    record = tmp_path / "calls.jsonl"

    async def build(
        *,
        accounts: list[dict[str, str]] | None = None,
        llm: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Rig:
        section: dict[str, Any] = {
            "kind": "cli",
            "command": [sys.executable, str(script), "--print", "--model", "{model}", "--continue"],
            "env": {"RECORD_FILE": str(record)},
        }
        if accounts is not None:
            section["accounts"] = accounts
        section.update(options)
        config = Config.model_validate(
            {
                "providers": {"claude": section},
                "queue": {"max_concurrent_turns": 1, "max_attempts": 1, "shutdown_grace": "1s"},
                "llm": dict(llm or {}),
            }
        )
        data_dir = await new_data_dir(tmp_path / "data")
        sink = RecordingChannel()
        gateway = await Gateway.build(data_dir, config, clock=clock, channels=[sink])
        await stack.enter_async_context(serving(gateway))
        await gateway.services.folders.add_folder(
            "main",
            FolderSpec(persona="You are Main, run by a CLI.", provider="claude", model="opus"),
            actor="test",
        )
        await gateway.services.routes.add_route(9999, "", "main", actor="test")
        return Rig(data_dir, gateway, sink, record)

    try:
        yield build
    finally:
        await stack.aclose()


async def test_the_conversation_goes_in_on_stdin_and_the_answer_is_stored_and_delivered(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make()

    job = await rig.send(ANA_CHAT, "hello there")

    assert job.status is JobStatus.DONE, job
    (call,) = rig.calls()
    assert call["argv"][1:] == ["--print", "--model", "opus", "--continue"]
    assert call["stdin"].startswith("<instructions>\nYou are Main, run by a CLI.")
    assert '<message role="user">\nhello there\n</message>' in call["stdin"]
    assert call["postroom_variables"] == []
    sessions = rig.data_dir / "sessions"
    assert Path(call["cwd"]) == sessions / str(job.conversation_id)
    assert _mode(sessions) == _mode(Path(call["cwd"])) == 0o700

    (answer,) = await rig.rows(ANA_CHAT, MessageType.ASSISTANT)
    assert answer.content == "answer from the account: hello there"
    await eventually(lambda: queue_idle(rig.services), "the answer to be delivered")
    assert rig.sink.to(ANA_CHAT) == [("assistant", "answer from the account: hello there")]

    (run,) = await rig.runs()
    assert (run.provider, run.model, run.account, run.outcome) == ("claude", "opus", "claude", "ok")
    raw = json.loads(run.output_raw or "{}")
    assert raw["command"] == [sys.executable, *call["argv"]]
    assert raw["cwd"] == call["cwd"]
    assert raw["exit_status"] == 0
    assert raw["stdout"].strip() == answer.content
    assert raw["stderr"].strip() == "working on it"
    assert isinstance(raw["duration_ms"], int)


async def test_each_conversation_has_its_own_directory_and_keeps_it(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make()

    await rig.send(ANA_CHAT, "first from ana")
    await rig.send(BOB_CHAT, "first from bob")
    await rig.send(ANA_CHAT, "second from ana")

    ana1, bob, ana2 = rig.calls()
    assert ana1["cwd"] == ana2["cwd"]
    assert ana1["cwd"] != bob["cwd"]
    # The whole conversation goes in each time: ana's second call carries the first exchange.
    assert "first from ana" in ana2["stdin"]
    assert "answer from the account: first from ana" in ana2["stdin"]
    assert "first from bob" not in ana2["stdin"]
    assert sorted(p.name for p in (rig.data_dir / "sessions").iterdir()) == sorted(
        {Path(ana1["cwd"]).name, Path(bob["cwd"]).name}
    )


async def test_a_command_that_keeps_its_session_gets_only_what_is_new(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make(input="new")

    await rig.send(ANA_CHAT, "first from ana")
    await rig.send(ANA_CHAT, "second from ana")
    await rig.send(BOB_CHAT, "first from bob")

    first, second, bob = rig.calls()
    assert '<message role="user">\nfirst from ana\n</message>' in first["stdin"]
    # The command answered in this directory: the instructions and the new message only.
    assert second["stdin"].startswith("<instructions>\nYou are Main, run by a CLI.")
    assert "first from ana" not in second["stdin"]
    assert second["stdin"].endswith('<message role="user">\nsecond from ana\n</message>\n')
    # A new conversation starts with everything it has.
    assert '<message role="user">\nfirst from bob\n</message>' in bob["stdin"]


async def test_a_hung_command_is_killed_with_its_children_at_the_call_deadline(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make(llm={"call_timeout": "1s"})

    job = await rig.send(ANA_CHAT, "please hang")

    assert job.status is JobStatus.FAILED
    (call,) = rig.calls()
    assert not _alive(call["pid"])
    await eventually(lambda: not _alive(call["child"]), "the command's own child to be gone")
    (run,) = await rig.runs()
    assert run.outcome == "error"
    assert "llm.call_timeout" in (run.error or "")
    (notice,) = await rig.rows(ANA_CHAT, MessageType.HOST)
    assert notice.content.startswith("⚠️ could not answer")
    assert "claude did not answer within 1s" in notice.content


async def test_a_rate_limited_account_hands_the_call_to_the_next(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make(
        accounts=[
            {"STANDIN_ACCOUNT": "one", "STANDIN_LIMITED": "1"},
            {"STANDIN_ACCOUNT": "two"},
        ]
    )

    job = await rig.send(ANA_CHAT, "who answers?")

    assert job.status is JobStatus.DONE, job
    assert [c["account"] for c in rig.calls()] == ["one", "two"]
    (answer,) = await rig.rows(ANA_CHAT, MessageType.ASSISTANT)
    assert answer.content == "answer from two: who answers?"
    (run,) = await rig.runs()
    assert run.account == "claude#2"
    pool = rig.gateway.providers["claude"]
    assert isinstance(pool, AccountPool)
    first, second = pool.status()
    assert (first.label, first.strikes, first.limited_until is not None) == ("claude#1", 1, True)
    assert (second.label, second.limited_until) == ("claude#2", None)

    # The limited account rests: the next call goes straight to the second one.
    await rig.send(BOB_CHAT, "and now?")
    assert [c["account"] for c in rig.calls()] == ["one", "two", "two"]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _alive(pid: int) -> bool:
    """Whether *pid* is a running process (a zombie waiting for its parent counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text("utf-8")
    except OSError:
        return False
    return "\nState:\tZ" not in status
