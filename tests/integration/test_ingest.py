"""Ingest end to end over a real SQLite file: one transaction, dedupe, drops without content,
command side effects, template folders, the bot-loop guard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from postroom.core import Action, Layer, MessageType, TooLarge, Verb
from postroom.core.errors import InvalidInput
from postroom.core.folders import FolderDefaults
from postroom.engine import FolderSpec, Services
from postroom.store import NewMessage

from fakeclock import FakeClock
from support import inbound, open_services, seed_spec_table

#: Every test runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("db_engine")


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    services = await open_services(tmp_path, clock)
    await seed_spec_table(services)
    yield services
    await services.close()


async def history(services: Services, chat: str) -> list:  # type: ignore[type-arg]
    async with services.store.read() as tx:
        return await tx.list_messages(chat_jid=chat, limit=1000)


async def test_one_transaction_per_inbound_message(tmp_path: Path, clock: FakeClock) -> None:
    statements: list[str] = []
    services = await open_services(tmp_path, clock, trace=statements.append)
    try:
        await seed_spec_table(services)
        for text in ("hello", "@atlas/social", "what's new"):
            statements.clear()
            await services.ingest.ingest(inbound("telegram:group/5", text))
            begins = [s for s in statements if s.strip().upper().startswith("BEGIN")]
            commits = [s for s in statements if s.strip().upper() == "COMMIT"]
            assert (len(begins), len(commits)) == (1, 1), statements
            # Routing used the in-memory index: the route table was not read from disk.
            assert not any("FROM routes" in s for s in statements), statements
    finally:
        await services.close()


async def test_fire_is_stored_with_its_routing(engine: Services) -> None:
    result = await engine.ingest.ingest(inbound("telegram:group/5", "@content draft post"))
    assert result.decision.action is Action.FIRE
    assert result.decision.folder == "atlas/content"
    assert result.decision.content == "draft post"
    (row,) = await history(engine, "telegram:group/5")
    assert row.seq == result.seq
    assert row.content == "@content draft post"  # the history keeps the original text
    assert row.metadata["routed_content"] == "draft post"
    assert row.routed_to == "atlas/content" and not row.observed
    assert row.message_type is MessageType.USER


async def test_duplicate_is_a_no_op_returning_the_original_decision(engine: Services) -> None:
    first = await engine.ingest.ingest(inbound("telegram:group/5", "hi", id="dup-1"))
    again = await engine.ingest.ingest(inbound("telegram:group/5", "hi again", id="dup-1"))
    assert again.duplicate and not first.duplicate
    assert again.seq == first.seq
    assert again.decision.layer is Layer.DUPLICATE
    assert (again.decision.action, again.decision.folder, again.decision.route_id) == (
        first.decision.action,
        first.decision.folder,
        first.decision.route_id,
    )
    assert again.decision.reason == first.decision.reason
    assert len(await history(engine, "telegram:group/5")) == 1
    # The same id in another chat is another message.
    other = await engine.ingest.ingest(inbound("telegram:group/6", "hi", id="dup-1"))
    assert not other.duplicate


async def test_miss_is_dropped_without_content(tmp_path: Path, clock: FakeClock) -> None:
    services = await open_services(tmp_path, clock)
    marker = "SECRET-CONTENT-9f3b1c"
    try:
        await services.folders.add_folder("main", FolderSpec(), actor="t")
        await services.routes.add_route(0, "platform=telegram", "main", actor="t")
        result = await services.ingest.ingest(
            inbound("matrix:room/1", marker, sender="matrix:user/@a:x", id="lost-1")
        )
        again = await services.ingest.ingest(
            inbound("matrix:room/1", marker, sender="matrix:user/@a:x", id="lost-1")
        )
        assert result.seq is None and result.decision.action is Action.IGNORE
        assert result.decision.layer is Layer.MISS and result.decision.route_id is None
        assert result.decision.reason == "no route matched matrix:room/1"
        assert again.duplicate and again.decision.layer is Layer.DUPLICATE
        assert await history(services, "matrix:room/1") == []
        async with services.store.read() as tx:
            (drop,) = await tx.list_drops(limit=10)
        assert (drop.id, drop.chat_jid, drop.reason, drop.sender) == (
            "lost-1",
            "matrix:room/1",
            "no_route",
            "matrix:user/@a:x",
        )
    finally:
        await services.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("postroom.db*"))  # noqa: ASYNC240
    assert marker.encode() not in raw


async def test_chatid_answered_on_a_miss(tmp_path: Path, clock: FakeClock) -> None:
    services = await open_services(tmp_path, clock)
    try:
        result = await services.ingest.ingest(
            inbound("slack:T1/channel/C9", "/chatid", sender="slack:user/U1")
        )
        assert result.decision.action is Action.COMMAND and result.decision.layer is Layer.MISS
        assert result.decision.ack == "chat id: slack:T1/channel/C9"
        (ack,) = await history(services, "slack:T1/channel/C9")
        assert ack.message_type is MessageType.HOST and "slack:T1/channel/C9" in ack.content
        async with services.store.read() as tx:
            assert [d.reason for d in await tx.list_drops(limit=5)] == ["no_route"]
    finally:
        await services.close()


async def test_sticky_command_is_applied_and_acked_as_host(engine: Services) -> None:
    async with engine.store.write() as tx:
        await tx.engage(
            "telegram:group/5", "", "atlas/content", engine.clock() + timedelta(minutes=30)
        )
    result = await engine.ingest.ingest(inbound("telegram:group/5", "@atlas/social"))
    assert result.decision.action is Action.COMMAND
    assert result.decision.ack == "routing → atlas/social"
    command, ack = await history(engine, "telegram:group/5")
    assert command.metadata.get("command") is True and command.routed_to is None
    assert ack.message_type is MessageType.HOST and ack.content == "routing → atlas/social"
    assert ack.reply_to == command.id
    async with engine.store.read() as tx:
        state = await tx.chat_state("telegram:group/5")
    assert state.sticky_group == "atlas/social"
    assert state.engagements == {}  # setting the sticky group ends the engagement
    follow = await engine.ingest.ingest(inbound("telegram:group/5", "what's new"))
    assert (follow.decision.layer, follow.decision.folder) == (Layer.STICKY, "atlas/social")


async def test_refused_sticky_changes_nothing(engine: Services) -> None:
    await engine.ingest.ingest(inbound("telegram:group/5", "@atlas/social"))
    refused = await engine.ingest.ingest(inbound("telegram:group/5", "@other"))
    assert refused.decision.ack == "routing → other refused: not under atlas"
    async with engine.store.read() as tx:
        assert (await tx.chat_state("telegram:group/5")).sticky_group == "atlas/social"


async def test_topic_commands_and_status(engine: Services) -> None:
    await engine.ingest.ingest(inbound("telegram:group/5", "#support"))
    fired = await engine.ingest.ingest(inbound("telegram:group/5", "my account is locked"))
    assert (fired.decision.folder, fired.decision.topic) == ("atlas", "support")
    rows = await history(engine, "telegram:group/5")
    assert rows[-1].topic == "support"
    status = await engine.ingest.ingest(inbound("telegram:group/5", "/status"))
    assert status.decision.ack is not None
    assert "folder atlas" in status.decision.ack and "sticky topic support" in status.decision.ack
    assert (await history(engine, "telegram:group/5"))[-1].content == status.decision.ack
    await engine.ingest.ingest(inbound("telegram:group/5", "#"))
    plain = await engine.ingest.ingest(inbound("telegram:group/5", "hello"))
    assert plain.decision.topic == ""


async def test_new_starts_a_generation_and_ends_engagement(engine: Services) -> None:
    async with engine.store.write() as tx:
        await tx.engage(
            "telegram:group/5", "", "atlas/content", engine.clock() + timedelta(minutes=30)
        )
    result = await engine.ingest.ingest(inbound("telegram:group/5", "/new"))
    assert result.decision.ack == "new conversation with atlas/content"
    async with engine.store.read() as tx:
        assert (await tx.chat_state("telegram:group/5")).engagements == {}
        rows = list(
            await tx._conn.fetchall("SELECT folder, chat_jid, generation FROM conversations")
        )
    assert rows == [("atlas/content", "telegram:group/5", 1)]


async def test_observe_and_mention_followed_by_chatter(engine: Services) -> None:
    chat = "discord:guild/77/channel/3"
    first = await engine.ingest.ingest(
        inbound(chat, "@Postroom summarize", sender="discord:user/1")
    )
    second = await engine.ingest.ingest(inbound(chat, "lol", sender="discord:user/2"))
    assert (first.decision.action, first.decision.folder) == (Action.FIRE, "main")
    assert first.decision.route_id == 6
    assert (second.decision.action, second.decision.folder) == (Action.OBSERVE, "main")
    rows = await history(engine, chat)
    assert [(r.verb, r.observed, r.routed_to) for r in rows] == [
        ("mention", False, "main"),
        ("message", True, "main"),
    ]


async def test_gateway_messages_are_stored_never_routed(engine: Services) -> None:
    result = await engine.ingest.ingest(
        inbound("telegram:group/5", "@atlas/social", is_from_me=True)
    )
    assert (result.decision.action, result.decision.layer) == (Action.IGNORE, Layer.OWN)
    (row,) = await history(engine, "telegram:group/5")
    assert row.is_from_me and row.routed_to is None
    async with engine.store.read() as tx:
        assert (await tx.chat_state("telegram:group/5")).sticky_group is None


async def test_reply_chain_through_a_stored_assistant_message(engine: Services) -> None:
    async with engine.store.write() as tx:
        await tx.insert_message(
            NewMessage(
                id="ans-1",
                chat_jid="telegram:group/5",
                sender="bot",
                content="draft v1",
                timestamp=engine.clock(),
                message_type=MessageType.ASSISTANT,
                is_from_me=True,
                routed_to="atlas/content",
                platform_id="tg-900",
            )
        )
    by_id = await engine.ingest.ingest(inbound("telegram:group/5", "shorter", reply_to="ans-1"))
    by_platform = await engine.ingest.ingest(
        inbound("telegram:group/5", "even shorter", reply_to="tg-900")
    )
    for result in (by_id, by_platform):
        assert (result.decision.layer, result.decision.folder) == (
            Layer.REPLY_CHAIN,
            "atlas/content",
        )
        assert result.decision.verb == Verb.MENTION  # a reply to the bot is a mention


async def test_sender_template_folder_created_on_fire_only(
    tmp_path: Path, clock: FakeClock
) -> None:
    services = await open_services(tmp_path, clock)
    try:
        await services.folders.add_folder(
            "atlas", FolderSpec(provider="anthropic", engagement_ttl="10m"), actor="t"
        )
        await services.routes.add_route(
            0, "platform=discord verb=mention", "atlas/{sender}", actor="t"
        )
        await services.routes.add_route(1, "platform=discord", "atlas/{sender}#observe", actor="t")
        chat = "discord:guild/1/channel/2"
        explained = await services.router.explain(
            inbound(chat, "@Postroom hi", sender="discord:user/Bob")
        )
        assert explained.folder == "atlas/dc-bob"
        observed = await services.ingest.ingest(inbound(chat, "hi", sender="discord:user/Bob"))
        assert observed.decision.action is Action.OBSERVE
        folders = {f.path for f in await services.folders.list_folders()}
        assert "atlas/dc-bob" not in folders  # neither explain nor observe creates it
        fired = await services.ingest.ingest(
            inbound(chat, "@Postroom hi", sender="discord:user/Bob")
        )
        assert (fired.decision.action, fired.decision.folder) == (Action.FIRE, "atlas/dc-bob")
        created = {f.path: f for f in await services.folders.list_folders()}["atlas/dc-bob"]
        assert created.inherits and created.provider is None
        settings = services.catalog.snapshot.settings("atlas/dc-bob", FolderDefaults())
        assert (settings.provider, settings.engagement_ttl_s) == ("anthropic", 600)
        again = await services.ingest.ingest(
            inbound(chat, "@Postroom more", sender="discord:user/Bob")
        )
        assert again.decision.create_from_template is None
    finally:
        await services.close()


async def test_folder_missing_drop_and_hourly_notice(tmp_path: Path, clock: FakeClock) -> None:
    services = await open_services(tmp_path, clock)
    try:
        await services.folders.add_folder("gone", FolderSpec(), actor="t")
        await services.routes.add_route(0, "", "gone", actor="t")
        async with services.store.write() as tx:  # the folder vanishes by other means
            await tx.delete_folder("gone")
            await tx.bump_catalog_version()
        results = [
            await services.ingest.ingest(inbound("telegram:group/1", f"m{i}")) for i in range(3)
        ]
        clock.advance(minutes=61)
        results.append(await services.ingest.ingest(inbound("telegram:group/1", "later")))
        assert {r.decision.layer for r in results} == {Layer.MISS}
        async with services.store.read() as tx:
            reasons = [d.reason for d in await tx.list_drops(limit=10)]
        assert reasons == ["folder_missing"] * 4
        notices = await history(services, "telegram:group/1")
        assert [m.message_type for m in notices] == [MessageType.HOST, MessageType.HOST]
        assert "gone" in notices[0].content
    finally:
        await services.close()


async def test_bad_input_is_refused_and_nothing_stored(engine: Services) -> None:
    bad = [
        inbound("telegram", "no colon"),
        inbound("Telegram:group/5", "bad platform"),
        inbound("telegram:group/5", "forged", sender="host"),
        inbound("telegram:group/5", "forged", sender="tui-user"),
        inbound("telegram:group/5", "no sender", sender="nobody"),
        inbound("telegram:group/5", "bad id", id="a\nb"),
        inbound("telegram:group/5", "\ud800 lone surrogate"),
    ]
    for message in bad:
        with pytest.raises(InvalidInput):
            await engine.ingest.ingest(message)
    with pytest.raises(TooLarge):
        await engine.ingest.ingest(inbound("telegram:group/5", "x" * 5000))
    assert await history(engine, "telegram:group/5") == []
    async with engine.store.read() as tx:
        assert await tx.list_drops(limit=10) == []


async def test_operator_chat(engine: Services) -> None:
    ok = await engine.ingest.ingest(
        inbound("tui:atlas/content", "hello", sender="tui-user"), operator=True
    )
    assert (ok.decision.layer, ok.decision.folder, ok.decision.route_id) == (
        Layer.OPERATOR,
        "atlas/content",
        None,
    )
    missing = await engine.ingest.ingest(
        inbound("tui:nope", "hello", sender="tui-user"), operator=True
    )
    assert missing.decision.layer is Layer.MISS and missing.seq is None
