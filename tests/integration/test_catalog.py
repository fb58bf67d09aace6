"""Route and folder writes: validated, audited, atomic, and seen by routing on the next message —
also when another process wrote them."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from postroom.core import Action, Conflict, Forbidden, InvalidInput, NotFound
from postroom.engine import FolderSpec, Services

from fakeclock import FakeClock
from support import inbound, open_services, seed_spec_table


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    services = await open_services(tmp_path, clock)
    await seed_spec_table(services)
    yield services
    await services.close()


async def table(services: Services) -> list[tuple[int, int, str, str]]:
    return [(v.id, v.seq, v.match, v.target) for v in await services.routes.list_routes()]


async def audit(services: Services) -> list[tuple[str, int | None]]:
    async with services.store.read() as tx:
        return [(a.action, a.route_id) for a in await tx.list_route_audit(limit=100)]


@pytest.mark.parametrize(
    ("seq", "match", "target", "fragment"),
    [
        (1, "chanel=x", "atlas", "Unknown match key 'chanel'"),
        (1, "platform", "atlas", "has no '='"),
        (1, "room=[ab", "atlas", "never closed"),
        (1, "room=ab\\", "atlas", "lone '\\'"),
        (1, "room=guild/", "atlas", "ends with '/'"),
        ("x", "", "atlas", "seq must be an integer"),
        (True, "", "atlas", "seq must be an integer"),
        (1, "", "nosuch", "nosuch does not exist"),
        (1, "", "atlas#Bad!", "fragment"),
        (1, "", "atlas/../etc", "'..'"),
        (1, "", "Atlas", "uppercase"),
        (1, "", "ghost/{sender}", "Template parent ghost"),
        (1, "verb=mentoin", "atlas", "Unknown verb 'mentoin'"),
    ],
)
async def test_bad_route_writes_change_nothing(
    engine: Services, seq: object, match: str, target: str, fragment: str
) -> None:
    before, before_audit = await table(engine), await audit(engine)
    with pytest.raises(InvalidInput) as caught:
        await engine.routes.add_route(seq, match, target, actor="t")
    assert fragment in str(caught.value)
    assert str(caught.value).endswith(".")
    assert await table(engine) == before
    assert await audit(engine) == before_audit


async def test_add_delete_and_audit(engine: Services) -> None:
    rid = await engine.routes.add_route(5, "  platform=slack   verb=mention ", "main", actor="ann")
    views = {v.id: v for v in await engine.routes.list_routes()}
    assert views[rid].match == "platform=slack verb=mention"  # stored in normal form
    assert views[rid].created_by == "ann" and views[rid].fires_on == "mentions only"
    removed = await engine.routes.delete_route(rid, actor="bob")
    assert removed.id == rid
    async with engine.store.read() as tx:
        newest, added = await tx.list_route_audit(limit=2)
    assert (newest.action, newest.actor, newest.after) == ("delete", "bob", None)
    assert newest.before == {
        "id": rid,
        "seq": 5,
        "match": "platform=slack verb=mention",
        "target": "main",
    }
    assert (added.action, added.actor, added.before) == ("add", "ann", None)
    with pytest.raises(NotFound):
        await engine.routes.delete_route(rid, actor="bob")


async def test_set_routes_is_atomic(engine: Services) -> None:
    before = await table(engine)
    rows = [{"seq": 0, "match": "", "target": "main"}, {"seq": 1, "match": "x=y", "target": "main"}]
    with pytest.raises(InvalidInput) as caught:
        await engine.routes.set_routes(rows, actor="t")
    assert str(caught.value).startswith(
        "Row 2 of the table (seq 1, match 'x=y', target 'main'): "
    ), caught.value
    with pytest.raises(InvalidInput, match="unknown field"):
        await engine.routes.set_routes([{"seq": 0, "target": "main", "prio": 1}], actor="t")
    with pytest.raises(InvalidInput):
        await engine.routes.set_routes({"seq": 0}, actor="t")
    assert await table(engine) == before
    views = await engine.routes.set_routes(
        [{"seq": 0, "match": "platform=telegram", "target": "other"}, {"seq": 9, "target": "main"}],
        actor="t",
    )
    assert [(v.seq, v.match, v.target) for v in views] == [
        (0, "platform=telegram", "other"),
        (9, "", "main"),
    ]
    decision = (await engine.ingest.ingest(inbound("telegram:group/5", "hi"))).decision
    assert decision.folder == "other"
    async with engine.store.read() as tx:
        (entry, *_) = await tx.list_route_audit(limit=1)
    assert entry.action == "set" and len(entry.before) == 9 and len(entry.after) == 2


async def test_set_routes_scoped_to_a_folder(engine: Services) -> None:
    outside = [r for r in await table(engine) if not r[3].startswith("acme")]
    views = await engine.routes.set_routes(
        [{"seq": 1, "match": "platform=hook", "target": "acme/eng"}], actor="t", within="acme"
    )
    assert [r for r in await table(engine) if not r[3].startswith("acme")] == outside
    assert [(v.match, v.target) for v in views if v.target.startswith("acme")] == [
        ("platform=hook", "acme/eng")
    ]
    with pytest.raises(Forbidden, match="outside acme"):
        await engine.routes.set_routes([{"seq": 1, "target": "main"}], actor="t", within="acme")


async def test_route_writes_take_effect_on_the_next_message(engine: Services) -> None:
    first = await engine.ingest.ingest(inbound("slack:T1/channel/C1", "hi", sender="slack:user/U1"))
    assert first.decision.folder == "atlas"
    await engine.routes.add_route(0, "platform=slack", "other", actor="t")
    second = await engine.ingest.ingest(
        inbound("slack:T1/channel/C1", "hi", sender="slack:user/U1")
    )
    assert second.decision.folder == "other"


async def test_another_process_writes_are_noticed_within_one_message(
    tmp_path: Path, clock: FakeClock
) -> None:
    server = await open_services(tmp_path, clock)
    try:
        await seed_spec_table(server)
        assert (
            await server.ingest.ingest(inbound("slack:T1/channel/C1", "a", sender="slack:user/U1"))
        ).decision.folder == "atlas"
        # A second, independent connection stack — as the CLI in another process has.
        cli = await open_services(tmp_path, clock)
        try:
            await cli.folders.add_folder("slackbot", FolderSpec(), actor="cli")
            await cli.routes.add_route(0, "platform=slack", "slackbot", actor="cli")
        finally:
            await cli.close()
        after = await server.ingest.ingest(
            inbound("slack:T1/channel/C1", "b", sender="slack:user/U1")
        )
        assert after.decision.folder == "slackbot"
        # And a real separate process, through the command line.
        data = tmp_path
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "postroom",
            "--data",
            str(data),
            "routes",
            "add",
            "--seq",
            "-1",
            "--match",
            "chat_jid=slack:T1/channel/C1",
            "--target",
            "other",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        last = await server.ingest.ingest(
            inbound("slack:T1/channel/C1", "c", sender="slack:user/U1")
        )
        assert last.decision.folder == "other"
        assert last.decision.route_id == int(out.decode().strip())
    finally:
        await server.close()


async def test_folders_add_creates_parents_and_agent_file(engine: Services, tmp_path: Path) -> None:
    folder = await engine.folders.add_folder(
        "team/eng/oncall",
        FolderSpec(
            persona="You page people.",
            provider="openai",
            engagement_ttl="10m",
            session="shared",
            mirror=("telegram:user/42",),
        ),
        actor="t",
    )
    assert folder.engagement_ttl_s == 600
    paths = {f.path for f in await engine.folders.list_folders()}
    assert {"team", "team/eng", "team/eng/oncall"} <= paths
    text = (tmp_path / "folders" / "team" / "eng" / "oncall" / "AGENT.md").read_text()
    assert text.startswith("+++\n") and 'provider = "openai"' in text
    assert 'engagement_ttl = "10m"' in text and text.rstrip().endswith("You page people.")
    assert (tmp_path / "folders" / "team" / "AGENT.md").exists()


async def test_folders_add_reads_an_existing_agent_file(engine: Services, tmp_path: Path) -> None:
    directory = tmp_path / "folders" / "writer"
    directory.mkdir(parents=True)
    (directory / "AGENT.md").write_text('+++\nmodel = "m-1"\nsession = "shared"\n+++\nYou write.\n')
    folder = await engine.folders.add_folder("writer", FolderSpec(model="m-2"), actor="t")
    assert (folder.model, folder.session and folder.session.value, folder.persona) == (
        "m-2",
        "shared",
        "You write.",
    )


@pytest.mark.parametrize(
    ("path", "spec", "error", "fragment"),
    [
        ("atlas", FolderSpec(), Conflict, "already exists"),
        ("a/../b", FolderSpec(), InvalidInput, "'..'"),
        ("A", FolderSpec(), InvalidInput, "uppercase"),
        ("x y", FolderSpec(), InvalidInput, "' '"),
        ("ok", FolderSpec(session="both"), InvalidInput, "session must be one of"),
        ("ok", FolderSpec(engagement_ttl="soon"), InvalidInput, "engagement_ttl"),
        ("ok", FolderSpec(mirror=("nope",)), InvalidInput, "mirror chat"),
    ],
)
async def test_bad_folder_writes(
    engine: Services, path: str, spec: FolderSpec, error: type[Exception], fragment: str
) -> None:
    before = await engine.folders.list_folders()
    with pytest.raises(error) as caught:
        await engine.folders.add_folder(path, spec, actor="t")
    assert fragment in str(caught.value)
    assert await engine.folders.list_folders() == before


async def test_folders_rm_guards_and_archives(engine: Services, tmp_path: Path) -> None:
    with pytest.raises(Conflict, match=r"route\(s\) 2 \(targets it\), 9 \(targets it\)"):
        await engine.folders.remove_folder("atlas", actor="t")
    await engine.routes.add_route(50, "platform=x", "other/{sender}", actor="t")
    with pytest.raises(Conflict, match="template parent"):
        await engine.folders.remove_folder("other", actor="t")
    with pytest.raises(Conflict, match="sub-folder"):
        await engine.folders.remove_folder("acme", actor="t")
    with pytest.raises(NotFound):
        await engine.folders.remove_folder("nope", actor="t")
    await engine.folders.add_folder("spare", FolderSpec(persona="keep me"), actor="t")
    await engine.folders.remove_folder("spare", actor="t")
    assert "spare" not in {f.path for f in await engine.folders.list_folders()}
    assert not (tmp_path / "folders" / "spare").exists()
    (archived,) = (tmp_path / "removed").iterdir()
    assert (archived / "AGENT.md").read_text().strip() == "keep me"


async def test_removed_folder_cannot_be_targeted_and_routing_notices(engine: Services) -> None:
    await engine.folders.add_folder("temp", FolderSpec(), actor="t")
    rid = await engine.routes.add_route(-50, "platform=slack", "temp", actor="t")
    fired = await engine.ingest.ingest(inbound("slack:T/channel/C", "x", sender="slack:user/U"))
    assert (fired.decision.action, fired.decision.folder) == (Action.FIRE, "temp")
    await engine.routes.delete_route(rid, actor="t")
    await engine.folders.remove_folder("temp", actor="t")
    with pytest.raises(InvalidInput, match="temp does not exist"):
        await engine.routes.add_route(0, "", "temp", actor="t")
