"""Skills (MESSAGES §4) end to end: the server ``postroom serve`` runs (``Gateway.build`` and
``Gateway.run``), the real Anthropic adapter against a fake Messages API, and the system prompt
the fake received. A skill whose keywords match the turn is in it, before the system notices;
one that does not match is not; a child folder gets its parent's skills (a nearer one of the
same name wins); ``skills.max_per_run`` and ``skills.max_chars`` hold; the run record lists
what was injected with the scores; the ``skills/*.md`` mirror is written on every write and a
person's edit of it is imported before the next run."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs
from typer.testing import CliRunner

from postroom.app.gateway import Gateway
from postroom.cli.main import app
from postroom.config import Config
from postroom.core import Action
from postroom.core.errors import InvalidInput
from postroom.engine import FolderSpec, Services
from postroom.store.records import JobStatus, RunRecord

from fake_llm import FakeLLM, Reply, serve
from fakeclock import FakeClock
from gateway_support import RecordingChannel, new_data_dir, serving
from support import cli_env, eventually, inbound, logging_kept, runs

pytestmark = pytest.mark.asyncio(loop_scope="module")

MESSAGES = "/v1/messages"
KEY = "sk-ant-test-SKILLS-key-0000-1111aaaa"
SUPPORT_CHAT = "telegram:group/support"
ACME_CHAT = "telegram:group/acme"
ANA = "telegram:user/ana"


def text_reply(text: str) -> Reply:
    return Reply(
        body={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 5},
        }
    )


class Rig:
    """A server over one data directory: folders ``acme`` and ``acme/support``, each reached
    from its own chat."""

    def __init__(self, data_dir: Path, gateway: Gateway, fake: FakeLLM) -> None:
        self.data_dir = data_dir
        self.gateway = gateway
        self.fake = fake

    @property
    def services(self) -> Services:
        return self.gateway.services

    async def skill(self, folder: str, name: str, **values: Any) -> None:
        await self.services.skills.add(folder, {"name": name, **values}, actor="test")

    async def ask(self, chat: str, text: str) -> str:
        """Fire *text*, let the fake answer, return the system prompt the model received."""
        self.fake.answer(MESSAGES, text_reply("ok"))
        result = await self.services.ingest.ingest(inbound(chat, text, sender=ANA))
        assert result.decision.action is Action.FIRE, result.decision
        job_id = result.decision.job_id
        assert job_id is not None

        async def finished() -> bool:
            job = await self.services.turns.get_job(job_id)
            return job.status in (JobStatus.DONE, JobStatus.FAILED)

        await eventually(finished, f"job {job_id} to finish")
        job = await self.services.turns.get_job(job_id)
        assert job.status is JobStatus.DONE, job
        return str(self.fake.bodies(MESSAGES)[-1]["system"])

    async def last_run(self) -> RunRecord:
        return (await runs(self.services))[-1]

    def skill_file(self, folder: str, name: str) -> Path:
        return self.data_dir / "folders" / folder / "skills" / f"{name}.md"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[tuple[FakeLLM, str]]:
    llm = FakeLLM()
    async with serve(llm) as base:
        yield llm, base


@pytest_asyncio.fixture(loop_scope="module")
async def make(
    tmp_path: Path, clock: FakeClock, server: tuple[FakeLLM, str]
) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    fake, url = server
    fake.reset()
    stack = contextlib.AsyncExitStack()

    async def build(skills: Mapping[str, Any] | None = None) -> Rig:
        config = Config.model_validate(
            {
                "providers": {"anthropic": {"api_keys": [KEY], "base_url": url}},
                "queue": {"max_concurrent_turns": 1, "shutdown_grace": "200ms"},
                "skills": dict(skills or {}),
            }
        )
        data_dir = await new_data_dir(tmp_path / "data")
        gateway = await Gateway.build(data_dir, config, clock=clock, channels=[RecordingChannel()])
        await stack.enter_async_context(serving(gateway))
        services = gateway.services
        for path in ("acme", "acme/support"):
            await services.folders.add_folder(
                path, FolderSpec(persona=f"You are {path}.", provider="anthropic"), actor="test"
            )
        await services.routes.add_route(10, f"chat_jid={SUPPORT_CHAT}", "acme/support", actor="t")
        await services.routes.add_route(20, f"chat_jid={ACME_CHAT}", "acme", actor="t")
        return Rig(data_dir, gateway, fake)

    try:
        yield build
    finally:
        await stack.aclose()


async def test_a_matching_skill_is_injected_before_the_notices_and_another_is_not(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make()
    await rig.skill(
        "acme/support",
        "invoices",
        description="How we write invoices",
        keywords=["invoice", "billing"],
        body="Invoices are numbered INV-MARKER-7.",
    )
    await rig.skill(
        "acme/support",
        "holidays",
        description="Office closures",
        keywords=["vacation", "closed"],
        body="The office closes HOLIDAY-MARKER-9.",
    )

    system = await rig.ask(SUPPORT_CHAT, "Could you send me the invoice for March?")

    assert "INV-MARKER-7" in system
    assert "HOLIDAY-MARKER-9" not in system
    assert "## Skill: invoices — How we write invoices" in system
    # Appended after the persona and before the system notices (which stay last).
    assert system.index("You are acme/support.") < system.index("INV-MARKER-7")
    assert system.index("INV-MARKER-7") < system.index("Current time:")
    run = await rig.last_run()
    assert run.system == system
    assert [(s["name"], s["inherited_from"]) for s in run.skills] == [("invoices", None)]
    assert run.skills[0]["score"] >= 10
    shown = await asyncio.to_thread(_cli, rig.data_dir, "runs", "show", str(run.id))
    assert f"skills: invoices ({run.skills[0]['score']})" in shown

    # A turn whose words match nothing gets no skill at all.
    system = await rig.ask(SUPPORT_CHAT, "good morning")
    assert "Skill:" not in system
    assert (await rig.last_run()).skills == []


async def test_a_child_folder_gets_its_parents_skills_and_a_nearer_one_wins(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make()
    await rig.skill("acme", "refunds", keywords=["refund"], body="PARENT-REFUNDS-RULES")
    await rig.skill("acme", "shipping", keywords=["parcel"], body="PARENT-SHIPPING-RULES")
    await rig.skill("acme/support", "shipping", keywords=["parcel"], body="CHILD-SHIPPING-RULES")

    system = await rig.ask(SUPPORT_CHAT, "I want a refund, my parcel never came")

    assert "PARENT-REFUNDS-RULES" in system
    assert "CHILD-SHIPPING-RULES" in system
    assert "PARENT-SHIPPING-RULES" not in system
    run = await rig.last_run()
    assert {s["name"]: s["inherited_from"] for s in run.skills} == {
        "refunds": "acme",
        "shipping": None,
    }
    # The parent does not see its child's skills: its own one of that name applies there.
    system = await rig.ask(ACME_CHAT, "where is my parcel?")
    assert "PARENT-SHIPPING-RULES" in system
    assert "CHILD-SHIPPING-RULES" not in system

    listed = await rig.services.skills.visible("acme/support")
    assert [(s.name, s.folder, origin) for s, origin in listed] == [
        ("refunds", "acme", "acme"),
        ("shipping", "acme/support", None),
    ]


async def test_max_per_run_and_max_chars_bound_the_injected_skills(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make({"max_per_run": 2, "max_chars": 400})
    # Scores: "alpha" matches two keywords, "beta" one plus its description, "gamma" one.
    await rig.skill("acme", "alpha", keywords=["tax", "vat"], body="ALPHA-BODY")
    await rig.skill("acme", "beta", description="tax forms", keywords=["forms"], body="BETA-BODY")
    await rig.skill("acme", "gamma", keywords=["vat"], body="GAMMA-BODY")
    # Matches best of all, but is larger than the whole budget: passed over.
    await rig.skill("acme", "huge", keywords=["tax", "vat", "forms"], body="HUGE " + "x" * 500)

    system = await rig.ask(ACME_CHAT, "tax and vat forms")

    run = await rig.last_run()
    assert [s["name"] for s in run.skills] == ["alpha", "beta"]
    assert run.skills[0]["score"] > run.skills[1]["score"]
    assert sum(s["chars"] for s in run.skills) <= 400
    assert "ALPHA-BODY" in system and "BETA-BODY" in system
    assert "GAMMA-BODY" not in system and "HUGE" not in system


async def test_the_skill_files_mirror_the_rows_and_hand_edits_are_imported(
    make: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make()
    skills = rig.services.skills
    await rig.skill("acme", "invoices", keywords=["invoice"], body="FIRST-VERSION")
    file = rig.skill_file("acme", "invoices")
    assert file.read_text("utf-8") == (
        '+++\nname = "invoices"\nkeywords = ["invoice"]\n+++\nFIRST-VERSION\n'
    )
    assert file.stat().st_mode & 0o777 == 0o600
    assert file.parent.stat().st_mode & 0o777 == 0o700

    # A write through a surface rewrites the file.
    await skills.update("acme", "invoices", {"body": "SECOND-VERSION"}, actor="test")
    assert file.read_text("utf-8").endswith("+++\nSECOND-VERSION\n")

    # A person edits the file, and adds another one by hand: both reach the next run.
    _edit(file, file.read_text("utf-8").replace("SECOND-VERSION", "HAND-EDITED-VERSION"))
    _edit(
        rig.skill_file("acme", "taxes"),
        '+++\ndescription = "Tax questions"\nkeywords = ["tax"]\n+++\nHAND-WRITTEN-TAXES\n',
    )
    system = await rig.ask(ACME_CHAT, "an invoice and a tax question")
    assert "HAND-EDITED-VERSION" in system
    assert "HAND-WRITTEN-TAXES" in system
    stored = {s.name: s for s in await skills.every()}
    assert stored["taxes"].description == "Tax questions"
    assert stored["invoices"].body == "HAND-EDITED-VERSION"

    # An invalid edit is logged once and not applied; a write to that skill is refused.
    _edit(file, "+++\nkeywords = [unclosed\n+++\nBROKEN-VERSION\n")
    with capture_logs() as logs:
        system = await rig.ask(ACME_CHAT, "another invoice please")
        await rig.ask(ACME_CHAT, "and one more invoice")
    assert "BROKEN-VERSION" not in system and "HAND-EDITED-VERSION" in system
    assert [e["event"] for e in logs].count("skill.file_invalid") == 1
    problems = await skills.file_problems()
    assert [(p.folder, "not valid TOML" in p.detail) for p in problems] == [("acme", True)]
    with pytest.raises(InvalidInput, match="Fix or undo that edit first"):
        await skills.update("acme", "invoices", {"body": "x"}, actor="test")

    # Deleting a file by hand removes the skill.
    file.unlink()
    rig.skill_file("acme", "taxes").unlink()
    system = await rig.ask(ACME_CHAT, "an invoice and a tax question")
    assert "Skill:" not in system
    assert await skills.every() == []


def _cli(data_dir: Path, *args: str) -> str:
    with logging_kept():
        result = CliRunner().invoke(app, ["--data", str(data_dir), *args], env=cli_env())
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def _edit(file: Path, text: str) -> None:
    """Write *file* as a person would, with a modification time clearly after the last one
    (two writes within one clock tick must still look different)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    before = file.stat().st_mtime_ns if file.exists() else 0
    file.write_text(text, "utf-8")
    stat = file.stat()
    os.utime(file, ns=(stat.st_atime_ns, max(stat.st_mtime_ns, before) + 5_000_000_000))
