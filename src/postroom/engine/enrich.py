"""Slow enrichment after the acknowledgement and before the turn runs (PIPELINE §1.4).

Adapters store a voice note as ``[Voice message]`` with the audio attached (fetched within the
size cap); the platform is acknowledged at once. When a turn that answers it starts, the note is
transcribed — if a transcriber is configured — and the row becomes ``[Voice]: <transcript>``:
the history keeps showing exactly what the model saw.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

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
            voice = _voice(message.metadata.get("attachments"))
            if voice is None:
                continue
            try:
                audio = base64.b64decode(voice.get("data", ""), validate=True)
                text = (
                    await self._transcribe(audio, str(voice.get("mime") or "audio/ogg"))
                ).strip()
            except (binascii.Error, ValueError, OSError, PostroomError) as exc:
                log.warning("enrich.transcription_failed", message_id=message_id, error=str(exc))
                continue
            metadata = dict(message.metadata) | {"transcribed": True}
            async with self._store.write() as tx:
                await tx.update_message(
                    message_id, chat_jid, content=f"[Voice]: {text}", metadata=metadata
                )
            done += 1
        return done


def _voice(attachments: Any) -> dict[str, Any] | None:
    if not isinstance(attachments, list):
        return None
    for attachment in attachments:
        if (
            isinstance(attachment, dict)
            and attachment.get("kind") in VOICE_KINDS
            and attachment.get("data")
        ):
            return attachment
    return None
