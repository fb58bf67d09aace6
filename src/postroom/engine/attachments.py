"""Attachments as ingest stores them: the bytes become blobs, the row keeps references.

Adapters and the API hand ingest attachments with inline base64 ``data`` (what they fetched
within the caps). Ingest stores each file once, by its SHA-256, in the same transaction as the
message; the message's metadata keeps ``{kind, mime, name, size, sha256}`` (MESSAGES §4).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import structlog

from postroom.core.attachments import AttachmentRef, Blob, decode_base64
from postroom.core.errors import InvalidInput, TooLarge
from postroom.core.messages import Attachment

__all__ = [
    "KINDS",
    "AttachmentLimits",
    "attachment_label",
    "cap_for",
    "check_attachment",
    "stored_attachments",
]

log = structlog.get_logger(__name__)

#: The kinds an attachment may declare.
KINDS = frozenset({"image", "file", "voice", "audio", "video"})
_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")


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
        ref = AttachmentRef(
            attachment.kind,
            attachment.mime,
            attachment.name,
            attachment.size,
            fetch_url=attachment.url if attachment.deferred and not attachment.data else "",
        )
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


def attachment_label(attachment: Attachment) -> str:
    """How a refusal names an attachment."""
    return f"The attachment {attachment.name!r}" if attachment.name else "An attachment"


def check_attachment(attachment: Attachment, limits: AttachmentLimits) -> Attachment:
    """An attachment someone sends (the API, the web chat) checked, refused with one sentence:
    a known kind, a MIME type of the form type/subtype (an image's an ``image/`` one), base64
    data within its cap. Its ``size`` becomes the decoded size."""
    label = attachment_label(attachment)
    if attachment.kind not in KINDS:
        raise InvalidInput(
            f"{label} has kind {attachment.kind!r}; the kinds are {', '.join(sorted(KINDS))}."
        )
    if attachment.data and attachment.url:
        raise InvalidInput(f"{label} has both data and a url; send one of them.")
    mime = attachment.mime.strip().lower()
    if not _MIME.fullmatch(mime):
        raise InvalidInput(
            f"{label} has MIME type {mime!r}; send a type of the form type/subtype, "
            "such as image/png."
        )
    if attachment.kind == "image" and not mime.startswith("image/"):
        raise InvalidInput(f"{label} is an image but its MIME type is {mime!r}.")
    if not attachment.data:
        return replace(attachment, mime=mime)
    cap = cap_for(attachment.kind, mime, limits)
    raw = decode_base64(attachment.data, name=attachment.name, cap_bytes=cap)
    if len(raw) > cap:  # (decode_base64 refused it already; kept for a cap of 0)
        raise TooLarge(f"{label} is {len(raw)} bytes; the limit is {cap}.")
    return replace(attachment, mime=mime, size=len(raw))
