"""Building a turn's request when the run starts (MESSAGES §4), never at enqueue time.

Observed messages of the turn's chats join the conversation in the transaction that claims
the turn; everything the request is made of is then read in one read transaction (read again
only if the conversation had grown past the model's window and was compacted first); then the
system prompt is assembled — persona, memory (sticky facts, then the most relevant), state, the
compaction summary, and the system notices last — and the history is arranged from the turn's
point of view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from postroom.core.attachments import AttachmentPolicy, Blob
from postroom.core.context import (
    ContextMessage,
    arrange_history,
    attachment_hashes,
    bridge_summary,
    format_messages_for_sdk,
    render_system_prompt,
    system_notices,
)
from postroom.core.folders import FolderSettings
from postroom.core.messages import MessageType, StoredMessage
from postroom.core.skills import ChosenSkill, render_skill
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.compaction import Compactor
from postroom.engine.enrich import Enricher
from postroom.engine.memory import MemoryService, PromptMemory
from postroom.engine.skills import SkillService
from postroom.llm.base import ModelRequest
from postroom.llm.models import ModelTable
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import (
    CompactionRecord,
    ConversationRecord,
    JobKind,
    JobRecord,
    JobStatus,
)

__all__ = ["ContextBuilder", "ContextSettings", "PreparedTurn"]

#: The attachment policy of a turn that never read its folder's model (a placeholder).
NO_IMAGES = AttachmentPolicy(vision=False)

#: How many of a chat's newest user rows say whether more than one person speaks there.
SENDER_WINDOW = 1000


@dataclass(frozen=True, slots=True)
class ContextSettings:
    max_messages: int = 200
    max_images: int = 4
    max_file_chars: int = 20000
    observe_window_messages: int = 20
    observe_window_chars: int = 8000


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    request: ModelRequest
    #: The chat the answer is stored in (the conversation's; ``task:<id>`` for a task).
    answer_chat: str
    #: Who wrote the user messages of the history (messages added mid-run are labelled alike).
    senders: frozenset[str] = frozenset()
    #: What the model is sent of attachments (messages added mid-run are sent alike).
    policy: AttachmentPolicy = NO_IMAGES


class ContextBuilder:
    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        settings: ContextSettings,
        memory: MemoryService | None = None,
        compactor: Compactor | None = None,
        enricher: Enricher | None = None,
        skills: SkillService | None = None,
        models: ModelTable | None = None,
    ) -> None:
        self._enricher = enricher
        self._skills = skills
        self._models = models or ModelTable()
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._settings = settings
        self._memory = memory
        self._compactor = compactor

    async def attach_observed(self, tx: StoreTx, job: JobRecord, chats: Sequence[str]) -> None:
        """MESSAGES §4: what was observed in the turn's chats joins its conversation as the run
        starts — called in the transaction that claims the turn."""
        if job.kind is not JobKind.TURN:
            return
        context = self._settings
        for chat_jid in chats:
            await tx.attach_observed(
                job.folder,
                chat_jid,
                job.conversation_id,
                max_messages=context.observe_window_messages,
                max_chars=context.observe_window_chars,
            )

    async def build(self, job: JobRecord, settings: FolderSettings) -> PreparedTurn:
        if self._enricher is not None:
            await self._enricher.enrich(job)
        policy = self._policy(settings)
        read = await self._read(job, policy)
        if self._compactor is not None and await self._compactor.compact(
            job, settings, read.conversation
        ):
            read = await self._read(job, policy)
        history, compaction, memory = read.history, read.compaction, read.memory
        notices = system_notices(
            now=self._clock(), chat_jid=job.chat_jid, folder=job.folder, topic=job.topic
        )
        messages = bridge_summary(
            format_messages_for_sdk(
                history,
                multi_party=read.multi_party or None,
                blobs=read.blobs,
                policy=policy,
            ),
            summarized=compaction is not None,
        )
        chosen: list[ChosenSkill] = []
        if self._skills is not None:
            chosen = await self._skills.for_run(job.folder, _new_input(messages))
        system = render_system_prompt(
            settings.persona,
            memory=memory.facts if memory else (),
            state=memory.state if memory else (),
            summary=compaction.summary if compaction else "",
            skills=[render_skill(c.skill) for c in chosen],
            notices=notices,
        )
        conversation_chat = read.conversation.chat_jid if read.conversation else job.chat_jid
        answer_chat = conversation_chat or (job.messages[-1][1] if job.messages else job.chat_jid)
        request = ModelRequest(
            system=system,
            messages=messages,
            model=settings.model,
            conversation_id=job.conversation_id,
            skills=[c.to_record() for c in chosen],
        )
        senders = frozenset(m.sender for m in history if m.message_type is MessageType.USER)
        return PreparedTurn(request, answer_chat, senders, policy)

    def _policy(self, settings: FolderSettings) -> AttachmentPolicy:
        """What this folder's model is sent of the attachments (MESSAGES §4)."""
        return AttachmentPolicy(
            vision=self._models.info(settings.model or settings.provider).vision,
            max_images=self._settings.max_images,
            max_file_chars=self._settings.max_file_chars,
        )

    async def steered(
        self,
        job: JobRecord,
        refs: Sequence[tuple[str, str]],
        senders: frozenset[str],
        policy: AttachmentPolicy | None = None,
    ) -> list[ContextMessage]:
        """Messages that joined a running turn (``busy_policy = "steer"``), rendered as its
        history renders them: voice notes transcribed first, senders named when the
        conversation has several."""
        if self._enricher is not None:
            await self._enricher.enrich(replace(job, messages=tuple(refs)))
        policy = policy or NO_IMAGES
        async with self._store.read() as tx:
            rows = [await tx.get_message(message_id, chat) for message_id, chat in refs]
            found = [row for row in rows if row is not None]
            blobs = await tx.get_blobs(attachment_hashes(found, policy))
        everyone = senders | {m.sender for m in found if m.message_type is MessageType.USER}
        return format_messages_for_sdk(
            found, multi_party=len(everyone) > 1, blobs=blobs, policy=policy
        )

    async def _read(self, job: JobRecord, policy: AttachmentPolicy) -> _Read:
        """Everything the request is made of, in one read transaction."""
        async with self._store.read() as tx:
            conversation = await tx.get_conversation(job.conversation_id)
            # Only the rows the request will hold, newest first through the conversation's
            # index: the compaction decision needs none of them (it reads a running total).
            rows = await tx.conversation_messages(
                job.conversation_id, limit=self._settings.max_messages
            )
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
                stopped={
                    row.job_id
                    for row in rows
                    if row.job_id is not None and row.job_status == JobStatus.CANCELLED.value
                },
            )
            # MESSAGES §5: in a chat where more than one person speaks, every user row is
            # named — also when the rows of this context happen to hold only one of them.
            multi_party = await tx.several_senders(job.chat_jid, within=SENDER_WINDOW)
            blobs = await tx.get_blobs(attachment_hashes(history, policy))
            memory = None
            if self._memory is not None:
                query = " ".join(
                    m.content for m in history[-5:] if m.message_type is MessageType.USER
                )
                memory = await self._memory.for_prompt(tx, job.folder, query)
        return _Read(conversation, history, compaction, memory, multi_party, blobs)


def _new_input(messages: Sequence[ContextMessage]) -> str:
    """The turn's new messages (after the last answer): what its skills are chosen by."""
    start = 0
    for index, message in enumerate(messages):
        if message.role == "assistant":
            start = index + 1
    return "\n".join(m.content for m in messages[start:])


@dataclass(frozen=True, slots=True)
class _Read:
    conversation: ConversationRecord | None
    history: list[StoredMessage]
    compaction: CompactionRecord | None
    memory: PromptMemory | None
    multi_party: bool
    blobs: dict[str, Blob]
