"""Slow enrichment after the acknowledgement and before the turn runs (PIPELINE §1.4).

Adapters store a voice note as ``[Voice message]`` with the audio attached (fetched within the
size cap, kept as a blob); the platform is acknowledged at once. When a turn that answers it
starts, the note is transcribed — if a transcriber is configured — and the row becomes
``[Voice]: <transcript>``: the history keeps showing exactly what the model saw.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from postroom.core.attachments import AttachmentRef, attachment_refs
from postroom.core.errors import PostroomError
from postroom.store.protocol import Store
from postroom.store.records import JobRecord

__all__ = ["VOICE_PLACEHOLDER", "Enricher", "Transcribe"]

log = structlog.get_logger(__name__)

Transcribe = Callable[[bytes, str], Awaitable[str]]
VOICE_PLACEHOLDER = "[Voice message]"
VOICE_KINDS = frozenset({"voice", "audio"})


class Enricher:
    def __init__(self, *, store: Store, transcribe: Transcribe | None) -> None:
        self._store = store
        self._transcribe = transcribe

    async def enrich(self, job: JobRecord) -> int:
        """Transcribe the voice notes this turn answers; return how many were."""
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


def _voice(attachments: Sequence[AttachmentRef]) -> AttachmentRef | None:
    """The first voice note whose audio is stored."""
    for attachment in attachments:
        if attachment.kind in VOICE_KINDS and attachment.sha256:
            return attachment
    return None
