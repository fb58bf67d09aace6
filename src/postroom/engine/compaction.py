"""Compaction (PIPELINE §6): when a conversation's un-compacted rows pass ``threshold`` of the
model's context window, before the next run: (1) a memory flush — the model extracts durable
facts from the older rows as ``[MEMORY:*]`` lines, which are saved; (2) a summary of all but the
last ``keep_last`` rows, stored in ``compactions`` and injected into later system prompts. The
summarized rows are marked compacted, never deleted: the history stays faithful.

The decision reads the conversation's running ``token_estimate``: an upper bound of the count
(each row adds its UTF-8 bytes once, as it joins the conversation; see ``token_bound``), so a
turn's cost does not grow with its history and no tokenizer loads for a conversation far from
its threshold. Only when the bound passes the threshold — or the total is unknown — are the rows
read and counted exactly, and the total is set to that count; rows stored after it add their
bounds again. The decision is therefore the exact count's, at exactly the same turn.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

from postroom.core.context import ContextMessage
from postroom.core.folders import FolderSettings
from postroom.core.messages import MessageType, StoredMessage
from postroom.core.tags import process_tags
from postroom.engine.clock import Clock
from postroom.engine.memory import MemoryService
from postroom.llm.base import ModelRequest, ModelResponse
from postroom.llm.models import ModelTable
from postroom.llm.tokenizer import TokenCounter
from postroom.store.protocol import Store
from postroom.store.records import ConversationRecord, JobRecord, RunRecord

__all__ = ["CompactionSettings", "Compactor", "transcript"]

log = structlog.get_logger(__name__)

Complete = Callable[[ModelRequest, FolderSettings], Awaitable[ModelResponse]]

FLUSH_PROMPT = (
    "You are about to lose the older part of this conversation from your context. Extract the "
    "durable facts worth keeping — decisions, preferences, names, commitments, open tasks — as "
    "lines of the form [MEMORY:<category>] <fact>, with categories sticky (always relevant), "
    "user_preference, project_context or learned_pattern. Output only those lines."
)
SUMMARY_PROMPT = (
    "Summarize the conversation below so that it can stand in for it from now on: who said "
    "what, what was decided, what is still open. Be concise and factual. Output only the summary."
)


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    threshold: float = 0.75
    keep_last: int = 10


def transcript(rows: Sequence[StoredMessage]) -> str:
    """The rows as plain lines, for the flush and summary calls."""
    lines: list[str] = []
    for row in rows:
        if row.message_type is MessageType.USER:
            text = row.metadata.get("routed_content") or row.content
            lines.append(f"[{row.sender_name or row.sender}] {text}")
        elif row.message_type is MessageType.ASSISTANT:
            lines.append(f"[assistant] {row.content}")
        elif row.message_type is MessageType.SYSTEM:
            lines.append(f"[system] {row.content}")
        else:
            lines.append(f"[command output] {row.content}")
    return "\n".join(lines)


class Compactor:
    def __init__(
        self,
        *,
        store: Store,
        complete: Complete,
        memory: MemoryService,
        tokens: TokenCounter,
        models: ModelTable,
        clock: Clock,
        settings: CompactionSettings,
    ) -> None:
        self._store = store
        self._complete = complete
        self._memory = memory
        self._tokens = tokens
        self._models = models
        self._clock = clock
        self._settings = settings

    def window_for(self, settings: FolderSettings) -> int:
        return self._models.info(settings.model or settings.provider).context_window

    async def compact(
        self, job: JobRecord, settings: FolderSettings, conversation: ConversationRecord | None
    ) -> bool:
        """Compact *job*'s conversation if its un-compacted rows are over the threshold; True
        if it was."""
        limit = self._settings.threshold * self.window_for(settings)
        if conversation is not None and 0 <= conversation.token_estimate <= limit:
            return False  # the common case: no row read, none counted
        async with self._store.read() as tx:
            current = await tx.get_conversation(job.conversation_id)
            rows = await tx.uncompacted_messages(job.conversation_id)
        counts = [self._tokens.count(row.content) for row in rows]
        total = sum(counts)
        seen = current.token_estimate if current is not None else 0
        if current is not None and seen != total:
            async with self._store.write() as tx:
                await tx.correct_token_estimate(job.conversation_id, seen=seen, actual=total)
        keep = self._settings.keep_last
        if len(rows) <= keep or total <= limit:
            return False
        older = rows[:-keep] if keep else rows
        text = transcript(older)
        log.info(
            "compaction.start",
            job_id=job.id,
            conversation_id=job.conversation_id,
            tokens=total,
            limit=int(limit),
            rows=len(older),
        )
        flush = await self._call(job, settings, FLUSH_PROMPT, text, purpose="memory_flush")
        saved = 0
        found = process_tags(flush.text, folder=job.folder, role="agent")
        now = self._clock()
        async with self._store.write() as tx:
            for memory in found.memories:
                saved += await self._memory.remember(
                    tx, job.folder, memory.category, memory.fact, now=now
                )
        summary = await self._call(job, settings, SUMMARY_PROMPT, text, purpose="summary")
        summary_text = summary.text.strip() or text
        old_tokens = sum(counts[: len(older)])
        async with self._store.write() as tx:
            await tx.insert_compaction(
                job.conversation_id,
                summary=summary_text,
                up_to_seq=older[-1].seq,
                messages_before=len(rows),
                messages_after=len(rows) - len(older),
                tokens_saved=max(old_tokens - self._tokens.count(summary_text), 0),
                now=self._clock(),
                tokens_compacted=old_tokens,
            )
        log.info("compaction.done", job_id=job.id, facts_saved=saved, rows_compacted=len(older))
        return True

    async def _call(
        self, job: JobRecord, settings: FolderSettings, system: str, text: str, *, purpose: str
    ) -> ModelResponse:
        request = ModelRequest(
            system=system, messages=[ContextMessage("user", text)], model=settings.model
        )
        started = self._clock()
        begun = time.monotonic()
        response = await self._complete(request, settings)
        record = request.to_record()
        async with self._store.write() as tx:
            await tx.insert_run(
                RunRecord(
                    job_id=job.id,
                    folder=job.folder,
                    conversation_id=job.conversation_id,
                    provider=settings.provider,
                    model=response.model or settings.model,
                    account=response.account,
                    system=record["system"],
                    messages=record["messages"],
                    output_raw=response.raw,
                    output=response.text,
                    usage=dict(response.usage),
                    cost=response.cost
                    if response.cost is not None
                    else self._models.cost_of(response.model or settings.model, response.usage),
                    duration_ms=int((time.monotonic() - begun) * 1000),
                    outcome="ok",
                    started_at=started,
                    finished_at=self._clock(),
                    purpose=purpose,
                )
            )
        return response
