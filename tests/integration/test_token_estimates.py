"""Running token estimates (PIPELINE §6) over a real SQLite file: each row adds an upper bound
of its tokens once, as it joins its conversation, so the conversation's total is never below
what counting every un-compacted context row would give, and equals it right after compaction
counts; so compaction triggers at the same point as when every turn counted them, and a run's
context is the one MESSAGES §4 describes however long the conversation is.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postroom.core.context import format_messages_for_sdk
from postroom.core.folders import FolderSettings
from postroom.core.messages import CONTEXT_TYPES, MessageType, StoredMessage
from postroom.engine import FolderSpec, Services
from postroom.engine.compaction import CompactionSettings, Compactor
from postroom.engine.context_builder import ContextBuilder, ContextSettings
from postroom.engine.memory import MemoryService
from postroom.llm.base import ModelRequest, ModelResponse
from postroom.llm.models import ModelInfo, ModelTable
from postroom.llm.tokenizer import TokenCounter
from postroom.store.records import JobKind, JobRecord, JobStatus, NewMessage
from postroom.store.sqlite import SqliteStore
from postroom.store.sqlite.base import token_bound

from fakeclock import FakeClock
from support import open_services

TOKENS = TokenCounter()
CHAT = "telegram:group/1"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

#: Words of varied token weight, so sums differ from any characters-per-token rule.
WORDS = st.sampled_from(["hi", "naïve", "tokenization", "🙂", "lorem", "ipsum", "x" * 17, "Ω"])
TEXT = st.lists(WORDS, max_size=12).map(" ".join)
KINDS = st.sampled_from(list(MessageType))
OPERATION = st.one_of(
    st.tuples(st.just("row"), KINDS, TEXT, st.booleans()),
    st.tuples(st.just("observed"), TEXT),
    st.tuples(st.just("attach"), st.integers(0, 5)),
    st.tuples(st.just("update"), st.integers(0, 1000), TEXT),
    st.tuples(st.just("compact"), st.integers(0, 1000)),
)


def message(conversation: int | None, kind: MessageType, text: str, **extra: Any) -> NewMessage:
    return NewMessage(
        id=uuid.uuid4().hex,
        chat_jid=CHAT,
        sender="telegram:user/1",
        content=text,
        timestamp=NOW,
        message_type=kind,
        conversation_id=conversation,
        routed_to="main",
        **extra,
    )


async def counted(store: SqliteStore, conversation: int) -> tuple[int, int]:
    """The conversation's running total, and what counting its rows gives."""
    async with store.read() as tx:
        record = await tx.get_conversation(conversation)
        rows = await tx.uncompacted_messages(conversation)
    assert record is not None
    return record.token_estimate, sum(TOKENS.count(row.content) for row in rows)


async def apply(store: SqliteStore, conversation: int, operation: tuple[Any, ...]) -> None:
    name = operation[0]
    async with store.write() as tx:
        if name == "row":
            _, kind, text, command = operation
            metadata = {"command": "/status"} if command else {}
            await tx.insert_message(message(conversation, kind, text, metadata=metadata))
        elif name == "observed":
            await tx.insert_message(message(None, MessageType.USER, operation[1], observed=True))
        elif name == "attach":
            await tx.attach_observed(
                "main", CHAT, conversation, max_messages=operation[1], max_chars=200
            )
        elif name == "update":
            rows = await tx.list_messages(chat_jid=CHAT, limit=10_000)
            if rows:
                row = rows[operation[1] % len(rows)]
                await tx.update_message(
                    row.id, row.chat_jid, content=operation[2], metadata=row.metadata
                )
        elif name == "compact":
            # As the compactor does: the older rows' counts leave the total.
            rows = await tx.uncompacted_messages(conversation)
            if rows:
                older = rows[: operation[1] % len(rows) + 1]
                await tx.insert_compaction(
                    conversation,
                    summary="summary",
                    up_to_seq=older[-1].seq,
                    messages_before=len(rows),
                    messages_after=len(rows) - len(older),
                    tokens_saved=0,
                    now=NOW,
                    tokens_compacted=sum(TOKENS.count(row.content) for row in older),
                )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(OPERATION, max_size=40), recounts=st.lists(st.booleans()))
def test_the_running_total_is_never_below_the_count_of_the_uncompacted_rows(
    operations: Sequence[tuple[Any, ...]], recounts: list[bool]
) -> None:
    """Whatever rows come, join, change or are compacted, and whenever the compactor counts
    (which sets the total to the count), the total is at or above the count."""

    async def scenario(path: Path) -> None:
        async with await SqliteStore.open(path) as store:
            async with store.write() as tx:
                conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
            for n, operation in enumerate(operations):
                await apply(store, conversation, operation)
                total, actual = await counted(store, conversation)
                assert total >= actual, operation
                if n < len(recounts) and recounts[n]:
                    async with store.write() as tx:
                        await tx.correct_token_estimate(conversation, seen=total, actual=actual)
                    assert await counted(store, conversation) == (actual, actual)

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp) / "postroom.db"))


async def test_a_conversation_from_before_the_estimates_is_counted_once(tmp_path: Path) -> None:
    """A database whose conversations carry no estimate yet: they read as unknown (-1), and
    the first compaction check counts their rows and keeps the total from then on."""
    path = tmp_path / "postroom.db"
    store = await SqliteStore.open(path)
    async with store, store.write() as tx:
        conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
        for text in ("one tokenization", "two 🙂", "three"):
            await tx.insert_message(message(conversation, MessageType.USER, text))
    db = sqlite3.connect(path)  # as an older postroom left it
    db.execute("UPDATE conversations SET token_estimate = 0")
    db.execute("DELETE FROM meta WHERE key = 'token_estimates'")
    db.commit()
    db.close()

    clock = FakeClock()
    services = await open_services(tmp_path, clock, name="postroom.db")
    try:
        store = services.store
        assert isinstance(store, SqliteStore)
        async with store.read() as tx:
            record = await tx.get_conversation(conversation)
        assert record is not None and record.token_estimate == -1
        compactor = make_compactor(services, clock, calls=[])
        assert not await compactor.compact(job(conversation), await main(services), record)
        total, actual = await counted(store, conversation)
        assert total == actual > 0
    finally:
        await services.store.close()


# --------------------------------------------------------------------------- the engine's view


def job(conversation: int) -> JobRecord:
    return JobRecord(
        id=1,
        conversation_id=conversation,
        folder="main",
        chat_jid=CHAT,
        topic="",
        kind=JobKind.TURN,
        task_id=None,
        priority=5,
        status=JobStatus.RUNNING,
        attempts=0,
        max_attempts=3,
        run_at=NOW,
        lease_until=None,
        lease_owner=None,
        lease_token=None,
        last_error=None,
        answer_id=None,
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
    )


def make_compactor(
    services: Services,
    clock: FakeClock,
    *,
    calls: list[str],
    window: int = 100_000,
    tokens: TokenCounter = TOKENS,
) -> Compactor:
    async def complete(request: ModelRequest, folder: FolderSettings) -> ModelResponse:
        calls.append(request.system[:20])
        return ModelResponse(text="a summary", raw="a summary", model="tiny-model")

    return Compactor(
        store=services.store,
        complete=complete,
        memory=MemoryService(store=services.store),
        tokens=tokens,
        models=ModelTable({"tiny-model": ModelInfo(window)}),
        clock=clock,
        settings=CompactionSettings(threshold=0.75, keep_last=4),
    )


async def main(services: Services) -> FolderSettings:
    await services.folders.add_folder(
        "main", FolderSpec(persona="You are Main.", model="tiny-model"), actor="test"
    )
    async with services.store.read() as tx:
        await services.catalog.reload(tx)
    settings = services.catalog.snapshot.settings("main", services.defaults)
    return replace(settings, model="tiny-model")


def old_rule(rows: Sequence[StoredMessage], *, window: int, keep: int = 4) -> bool:
    """Compaction's rule as it was when every turn counted every un-compacted row."""
    total = sum(TOKENS.count(row.content) for row in rows)
    return len(rows) > keep and total > 0.75 * window


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=20, max_size=60), window=st.integers(40, 400))
def test_compaction_triggers_where_counting_every_row_did(texts: list[str], window: int) -> None:
    """Turn after turn of a growing conversation, the running total decides exactly as
    counting every un-compacted row did, and the rows marked compacted are the same ones."""

    async def scenario(tmp: Path) -> None:
        clock = FakeClock()
        services = await open_services(tmp, clock)
        try:
            folder = await main(services)
            calls: list[str] = []
            compactor = make_compactor(services, clock, calls=calls, window=window)
            async with services.store.write() as tx:
                conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
            for n, text in enumerate(texts):
                kind = MessageType.USER if n % 2 == 0 else MessageType.ASSISTANT
                async with services.store.write() as tx:
                    await tx.insert_message(message(conversation, kind, text))
                async with services.store.read() as tx:
                    record = await tx.get_conversation(conversation)
                    before = await tx.uncompacted_messages(conversation)
                expected = old_rule(before, window=window)
                assert await compactor.compact(job(conversation), folder, record) is expected
                async with services.store.read() as tx:
                    after = await tx.uncompacted_messages(conversation)
                assert [r.seq for r in after] == (
                    [r.seq for r in before[-4:]] if expected else [r.seq for r in before]
                )
        finally:
            await services.store.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


@settings(max_examples=200, deadline=None)
@given(text=st.text() | TEXT)
def test_a_rows_bound_is_never_below_a_count(text: str) -> None:
    """What makes the running total an upper bound: the bytes of any text, lone surrogates
    included, are at least its tiktoken count and its four-characters-a-token fallback."""
    assert token_bound(text) >= TOKENS.count(text)
    assert token_bound(text) >= (len(text) + 3) // 4


class CountingTokens(TokenCounter):
    """The compactor's counter, remembering how many texts it counted."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def count(self, text: str) -> int:
        self.counted += 1
        return super().count(text)


@pytest.mark.usefixtures("db_engine")
async def test_nothing_is_counted_while_the_bound_is_under_the_threshold(
    tmp_path: Path,
) -> None:
    """A conversation far from its threshold never reaches the tokenizer (it does not even
    load); once the bound passes the threshold the rows are counted, and the total becomes
    their count."""
    clock = FakeClock()
    services = await open_services(tmp_path, clock)
    try:
        folder = await main(services)
        tokens = CountingTokens()
        compactor = make_compactor(services, clock, calls=[], window=1000, tokens=tokens)
        async with services.store.write() as tx:
            conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
        text = "tokenization " * 10  # 130 bytes, 20 tokens
        for _ in range(5):  # bounds: 650 of a 750 threshold
            async with services.store.write() as tx:
                await tx.insert_message(message(conversation, MessageType.USER, text))
            async with services.store.read() as tx:
                record = await tx.get_conversation(conversation)
            assert not await compactor.compact(job(conversation), folder, record)
        assert tokens.counted == 0
        async with services.store.write() as tx:
            await tx.insert_message(message(conversation, MessageType.USER, text))
        async with services.store.read() as tx:
            record = await tx.get_conversation(conversation)
        assert record is not None and record.token_estimate == 780
        assert not await compactor.compact(job(conversation), folder, record)
        assert tokens.counted == 6
        assert await counted(services.store, conversation) == (6 * TOKENS.count(text),) * 2
    finally:
        await services.store.close()


async def test_a_long_conversations_context_is_its_newest_rows_as_messages_4_says(
    tmp_path: Path,
) -> None:
    """600 rows, ``context.max_messages`` 50, commands, host and trace rows among them: the
    request holds the newest 50 context rows in order, rendered as MESSAGES §4 says."""
    clock = FakeClock()
    services = await open_services(tmp_path, clock)
    try:
        folder = await main(services)
        async with services.store.write() as tx:
            conversation = await tx.new_conversation("main", "", CHAT, now=NOW)
            for n in range(600):
                kind = [MessageType.USER, MessageType.ASSISTANT, MessageType.HOST][n % 3]
                if n % 50 == 7:
                    kind = MessageType.TRACE
                metadata = {"command": "/status"} if n % 40 == 3 else {}
                await tx.insert_message(
                    message(conversation, kind, f"row {n} tokenization", metadata=metadata)
                )
        builder = ContextBuilder(
            store=services.store,
            catalog=services.catalog,
            clock=clock,
            settings=ContextSettings(max_messages=50),
            compactor=make_compactor(services, clock, calls=[]),
        )
        prepared = await builder.build(job(conversation), folder)
        async with services.store.read() as tx:
            every = await tx.list_messages(chat_jid=CHAT, limit=10_000)
        context = [
            m for m in every if m.message_type in CONTEXT_TYPES and not m.metadata.get("command")
        ]
        expected = format_messages_for_sdk(context[-50:], multi_party=False)
        assert prepared.request.messages == expected
        assert len(expected) == 50
    finally:
        await services.store.close()
