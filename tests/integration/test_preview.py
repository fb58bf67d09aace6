"""Route previews (ROUTING §6) over a real SQLite store: recent messages and drops resolved
against the current and a proposed table, with the chats' state as it is now."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postroom.core import Forbidden, InvalidInput, RouteIndex, Trigger
from postroom.engine import Services, preview_traffic

from fakeclock import FakeClock
from support import SPEC_ROWS, inbound, open_services, seed_spec_table


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    services = await open_services(tmp_path, clock)
    await seed_spec_table(services)
    try:
        yield services
    finally:
        await services.close()


def spec_rows(**replaced: tuple[int, str, str]) -> list[dict[str, Any]]:
    """ROUTING §7's table, with rows (by 1-based id) replaced or removed (``None``)."""
    rows = []
    for number, (seq, match, target) in enumerate(SPEC_ROWS, start=1):
        row = replaced.get(f"row{number}", (seq, match, target))
        if row is not None:
            rows.append({"seq": row[0], "match": row[1], "target": row[2]})
    return rows


def changes(preview: Any) -> dict[str, tuple[Any, Any]]:
    return {
        m.id: (
            (m.before.action.value, m.before.folder, m.before.topic),
            (m.after.action.value, m.after.folder, m.after.topic),
        )
        for m in preview.messages
    }


async def test_sticky_state_is_taken_as_it_is_now(engine: Services) -> None:
    chat = "telegram:group/5"
    await engine.ingest.ingest(inbound(chat, "@atlas/social", id="sticky"))
    await engine.ingest.ingest(inbound(chat, "what's new", id="plain"))
    await engine.ingest.ingest(inbound("discord:dm/9", "hi", id="dm", sender="discord:user/1"))
    preview = await engine.routes.preview_routes(spec_rows(row2=(0, "platform=telegram", "other")))
    # The sticky group atlas/social is not under the new home folder, so it no longer applies;
    # the sticky command itself stays a (refused) command; the DM is untouched.
    assert changes(preview) == {"plain": (("fire", "atlas/social", ""), ("fire", "other", ""))}
    assert preview.examined == 3


async def test_a_pinned_topic_is_told_from_the_platforms_own_thread(engine: Services) -> None:
    await engine.ingest.ingest(
        inbound("hook:acme/eng/github", "deployed", id="hook", sender="hook:github", topic="T1")
    )
    stored = await engine.history.messages(chat_jid="hook:acme/eng/github")
    assert stored[0].topic == "deploy" and stored[0].metadata["native_topic"] == "t1"
    preview = await engine.routes.preview_routes(
        spec_rows(row8=(40, "chat_jid=hook:acme/eng/github", "acme/eng"))
    )
    assert changes(preview) == {
        "hook": (("fire", "acme/eng", "deploy"), ("fire", "acme/eng", "t1"))
    }


async def test_drops_are_resolved_with_empty_text_and_shown_without_content(
    engine: Services,
) -> None:
    await engine.routes.delete_route(9, actor="t")
    await engine.ingest.ingest(inbound("matrix:room/1", "secret words", id="lost"))
    await engine.ingest.ingest(inbound("slack:T1/channel/C1", "y" * 500, id="long"))
    drops = await engine.history.drops()
    assert {d.id for d in drops} == {"lost", "long"}
    preview = await engine.routes.preview_routes(spec_rows())
    assert changes(preview) == {
        "lost": (("ignore", None, None), ("fire", "atlas", "")),
        "long": (("ignore", None, None), ("fire", "atlas", "")),
    }
    assert all(m.content is None for m in preview.messages)
    await engine.routes.add_route(9999, "", "atlas", actor="t")
    await engine.ingest.ingest(inbound("slack:T1/channel/C1", "z" * 500, id="kept"))
    dry = await engine.routes.preview_delete(10)
    kept = next(m for m in dry.messages if m.id == "kept")
    assert kept.content == "z" * 200
    assert kept.to_dict()["after"] == {
        "action": "ignore",
        "folder": None,
        "topic": None,
        "reason": "no route matched slack:T1/channel/C1",
    }


async def test_the_last_limit_messages_are_examined(engine: Services) -> None:
    for n in range(5):
        await engine.ingest.ingest(inbound("slack:T1/channel/C1", f"m{n}", id=f"m{n}"))
    proposed = spec_rows(row9=(9999, "", "other"))
    assert (await engine.routes.preview_routes(proposed)).examined == 5
    last = await engine.routes.preview_routes(proposed, limit=2)
    assert [m.id for m in last.messages] == ["m3", "m4"]
    for wrong in (0, 5001, "10", True):
        with pytest.raises(InvalidInput, match="limit"):
            await engine.routes.preview_routes(proposed, limit=wrong)


async def test_a_confined_preview_lists_only_what_touches_its_tree(engine: Services) -> None:
    await engine.ingest.ingest(inbound("slack:T1/channel/C1", "to atlas", id="atlas-bound"))
    await engine.ingest.ingest(inbound("reddit:subreddit/x", "post", id="posted", verb="post"))
    # Moving reddit posts from atlas/posts to atlas/content is atlas's business, not acme's.
    with pytest.raises(Forbidden):
        await engine.routes.preview_add(-1, "platform=reddit", "atlas/content", within="acme")
    grab = await engine.routes.preview_add(-1, "platform=slack", "acme/eng", within="acme")
    assert changes(grab) == {"atlas-bound": (("fire", "atlas", ""), ("fire", "acme/eng", ""))}
    mine = await engine.routes.preview_routes([], within="atlas")
    assert "posted" in changes(mine)
    assert "posted" not in changes(await engine.routes.preview_routes([], within="acme"))


async def test_only_the_visible_changes_are_listed_but_all_are_examined(
    engine: Services, clock: FakeClock
) -> None:
    await engine.ingest.ingest(inbound("slack:T1/channel/C1", "to atlas", id="atlas-bound"))
    await engine.ingest.ingest(
        inbound("hook:acme/eng/github", "deployed", id="hook", sender="hook:github")
    )
    async with engine.store.read() as tx:
        snapshot = await engine.catalog.current(tx)
        preview = await preview_traffic(
            tx,
            current=snapshot.index,
            proposed=RouteIndex([]),
            folders=snapshot.paths,
            trigger=Trigger(),
            now=clock(),
            limit=10,
            visible=lambda folder: folder == "acme/eng",
        )
    assert preview.examined == 2
    assert [m.id for m in preview.messages] == ["hook"]
