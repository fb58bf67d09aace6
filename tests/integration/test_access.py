"""Admission, pairing and daily budgets over a real SQLite file (ROUTING §8, INTERFACES §1):
what is stored, what is said to whom, and what a turn does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from postroom.config import load_config
from postroom.core import Action, InboundMessage, Layer, MessageType, Trigger
from postroom.core.access import AccessPolicy, DmPolicy, GroupPolicy, Role
from postroom.core.errors import ConfigError, InvalidInput, NotFound
from postroom.core.folders import FolderDefaults
from postroom.engine import FolderSpec, IngestLimits, Services
from postroom.engine.turns import Priority
from postroom.store import SqliteStore
from postroom.store.records import RunRecord

from fakeclock import FakeClock
from support import inbound

OWNER_CHAT = "telegram:user/1"
STRANGER = "telegram:user/9"
GROUP = "telegram:group/5"


async def build(
    tmp_path: Path,
    clock: FakeClock,
    *,
    trace: Callable[[str], None] | None = None,
    owners: frozenset[str] = frozenset({OWNER_CHAT}),
    defaults: FolderDefaults | None = None,
    overrides: dict[str, dict[str, float]] | None = None,
    **policy: object,
) -> Services:
    """An engine like ``serve``'s over ``tmp_path/postroom.db``, with ``main`` and the
    catch-all route ``postroom init`` writes."""
    store = await SqliteStore.open(tmp_path / "postroom.db", trace=trace)
    access = AccessPolicy(notify=(OWNER_CHAT,), **policy)  # type: ignore[arg-type]
    services = Services.build(
        store,
        folders_dir=tmp_path / "folders",
        trigger=Trigger(),
        defaults=defaults or FolderDefaults(),
        limits=IngestLimits(content_bytes=4096, missing_notice_s=3600),
        clock=clock,
        owners=owners,
        access=access,
        model_overrides=overrides,
    )
    folders = {f.path for f in await services.folders.list_folders()}
    if "main" not in folders:
        await services.folders.add_folder("main", FolderSpec(), actor="test")
        await services.routes.add_route(9999, "", "main", actor="test")
    return services


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    services = await build(tmp_path, clock)
    yield services
    await services.close()


def dm(text: str, *, sender: str = STRANGER, id: str | None = None) -> InboundMessage:
    """A direct message: the chat is the sender's own."""
    return replace(inbound(sender, text, sender=sender, id=id), is_dm=True)


async def rows(services: Services, chat: str) -> list:  # type: ignore[type-arg]
    async with services.store.read() as tx:
        return await tx.list_messages(chat_jid=chat, limit=1000)


async def hosts(services: Services, chat: str) -> list[str]:
    return [m.content for m in await rows(services, chat) if m.message_type is MessageType.HOST]


async def jobs(services: Services) -> list:  # type: ignore[type-arg]
    async with services.store.read() as tx:
        return await tx.list_jobs(status=None, limit=100)


# ----------------------------------------------------------------------------- pairing


async def test_a_strangers_dm_gets_a_code_and_no_turn_and_the_owner_is_told(
    engine: Services,
) -> None:
    result = await engine.ingest.ingest(dm("hello, who are you?"))
    decision = result.decision
    assert (decision.action, decision.layer, result.seq) == (Action.IGNORE, Layer.ACCESS, None)
    assert decision.reason == (
        "sender telegram:user/9 is not approved (dm_policy pairing): code sent"
    )
    (request,) = await engine.access.list_pairings()
    assert (request.sender, request.chat_jid, request.platform) == (STRANGER, STRANGER, "telegram")
    assert request.sender_name == "9"
    assert request.expires_at - request.created_at == timedelta(hours=1)
    # The chat holds the code as a host message, never the stranger's text.
    stored = await rows(engine, STRANGER)
    assert [m.message_type for m in stored] == [MessageType.HOST]
    assert stored[0].content == (
        f"To talk to this assistant, ask its operator to approve code {request.code}."
    )
    assert all("who are you" not in m.content for m in stored)
    drops = await engine.history.drops(limit=10)
    assert [(d.sender, d.reason) for d in drops] == [(STRANGER, "pairing_pending")]
    assert await jobs(engine) == []
    # The owner's chat is told, with how to approve.
    (announcement,) = await hosts(engine, OWNER_CHAT)
    assert request.code in announcement and STRANGER in announcement
    assert f"postroom access approve {request.code}" in announcement


async def test_one_code_per_chat_per_ttl(engine: Services, clock: FakeClock) -> None:
    await engine.ingest.ingest(dm("hi"))
    again = await engine.ingest.ingest(dm("hello??"))
    assert again.decision.reason.endswith("a code was already sent to this chat")
    assert len(await hosts(engine, STRANGER)) == 1
    assert len(await hosts(engine, OWNER_CHAT)) == 1
    clock.advance(hours=1, seconds=1)
    assert await engine.access.list_pairings() == []  # expired
    third = await engine.ingest.ingest(dm("anyone?"))
    assert third.decision.reason.endswith("code sent")
    first, second = await hosts(engine, STRANGER)
    assert first != second  # a new code


async def test_a_redelivered_dm_is_a_duplicate_and_sends_nothing(engine: Services) -> None:
    await engine.ingest.ingest(dm("hi", id="tg-1"))
    again = await engine.ingest.ingest(dm("hi", id="tg-1"))
    assert again.duplicate and again.decision.layer is Layer.DUPLICATE
    assert len(await hosts(engine, STRANGER)) == 1


async def test_at_most_max_pending_codes_per_platform_then_silence(engine: Services) -> None:
    for n in range(10, 13):
        await engine.ingest.ingest(dm("hi", sender=f"telegram:user/{n}"))
    fourth = await engine.ingest.ingest(dm("hi", sender="telegram:user/13"))
    assert fourth.decision.drop is not None and fourth.decision.drop.value == "pairing_pending"
    assert "3 requests already pending: dropped silently" in fourth.decision.reason
    assert await rows(engine, "telegram:user/13") == []
    assert len(await engine.access.list_pairings()) == 3
    assert len(await hosts(engine, OWNER_CHAT)) == 3
    # Another platform has its own allowance.
    other = await engine.ingest.ingest(dm("hi", sender="discord:dm/77"))
    assert other.decision.reason.endswith("code sent")


async def test_approving_lets_that_sender_and_only_that_sender_talk(
    engine: Services, tmp_path: Path, clock: FakeClock
) -> None:
    await engine.ingest.ingest(dm("hi"))
    await engine.ingest.ingest(dm("hi", sender="telegram:user/90"))
    requests = {r.sender: r for r in await engine.access.list_pairings()}
    code = requests[STRANGER].code
    # Approved from another process (the CLI), the running engine admits the next message.
    other = await build(tmp_path, clock)
    try:
        approval = await other.access.approve(code.lower().replace("-", ""), actor="cli:op")
    finally:
        await other.close()
    assert approval.principal.pattern == STRANGER
    assert (approval.principal.role, approval.principal.created_by) == (Role.MEMBER, "cli:op")
    assert (await hosts(engine, STRANGER))[-1] == "You can talk to this assistant now."
    fired = await engine.ingest.ingest(dm("now can we talk?"))
    assert (fired.decision.action, fired.decision.folder) == (Action.FIRE, "main")
    assert fired.decision.reason.startswith(
        f"sender matched principal {approval.principal.id} (member)"
    )
    # The other stranger is still waiting; the approval did not leak to them.
    still = await engine.ingest.ingest(dm("me too?", sender="telegram:user/90"))
    assert still.decision.layer is Layer.ACCESS
    assert [r.sender for r in await engine.access.list_pairings()] == ["telegram:user/90"]
    with pytest.raises(NotFound, match="no pending pairing request"):
        await engine.access.approve(code, actor="test")
    with pytest.raises(InvalidInput, match="not a pairing code"):
        await engine.access.approve("nope", actor="test")
    async with engine.store.read() as tx:
        audit = await tx._all("SELECT actor, action, code FROM access_audit ORDER BY id")  # type: ignore[attr-defined]
    assert ("cli:op", "approve", code) in [tuple(row) for row in audit]


async def test_denying_removes_the_request_and_sends_no_new_code_within_the_ttl(
    engine: Services, clock: FakeClock
) -> None:
    await engine.ingest.ingest(dm("hi"))
    (request,) = await engine.access.list_pairings()
    denied = await engine.access.deny(request.code, actor="test")
    assert denied.code == request.code
    assert await engine.access.list_pairings() == []
    again = await engine.ingest.ingest(dm("please"))
    assert again.decision.layer is Layer.ACCESS
    assert len(await hosts(engine, STRANGER)) == 1
    with pytest.raises(NotFound):
        await engine.access.approve(request.code, actor="test")
    clock.advance(hours=2)
    later = await engine.ingest.ingest(dm("please?"))
    assert later.decision.reason.endswith("code sent")


async def test_explain_shows_the_verdict_and_changes_nothing(engine: Services) -> None:
    decision = await engine.router.explain(dm("hi"))
    assert decision.to_dict()["layer"] == "access"
    assert decision.reason.endswith("code sent")
    assert await engine.access.list_pairings() == []
    assert await rows(engine, STRANGER) == []


async def test_one_transaction_per_refused_message(tmp_path: Path, clock: FakeClock) -> None:
    statements: list[str] = []
    services = await build(tmp_path, clock, trace=statements.append)
    try:
        statements.clear()
        await services.ingest.ingest(dm("hi"))
        begins = [s for s in statements if s.strip().upper().startswith("BEGIN")]
        assert len(begins) == 1, statements
        # Principals are held in memory with the route table, not read per message.
        statements.clear()
        await services.ingest.ingest(inbound(GROUP, "hello"))
        assert not any("FROM principals" in s for s in statements), statements
    finally:
        await services.close()


async def test_a_route_preview_leaves_out_what_admission_refused(engine: Services) -> None:
    await engine.folders.add_folder("other", FolderSpec(), actor="test")
    await engine.ingest.ingest(dm("hi", id="refused-1"))
    await engine.ingest.ingest(inbound(GROUP, "hello", id="routed-1"))
    preview = await engine.routes.preview_routes([{"seq": 0, "match": "", "target": "other"}])
    assert [item.id for item in preview.messages] == ["routed-1"]
    assert preview.examined == 1


# ----------------------------------------------------------------------------- policies


async def test_allowlist_drops_strangers_silently(tmp_path: Path, clock: FakeClock) -> None:
    services = await build(tmp_path, clock, dm_policy=DmPolicy.ALLOWLIST)
    try:
        result = await services.ingest.ingest(dm("hi"))
        assert result.decision.drop is not None
        assert result.decision.drop.value == "not_admitted"
        assert result.decision.reason == (
            "sender telegram:user/9 is not approved (dm_policy allowlist)"
        )
        assert await rows(services, STRANGER) == []
        assert await hosts(services, OWNER_CHAT) == []
        assert await services.access.list_pairings() == []
        await services.access.add(STRANGER, role="member", actor="test")
        allowed = await services.ingest.ingest(dm("hi again"))
        assert allowed.decision.action is Action.FIRE
    finally:
        await services.close()


async def test_open_admits_every_dm(tmp_path: Path, clock: FakeClock) -> None:
    services = await build(tmp_path, clock, dm_policy=DmPolicy.OPEN)
    try:
        result = await services.ingest.ingest(dm("hi"))
        assert (result.decision.action, result.decision.folder) == (Action.FIRE, "main")
        assert result.decision.reason.startswith("sender telegram:user/9 admitted (dm_policy open)")
    finally:
        await services.close()


async def test_a_blocked_sender_is_dropped_in_groups_too(engine: Services) -> None:
    blocked = await engine.access.add("telegram:user/66", role="blocked", actor="test")
    result = await engine.ingest.ingest(inbound(GROUP, "spam", sender="telegram:user/66"))
    assert (result.decision.layer, result.decision.drop) == (Layer.ACCESS, "blocked")
    assert result.decision.reason == f"sender matched principal {blocked.id} (blocked): dropped"
    assert await rows(engine, GROUP) == []
    # Everyone else in the group is admitted by the route, as before.
    other = await engine.ingest.ingest(inbound(GROUP, "hello"))
    assert other.decision.action is Action.FIRE
    assert other.decision.reason == "row 1 (seq 9999) matched every message → main"
    # Removing the principal lets them back.
    await engine.access.remove(blocked.id or 0, actor="test")
    back = await engine.ingest.ingest(inbound(GROUP, "sorry", sender="telegram:user/66"))
    assert back.decision.action is Action.FIRE


async def test_group_allowlist_admits_only_principals_observed_rows_included(
    tmp_path: Path, clock: FakeClock
) -> None:
    services = await build(tmp_path, clock, group_policy=GroupPolicy.ALLOWLIST)
    try:
        await services.routes.add_route(0, "chat_jid=telegram:group/7", "main#observe", actor="t")
        await services.access.add("telegram:user/5*", role="member", actor="test")
        for chat in (GROUP, "telegram:group/7"):
            refused = await services.ingest.ingest(inbound(chat, "hi", sender="telegram:user/42"))
            assert refused.decision.drop is not None
            assert refused.decision.drop.value == "not_admitted"
            assert refused.decision.reason.endswith("(group_policy allowlist)")
        fired = await services.ingest.ingest(inbound(GROUP, "hi", sender="telegram:user/55"))
        assert fired.decision.action is Action.FIRE
        observed = await services.ingest.ingest(
            inbound("telegram:group/7", "hi", sender="telegram:user/55")
        )
        assert observed.decision.action is Action.OBSERVE
        # A DM from a member is admitted whatever the group policy.
        assert (
            await services.ingest.ingest(dm("hi", sender="telegram:user/56"))
        ).decision.action is Action.FIRE
    finally:
        await services.close()


async def test_a_message_without_is_dm_keeps_the_route_behaviour(engine: Services) -> None:
    """The HTTP API's default: group-like, admitted by the routes, reason unchanged."""
    result = await engine.ingest.ingest(inbound(STRANGER, "hello", sender=STRANGER))
    assert (result.decision.action, result.decision.layer) == (Action.FIRE, Layer.ROUTE)
    assert result.decision.reason == "row 1 (seq 9999) matched every message → main"


async def test_owners_are_principals_and_get_priority_one(engine: Services) -> None:
    result = await engine.ingest.ingest(dm("hello", sender=OWNER_CHAT))
    assert result.decision.action is Action.FIRE
    assert result.decision.reason.startswith("sender matched [owners] senders (owner)")
    await engine.access.add("telegram:user/2", role="owner", actor="test")
    stored_owner = await engine.ingest.ingest(dm("hello", sender="telegram:user/2"))
    priorities = {j.id: j.priority for j in await jobs(engine)}
    assert priorities[result.decision.job_id] == Priority.OWNER
    assert priorities[stored_owner.decision.job_id] == Priority.OWNER
    listed = await engine.access.list_principals()
    assert [(p.id, p.pattern, p.role) for p in listed] == [
        (1, "telegram:user/2", Role.OWNER),
        (None, OWNER_CHAT, Role.OWNER),
    ]


async def test_principal_writes_are_checked(engine: Services) -> None:
    with pytest.raises(InvalidInput, match="whitespace"):
        await engine.access.add("telegram:user/1 x", actor="test")
    with pytest.raises(InvalidInput, match="roles are"):
        await engine.access.add("telegram:user/1", role="admin", actor="test")
    with pytest.raises(NotFound, match="no principal 42"):
        await engine.access.remove(42, actor="test")
    first = await engine.access.add("telegram:user/3", role="member", actor="test")
    changed = await engine.access.add("telegram:user/3", role="blocked", note="spam", actor="t")
    assert (changed.id, changed.role, changed.note) == (first.id, Role.BLOCKED, "spam")


# ----------------------------------------------------------------------------- budgets


async def add_run(
    services: Services, folder: str, cost: float | None, clock: FakeClock, *, failed: bool = False
) -> None:
    async with services.store.write() as tx:
        await tx.insert_run(
            RunRecord(
                job_id=1,
                folder=folder,
                provider="anthropic",
                system="",
                messages=[],
                outcome="error" if failed else "ok",
                started_at=clock(),
                model="claude-sonnet-4",
                usage=None if failed else {"input_tokens": 10, "output_tokens": 10},
                cost=cost,
            )
        )


async def test_a_used_budget_stops_turns_and_says_so_once_an_hour(
    engine: Services, clock: FakeClock
) -> None:
    await engine.folders.update("main", {"budget_per_day": 1}, actor="test")
    await engine.routes.add_route(0, "platform=discord", "main/{sender}", actor="test")
    clock.advance(days=-1)
    await add_run(engine, "main", 5.0, clock)  # yesterday's spend does not count
    clock.advance(days=1)
    await add_run(engine, "main", 0.4, clock)
    await add_run(engine, "main/dc-bob", 0.6, clock)  # a {sender} child counts with it
    (status,) = await engine.budgets.today(now=clock())
    assert (status.folder, status.budget, round(status.spent, 6), status.reached) == (
        "main",
        1.0,
        1.0,
        True,
    )
    chat = "discord:guild/1/channel/2"
    first = await engine.ingest.ingest(inbound(chat, "hi", sender="discord:user/alice"))
    decision = first.decision
    assert (decision.action, decision.layer, decision.job_id) == (Action.OBSERVE, Layer.LIMIT, None)
    assert decision.folder == "main/dc-alice"
    assert decision.reason.endswith("main has used today's budget (1.00 of 1.00 USD): no turn")
    second = await engine.ingest.ingest(inbound(chat, "hello?", sender="discord:user/alice"))
    assert second.decision.layer is Layer.LIMIT
    assert await jobs(engine) == []
    notices = await hosts(engine, chat)
    assert len(notices) == 1 and "used today's budget" in notices[0]
    stored = [m for m in await rows(engine, chat) if m.message_type is MessageType.USER]
    assert [m.metadata.get("over_budget") for m in stored] == [True, True]
    assert all(m.observed for m in stored)  # a later turn sees them as context
    clock.advance(minutes=61)
    await engine.ingest.ingest(inbound(chat, "still there?", sender="discord:user/alice"))
    assert len(await hosts(engine, chat)) == 2
    # A new UTC day: the budget is fresh, and turns run again.
    clock.advance(days=1)
    fresh = await engine.ingest.ingest(inbound(chat, "good morning", sender="discord:user/alice"))
    assert fresh.decision.action is Action.FIRE and fresh.decision.job_id is not None


async def test_under_budget_fires_and_other_folders_are_unaffected(
    engine: Services, clock: FakeClock
) -> None:
    await engine.folders.add_folder("other", FolderSpec(budget_per_day=1), actor="test")
    await engine.folders.update("main", {"budget_per_day": 2}, actor="test")
    await add_run(engine, "other", 3.0, clock)
    await add_run(engine, "main", 1.5, clock)
    fired = await engine.ingest.ingest(inbound(GROUP, "hi"))
    assert fired.decision.action is Action.FIRE


async def test_only_runs_that_used_unpriced_tokens_count_as_unpriced(
    engine: Services, clock: FakeClock
) -> None:
    await engine.folders.update("main", {"budget_per_day": 1}, actor="test")
    await add_run(engine, "main", 0.25, clock)
    await add_run(engine, "main", None, clock, failed=True)  # a failed call costs nothing
    (status,) = await engine.budgets.today(now=clock())
    assert (status.spent, status.unpriced_runs) == (0.25, 0)
    await add_run(engine, "main", None, clock)  # tokens used, no price for them
    (status,) = await engine.budgets.today(now=clock())
    assert (status.spent, status.unpriced_runs) == (0.25, 1)


async def test_a_budget_on_an_unpriced_model_is_answered_with_a_warning(
    tmp_path: Path, clock: FakeClock
) -> None:
    services = await build(
        tmp_path, clock, overrides={"house-model": {"input_per_mtok": 0.5, "output_per_mtok": 1.0}}
    )
    try:
        await services.folders.update(
            "main", {"budget_per_day": 3, "provider": "openai", "model": "my-model"}, actor="t"
        )
        warning = await services.budgets.warning("main")
        assert warning is not None and "no price for model my-model" in warning
        await services.folders.update("main", {"model": "house-model"}, actor="t")
        assert await services.budgets.warning("main") is None  # priced in the configuration
        await services.folders.update("main", {"model": "gpt-4o"}, actor="t")
        assert await services.budgets.warning("main") is None
        await services.folders.update("main", {"budget_per_day": None, "model": "x"}, actor="t")
        assert await services.budgets.warning("main") is None  # no budget, nothing to say
    finally:
        await services.close()


# ----------------------------------------------------------------------------- configuration


def test_the_access_section_is_checked_where_it_is_written(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        {
            "POSTROOM_ACCESS__DM_POLICY": "open",
            "POSTROOM_ACCESS__NOTIFY": '["telegram:user/1"]',
            "POSTROOM_ACCESS__PAIRING_TTL": "30m",
        },
    )
    policy = config.access.policy()
    assert (policy.dm_policy, policy.notify, policy.pairing_ttl_s) == (
        DmPolicy.OPEN,
        ("telegram:user/1",),
        1800.0,
    )
    assert load_config(tmp_path, {}).access.policy() == AccessPolicy()
    for key, value, words in (
        ("DM_POLICY", "everyone", "access.dm_policy"),
        ("GROUP_POLICY", "open", "access.group_policy"),
        ("PAIRING_TTL", "0", "access.pairing_ttl"),
        ("PAIRING_TTL", "9999h", "access.pairing_ttl"),
        ("MAX_PENDING", "0", "access.max_pending"),
        ("NOTIFY", '["not a jid"]', "access.notify"),
        ("NOTIFI", "x", "notifi"),
    ):
        with pytest.raises(ConfigError) as raised:
            load_config(tmp_path, {f"POSTROOM_ACCESS__{key}": value})
        assert words in str(raised.value), str(raised.value)
