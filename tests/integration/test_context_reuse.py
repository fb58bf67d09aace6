"""What a turn reuses from the turns before it, over a real SQLite file: decoded context rows and
the stored parts of rendered messages are remembered between turns, and a request built or
recorded with them warm is exactly the one built or recorded from nothing — after edits,
compaction and new rows (MESSAGES §4)."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from test_token_estimates import CHAT, job, main, make_compactor

from postroom.core.context import ContextMessage
from postroom.core.folders import FolderSettings
from postroom.core.messages import MessageType
from postroom.engine import Services
from postroom.engine.context_builder import ContextBuilder, ContextSettings, PreparedTurn
from postroom.llm.base import ModelRequest
from postroom.store.records import NewMessage, RunRecord
from postroom.store.sqlite import SqliteStore
from postroom.store.sqlite.messages import _decoded
from postroom.store.sqlite.runs import _text_part

from fakeclock import FakeClock
from support import open_services

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def row(conversation: int, n: int, **extra: Any) -> NewMessage:
    kind = MessageType.USER if n % 2 == 0 else MessageType.ASSISTANT
    return NewMessage(
        id=f"m{n}-{uuid.uuid4().hex[:6]}",
        chat_jid=CHAT,
        sender=f"telegram:user/{n % 3}",
        content=f"row {n}: naïve tokenization 🙂",
        timestamp=NOW,
        message_type=kind,
        conversation_id=conversation,
        routed_to="main",
        metadata={"n": n, "mentioned": n % 4 == 0},
        **extra,
    )


def forget() -> None:
    _decoded.cache_clear()
    _text_part.cache_clear()


async def both_ways(builder: ContextBuilder, folder: FolderSettings, conversation: int) -> None:
    """The request built with the memo warm (built twice: the second reuses every row) equals
    the one built with it empty."""
    await builder.build(job(conversation), folder)
    warm = await builder.build(job(conversation), folder)
    assert _decoded.cache_info().hits > 0
    forget()
    cold = await builder.build(job(conversation), folder)
    assert same(warm, cold)


def same(a: PreparedTurn, b: PreparedTurn) -> bool:
    # The system prompt's notices carry the time; the clock is fake and does not move.
    return a.request == b.request and a.answer_chat == b.answer_chat and a.senders == b.senders


async def test_a_warm_build_is_the_build_from_nothing_after_edits_compaction_and_new_rows(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    services = await open_services(tmp_path, clock)
    try:
        folder = await main(services)
        builder = ContextBuilder(
            store=services.store,
            catalog=services.catalog,
            clock=clock,
            settings=ContextSettings(max_messages=20),
            compactor=make_compactor(services, clock, calls=[], window=400),
        )
        async with services.store.write() as tx:
            conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
            for n in range(12):
                await tx.insert_message(row(conversation, n))
        await both_ways(builder, folder, conversation)

        # An edit (a transcript replacing a voice note's placeholder): the edited row is read
        # as it is now, not as it was remembered.
        async with services.store.read() as tx:
            rows = await tx.list_messages(chat_jid=CHAT, limit=100)
        async with services.store.write() as tx:
            await tx.update_message(
                rows[3].id, CHAT, content="edited: a transcript", metadata={"voice": "yes"}
            )
        await builder.build(job(conversation), folder)
        warm = await builder.build(job(conversation), folder)
        assert "edited: a transcript" in [m.content for m in warm.request.messages]
        await both_ways(builder, folder, conversation)

        # Compaction: past the threshold of a 400-token window, older rows are marked.
        async with services.store.write() as tx:
            for n in range(12, 60):
                await tx.insert_message(row(conversation, n))
        await both_ways(builder, folder, conversation)
        async with services.store.read() as tx:
            assert await tx.latest_compaction(conversation) is not None

        # New rows after the compaction.
        async with services.store.write() as tx:
            for n in range(60, 64):
                await tx.insert_message(row(conversation, n))
        await both_ways(builder, folder, conversation)
    finally:
        await services.store.close()


async def test_a_run_recorded_with_remembered_parts_reads_back_as_it_was_sent(
    tmp_path: Path,
) -> None:
    """Rendered messages whose stored body and hash are remembered are stored once, read back
    field for field, and point at the same parts as when nothing was remembered; messages with
    lists and numbers (attachments, exit codes) beside them too."""
    services = await open_services(tmp_path, FakeClock())
    try:
        messages = [
            ContextMessage("user", "hello"),
            ContextMessage("assistant", "hi there"),
            ContextMessage("tool_result", "ok", exit_code=0),
            ContextMessage("tool", "failed", tool_call_id="c1", tool_name="t", is_error=True),
            ContextMessage("user", "hello"),
        ]
        record = ModelRequest(system="You are Main.", messages=messages).to_record()
        run = RunRecord(
            job_id=1,
            folder="main",
            provider="echo",
            system=record["system"],
            messages=record["messages"],
            outcome="ok",
            started_at=NOW,
        )
        forget()
        cold = await record_run(services, run)
        warm = await record_run(services, run)
        assert _text_part.cache_info().hits == 4  # "hello" again, then all three plain ones
        forget()
        again = await record_run(services, run)
        assert isinstance(services.store, SqliteStore)
        database = sqlite3.connect(services.store.path)
        try:
            (count,) = database.execute("SELECT COUNT(*) FROM run_parts").fetchone()
            stored_parts = [
                database.execute("SELECT parts FROM runs WHERE id = ?", (i,)).fetchone()[0]
                for i in (cold, warm, again)
            ]
        finally:
            database.close()
        assert count == 6  # the system prompt, four distinct messages, the tool list
        assert stored_parts[0] == stored_parts[1] == stored_parts[2]
        for run_id in (cold, warm, again):
            async with services.store.read() as tx:
                stored = await tx.get_run(run_id)
            assert stored is not None and stored.messages == record["messages"]
    finally:
        await services.store.close()


async def record_run(services: Services, run: RunRecord) -> int:
    async with services.store.write() as tx:
        return await tx.insert_run(run)
