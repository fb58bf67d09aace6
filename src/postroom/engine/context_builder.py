"""Building a turn's request when the run starts (MESSAGES §4), never at enqueue time.

Observed messages of the turn's chats join the conversation; the conversation is compacted
first if it grew past the model's window; then the system prompt is assembled — persona,
memory (sticky facts, then the most relevant), state, the compaction summary, and the system
notices last — and the history is arranged from the turn's point of view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from postroom.core.context import (
    arrange_history,
    bridge_summary,
    format_messages_for_sdk,
    render_system_prompt,
    system_notices,
)
from postroom.core.folders import FolderSettings
from postroom.core.messages import MessageType
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.compaction import Compactor
from postroom.engine.enrich import Enricher
from postroom.engine.memory import MemoryService
from postroom.engine.persona import PersonaSource
from postroom.llm.base import ModelRequest
from postroom.store.protocol import Store
from postroom.store.records import JobKind, JobRecord

__all__ = ["ContextBuilder", "ContextSettings", "PreparedTurn"]


@dataclass(frozen=True, slots=True)
class ContextSettings:
    max_messages: int = 200
    observe_window_messages: int = 20
    observe_window_chars: int = 8000


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    request: ModelRequest
    #: The chat the answer is stored in (the conversation's; ``task:<id>`` for a task).
    answer_chat: str


class ContextBuilder:
    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        settings: ContextSettings,
        personas: PersonaSource | None = None,
        memory: MemoryService | None = None,
        compactor: Compactor | None = None,
        enricher: Enricher | None = None,
    ) -> None:
        self._enricher = enricher
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._settings = settings
        self._personas = personas
        self._memory = memory
        self._compactor = compactor

    async def build(
        self, job: JobRecord, settings: FolderSettings, chats: Sequence[str]
    ) -> PreparedTurn:
        context = self._settings
        if self._enricher is not None:
            await self._enricher.enrich(job)
        async with self._store.write() as tx:
            conversation = await tx.get_conversation(job.conversation_id)
            conversation_chat = conversation.chat_jid if conversation else job.chat_jid
            if job.kind is JobKind.TURN:
                # MESSAGES §4: what was observed in these chats joins the conversation now.
                for chat_jid in chats:
                    await tx.attach_observed(
                        job.folder,
                        chat_jid,
                        job.conversation_id,
                        max_messages=context.observe_window_messages,
                        max_chars=context.observe_window_chars,
                    )
        if self._compactor is not None:
            await self._compactor.maybe_compact(job, settings)
        async with self._store.read() as tx:
            rows = await tx.conversation_messages(job.conversation_id, limit=context.max_messages)
            compaction = await tx.latest_compaction(job.conversation_id)
            history = arrange_history(
                [row.message for row in rows],
                turn=job.id,
                answered_by={
                    (row.message.id, row.message.chat_jid): row.job_id
                    for row in rows
                    if row.job_id is not None
                },
                pending={
                    row.job_id
                    for row in rows
                    if row.job_id is not None and row.job_status in ("queued", "running")
                },
            )
            memory = None
            if self._memory is not None:
                query = " ".join(
                    m.content for m in history[-5:] if m.message_type is MessageType.USER
                )
                memory = await self._memory.for_prompt(tx, job.folder, query)
        persona = settings.persona
        if self._personas is not None:
            persona = self._personas.persona(job.folder, self._catalog.snapshot.folders, persona)
        notices = system_notices(
            now=self._clock(), chat_jid=job.chat_jid, folder=job.folder, topic=job.topic
        )
        system = render_system_prompt(
            persona,
            memory=memory.facts if memory else (),
            state=memory.state if memory else (),
            summary=compaction.summary if compaction else "",
            notices=notices,
        )
        answer_chat = conversation_chat or (job.messages[-1][1] if job.messages else job.chat_jid)
        request = ModelRequest(
            system=system,
            messages=bridge_summary(
                format_messages_for_sdk(history), summarized=compaction is not None
            ),
            model=settings.model,
        )
        return PreparedTurn(request, answer_chat)
