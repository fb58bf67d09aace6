"""Slow enrichment after the acknowledgement and before the turn runs (PIPELINE §1.4).

Adapters store a voice note as ``[Voice message]`` with the audio attached (fetched within the
size cap, kept as a blob); the platform is acknowledged at once. When a turn that answers it
starts, the note is transcribed — if a transcriber is configured — and the row becomes
``[Voice]: <transcript>``: the history keeps showing exactly what the model saw.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import structlog

from postroom.core.attachments import AttachmentRef, Blob, attachment_refs
from postroom.core.errors import PostroomError
from postroom.engine.attachments import AttachmentLimits, cap_for
from postroom.engine.clock import Clock, system_clock
from postroom.store.protocol import Store
from postroom.store.records import JobRecord

__all__ = ["VOICE_PLACEHOLDER", "Enricher", "FetchAttachment", "Transcribe"]

log = structlog.get_logger(__name__)

Transcribe = Callable[[bytes, str], Awaitable[str]]
#: ``(chat_jid, url, cap_bytes)`` → the bytes, fetched by the chat's adapter, or ``None``.
FetchAttachment = Callable[[str, str, int], Awaitable[bytes | None]]
VOICE_PLACEHOLDER = "[Voice message]"
VOICE_KINDS = frozenset({"voice", "audio"})


class Enricher:
    def __init__(
        self,
        *,
        store: Store,
        transcribe: Transcribe | None,
        fetch: FetchAttachment | None = None,
        limits: AttachmentLimits | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self._store = store
        self._transcribe = transcribe
        self._fetch = fetch
        self._limits = limits or AttachmentLimits()
        self._clock = clock

    async def enrich(self, job: JobRecord) -> int:
        """Fetch the attachments an adapter left for later, then transcribe the voice notes
        this turn answers; return how many were transcribed."""
        if self._fetch is not None:
            for message_id, chat_jid in job.messages:
                await self._fetch_deferred(message_id, chat_jid)
        if self._transcribe is None or not job.messages:
            return 0
        done = 0
        for message_id, chat_jid in job.messages:
            async with self._store.read() as tx:
                message = await tx.get_message(message_id, chat_jid)
            if message is None or message.metadata.get("transcribed"):
                continue
            voice = _voice(attachment_refs(message.metadata))
            if voice is None:
                continue
            async with self._store.read() as tx:
                blob = (await tx.get_blobs([voice.sha256])).get(voice.sha256)
            if blob is None:
                continue
            try:
                text = (await self._transcribe(blob.data, voice.mime or "audio/ogg")).strip()
            except (ValueError, OSError, PostroomError) as exc:
                log.warning("enrich.transcription_failed", message_id=message_id, error=str(exc))
                continue
            metadata = dict(message.metadata) | {"transcribed": True}
            async with self._store.write() as tx:
                await tx.update_message(
                    message_id, chat_jid, content=f"[Voice]: {text}", metadata=metadata
                )
            done += 1
        return done

    async def _fetch_deferred(self, message_id: str, chat_jid: str) -> None:
        """Store the bytes of the message's attachments marked ``fetch_url`` (PIPELINE §1.4:
        slow downloads happen after the acknowledgement). One that cannot be fetched keeps its
        reference without bytes, and the model gets a line naming it."""
        assert self._fetch is not None
        async with self._store.read() as tx:
            message = await tx.get_message(message_id, chat_jid)
        refs = attachment_refs(message.metadata) if message is not None else ()
        if message is None or not any(ref.fetch_url for ref in refs):
            return
        kept: list[AttachmentRef] = []
        blobs: list[Blob] = []
        for ref in refs:
            if not ref.fetch_url:
                kept.append(ref)
                continue
            cap = cap_for(ref.kind, ref.mime, self._limits)
            try:
                data = await self._fetch(chat_jid, ref.fetch_url, cap)
            except (OSError, PostroomError) as exc:
                log.warning("enrich.fetch_failed", message_id=message_id, error=str(exc))
                data = None
            if data is None or len(data) > cap:
                kept.append(replace(ref, fetch_url=""))
                continue
            blob = Blob.of(data, ref.mime)
            blobs.append(blob)
            kept.append(replace(ref, size=blob.size, sha256=blob.sha256, fetch_url=""))
        metadata = dict(message.metadata) | {"attachments": [ref.to_dict() for ref in kept]}
        async with self._store.write() as tx:
            await tx.insert_blobs(
                blobs, chat_jid=chat_jid, message_id=message_id, now=self._clock()
            )
            await tx.update_message(
                message_id, chat_jid, content=message.content, metadata=metadata
            )


def _voice(attachments: Sequence[AttachmentRef]) -> AttachmentRef | None:
    """The first voice note whose audio is stored."""
    for attachment in attachments:
        if attachment.kind in VOICE_KINDS and attachment.sha256:
            return attachment
    return None
