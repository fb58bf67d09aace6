"""Attachments: files stored once by their SHA-256, and how they reach a model (MESSAGES §4).

A message row keeps only each attachment's reference ``{kind, mime, name, size, sha256}``; the
bytes are a :class:`Blob`, stored once however many messages carry them. In a context, images
of the newest user rows go to the model as image parts, PDFs as document parts (for providers
that take them), text files inline, and anything else — or an image for a model that cannot see
— as a line ``[attachment: name, mime, size]`` so the model knows it is there.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from postroom.core.errors import InvalidInput, TooLarge

__all__ = [
    "IMAGE_MIMES",
    "AttachmentPolicy",
    "AttachmentRef",
    "Blob",
    "MediaPart",
    "attachment_refs",
    "decode_base64",
    "is_text_mime",
    "placeholder",
    "render_attachments",
]

#: Image types every vision API takes.
IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF_MIME = "application/pdf"
#: Non-``text/*`` types that are text all the same (inlined like ``text/*``).
_TEXT_MIMES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/csv",
    }
)
_TEXT_SUFFIXES = frozenset(
    {"txt", "md", "markdown", "csv", "tsv", "json", "yaml", "yml", "toml", "ini", "log", "xml"}
    | {"html", "css", "js", "ts", "py", "rs", "go", "java", "c", "h", "cpp", "rb", "sh", "sql"}
)


def is_text_mime(mime: str, name: str = "") -> bool:
    """Whether a file is text to inline: ``text/*``, JSON, CSV, Markdown, source code."""
    mime = mime.split(";")[0].strip().lower()
    if mime.startswith("text/") or mime in _TEXT_MIMES or mime.endswith(("+json", "+xml")):
        return True
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return mime in ("", "application/octet-stream") and suffix in _TEXT_SUFFIXES


@dataclass(frozen=True, slots=True)
class Blob:
    """An attachment's bytes, addressed by their SHA-256 (hex)."""

    sha256: str
    mime: str
    data: bytes

    @classmethod
    def of(cls, data: bytes, mime: str) -> Blob:
        return cls(hashlib.sha256(data).hexdigest(), mime, data)

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """What a stored message keeps of one attachment (``sha256`` empty: the bytes were not
    fetched — too large, or the platform would not give them)."""

    kind: str
    mime: str = ""
    name: str = ""
    size: int = 0
    sha256: str = ""
    #: Where an adapter left the bytes to be fetched after the acknowledgement (PIPELINE
    #: §1.4); gone once they are stored.
    fetch_url: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "mime": self.mime,
            "name": self.name,
            "size": self.size,
        }
        if self.sha256:
            out["sha256"] = self.sha256
        elif self.fetch_url:
            out["fetch_url"] = self.fetch_url
        return out


def attachment_refs(metadata: Mapping[str, Any]) -> tuple[AttachmentRef, ...]:
    """The attachment references of a stored message's metadata (malformed entries skipped)."""
    found = metadata.get("attachments")
    if not isinstance(found, list):
        return ()
    refs: list[AttachmentRef] = []
    for entry in found:
        if not isinstance(entry, dict):
            continue
        size = entry.get("size")
        refs.append(
            AttachmentRef(
                kind=str(entry.get("kind") or "file"),
                mime=str(entry.get("mime") or ""),
                name=str(entry.get("name") or ""),
                size=size if isinstance(size, int) else 0,
                sha256=str(entry.get("sha256") or ""),
                fetch_url=str(entry.get("fetch_url") or ""),
            )
        )
    return tuple(refs)


def decode_base64(data: str, *, name: str, cap_bytes: int) -> bytes:
    """An attachment's base64 ``data`` decoded, refused with one sentence when it is not
    base64 or is larger than *cap_bytes*."""
    label = f"The attachment {name!r}" if name else "An attachment"
    # Four base64 characters hold three bytes: refuse an oversized one before decoding it.
    if len(data) // 4 * 3 > cap_bytes + 3:
        raise TooLarge(f"{label} is larger than the limit of {cap_bytes} bytes.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{label} has data that is not valid base64.") from None
    if len(raw) > cap_bytes:
        raise TooLarge(f"{label} is {len(raw)} bytes; the limit is {cap_bytes}.")
    return raw


def placeholder(ref: AttachmentRef) -> str:
    """The line a model sees for an attachment it is not sent."""
    name = ref.name or ref.kind
    return f"[attachment: {name}, {ref.mime or 'unknown type'}, {_size(ref.size)}]"


def _size(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class MediaPart:
    """An image or document sent to a model beside a message's text. ``as_kind`` is
    ``image`` or ``document``; ``data`` never enters a run record (the hash does)."""

    as_kind: str
    sha256: str
    mime: str
    name: str
    size: int
    data: bytes

    def ref(self) -> AttachmentRef:
        return AttachmentRef(self.as_kind, self.mime, self.name, self.size, self.sha256)

    def to_record(self) -> dict[str, Any]:
        return {
            "sent_as": self.as_kind,
            "sha256": self.sha256,
            "mime": self.mime,
            "name": self.name,
        }


@dataclass(frozen=True, slots=True)
class AttachmentPolicy:
    """What a run may send: ``vision`` (the model takes images), the newest ``max_images``
    user rows' images, text files up to ``max_file_chars``."""

    vision: bool = True
    max_images: int = 4
    max_file_chars: int = 20000


def render_attachments(
    refs: Sequence[AttachmentRef],
    blobs: Mapping[str, Blob],
    policy: AttachmentPolicy,
    *,
    images: bool,
) -> tuple[list[str], list[MediaPart]]:
    """The text lines and media parts of one row's attachments; *images* says whether this row
    is among the newest that may send theirs. A voice note is its transcript (the content)."""
    lines: list[str] = []
    media: list[MediaPart] = []
    for ref in refs:
        if ref.kind in ("voice", "audio"):
            continue
        blob = blobs.get(ref.sha256) if ref.sha256 else None
        mime = ref.mime.split(";")[0].strip().lower()
        if blob is None:
            lines.append(placeholder(ref))
        elif mime in IMAGE_MIMES and images and policy.vision:
            media.append(MediaPart("image", ref.sha256, mime, ref.name, blob.size, blob.data))
        elif mime == PDF_MIME:
            media.append(MediaPart("document", ref.sha256, mime, ref.name, blob.size, blob.data))
        elif is_text_mime(mime, ref.name):
            lines.append(_inlined(ref, blob.data, policy.max_file_chars))
        else:
            lines.append(placeholder(ref))
    return lines, media


def _inlined(ref: AttachmentRef, data: bytes, max_chars: int) -> str:
    text = data.decode("utf-8", errors="replace")
    cut = ""
    if len(text) > max_chars:
        text = text[:max_chars]
        cut = f"\n[… cut at {max_chars} characters]"
    return f"[file: {ref.name or 'attachment'}, {ref.mime or 'text'}]\n{text}{cut}"
