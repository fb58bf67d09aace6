"""Voice notes, photos and documents, fetched within the size caps and kept inline.

Telegram's file URLs carry the bot token (``/file/bot<token>/<path>``), so a URL is never
stored: the bytes are downloaded before the message is handed to ingest and stored as base64
``data``. A voice note becomes a ``voice`` attachment (postroom's worker transcribes it later
when a transcriber is configured); a photo, its largest size within the cap, an ``image``; a
document (a PDF, a text file, a picture sent uncompressed) a ``file`` — or an ``image`` when it
is one — within the file cap. Ingest stores the bytes once, as a blob.
Anything over the cap, or a download that fails, leaves the attachment without data: the
message itself is never held back by its media.
"""

from __future__ import annotations

import base64

import structlog
from telegram import Bot, Message, PhotoSize
from telegram.error import TelegramError

from postroom.core.messages import Attachment

__all__ = ["fetch_attachments"]

log = structlog.get_logger(__name__)


async def fetch_attachments(
    bot: Bot, message: Message, *, cap_bytes: int, file_cap_bytes: int | None = None
) -> tuple[Attachment, ...]:
    """The message's voice note, photo or document as attachments with inline data (within
    *cap_bytes* for an image or a voice note, *file_cap_bytes* for a document)."""
    file_cap = cap_bytes if file_cap_bytes is None else file_cap_bytes
    voice = message.voice or message.audio
    if voice is not None:
        mime = voice.mime_type or "audio/ogg"
        name = getattr(voice, "file_name", None) or ""
        data, size = await _download(bot, voice.file_id, voice.file_size, cap_bytes)
        return (_attachment("voice", mime, name, size, data),)
    if message.photo:
        photo = _largest_within(message.photo, cap_bytes)
        if photo is None:
            size = max((p.file_size or 0) for p in message.photo)
            return (Attachment(kind="image", mime="image/jpeg", size=size),)
        data, size = await _download(bot, photo.file_id, photo.file_size, cap_bytes)
        return (_attachment("image", "image/jpeg", "", size, data),)
    document = message.document
    if document is not None:
        mime = document.mime_type or "application/octet-stream"
        kind = "image" if mime.startswith("image/") else "file"
        cap = cap_bytes if kind == "image" else file_cap
        name = document.file_name or ""
        data, size = await _download(bot, document.file_id, document.file_size, cap)
        return (_attachment(kind, mime, name, size, data),)
    return ()


def _largest_within(sizes: tuple[PhotoSize, ...], cap_bytes: int) -> PhotoSize | None:
    """Telegram lists a photo in several sizes; the biggest that fits the cap is the one kept."""
    fitting = [p for p in sizes if p.file_size is None or p.file_size <= cap_bytes]
    if not fitting:
        return None
    return max(fitting, key=lambda p: (p.width * p.height, p.file_size or 0))


def _attachment(
    kind: str, mime: str, name: str, size: int | None, data: bytes | None
) -> Attachment:
    return Attachment(
        kind=kind,
        mime=mime,
        name=name,
        size=len(data) if data is not None else size or 0,
        data=base64.b64encode(data).decode("ascii") if data is not None else "",
    )


async def _download(
    bot: Bot, file_id: str, size: int | None, cap_bytes: int
) -> tuple[bytes | None, int | None]:
    """The file's bytes (``None`` when over the cap or unreachable) and its size as far as
    known: the message does not always say, ``getFile`` usually does."""
    if size is not None and size > cap_bytes:
        log.info("telegram.media_over_cap", size=size, cap=cap_bytes)
        return None, size
    try:
        file = await bot.get_file(file_id)
        size = file.file_size if file.file_size is not None else size
        if size is not None and size > cap_bytes:
            log.info("telegram.media_over_cap", size=size, cap=cap_bytes)
            return None, size
        data = bytes(await file.download_as_bytearray())
    except TelegramError as exc:
        # The message goes in without the bytes: holding every later update back for one
        # unreachable file would be worse. (The SDK's error names the failure, not the URL.)
        log.warning("telegram.media_failed", error=f"{type(exc).__name__}: {exc}")
        return None, size
    if len(data) > cap_bytes:
        log.info("telegram.media_over_cap", size=len(data), cap=cap_bytes)
        return None, len(data)
    return data, len(data)
