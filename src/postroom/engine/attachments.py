"""Attachments as ingest stores them: the bytes become blobs, the row keeps references.

Adapters and the API hand ingest attachments with inline base64 ``data`` (what they fetched
within the caps). Ingest stores each file once, by its SHA-256, in the same transaction as the
message; the message's metadata keeps ``{kind, mime, name, size, sha256}`` (MESSAGES §4).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from postroom.core.attachments import AttachmentRef, Blob, decode_base64
from postroom.core.errors import InvalidInput
from postroom.core.messages import Attachment

__all__ = ["AttachmentLimits", "cap_for", "stored_attachments"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    """``limits.image_bytes`` for one image, ``limits.file_bytes`` for any other file."""

    image_bytes: int = 5 * 1024 * 1024
    file_bytes: int = 20 * 1024 * 1024


def cap_for(kind: str, mime: str, limits: AttachmentLimits) -> int:
    """The size cap of one attachment: an image's, or a file's."""
    return limits.image_bytes if kind == "image" or mime.startswith("image/") else limits.file_bytes


def stored_attachments(
    attachments: Iterable[Attachment], limits: AttachmentLimits, *, strict: bool
) -> tuple[list[AttachmentRef], list[Blob]]:
    """The references a row keeps and the blobs to store. *strict* (the API) refuses bad
    base64 or an oversized file with one sentence; otherwise (an adapter, which fetched within
    the caps already) such a file keeps its reference without bytes, and the log says why."""
    refs: list[AttachmentRef] = []
    blobs: list[Blob] = []
    for attachment in attachments:
        ref = AttachmentRef(attachment.kind, attachment.mime, attachment.name, attachment.size)
        if attachment.data:
            cap = cap_for(attachment.kind, attachment.mime, limits)
            try:
                raw = decode_base64(attachment.data, name=attachment.name, cap_bytes=cap)
            except InvalidInput as exc:
                if strict:
                    raise
                log.warning("ingest.attachment_skipped", name=attachment.name, error=str(exc))
            else:
                blob = Blob.of(raw, attachment.mime)
                blobs.append(blob)
                ref = AttachmentRef(
                    attachment.kind, attachment.mime, attachment.name, blob.size, blob.sha256
                )
        refs.append(ref)
    return refs, blobs
