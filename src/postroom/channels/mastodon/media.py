"""The media of a status, fetched before ingest.

Images (for vision models) and audio (kind ``voice``, transcribed after the acknowledgement
when a transcriber is configured) are downloaded within the size cap and kept inline as
base64; other media stay references to their URL. Media files are public: no credentials are
ever sent with these requests. Audio is fetched only for a status without words, because a
transcript replaces the stored text and must never replace what the person wrote.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from postroom.core.messages import Attachment

__all__ = ["MediaFetcher", "kind_of_media"]

log = structlog.get_logger(__name__)

_KINDS = {"image": "image", "audio": "voice", "video": "video", "gifv": "video"}


def kind_of_media(media: Mapping[str, Any]) -> str:
    """``image``, ``voice``, ``video`` or ``file`` for a Mastodon media attachment."""
    return _KINDS.get(str(media.get("type") or ""), "file")


class MediaFetcher:
    """Downloads a status's images and audio within a size cap."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def attachments(
        self, media: Iterable[Mapping[str, Any]], *, cap_bytes: int, with_audio: bool
    ) -> tuple[Attachment, ...]:
        out: list[Attachment] = []
        for item in media:
            kind = kind_of_media(item)
            url = str(item.get("url") or item.get("remote_url") or "")
            mime = mimetypes.guess_type(urlsplit(url).path)[0] or ""
            wanted = kind == "image" or (kind == "voice" and with_audio)
            data, size, fetched_mime = "", 0, ""
            if wanted and url.startswith(("http://", "https://")):
                data, size, fetched_mime = await self._download(url, cap_bytes)
            out.append(
                Attachment(
                    kind=kind,
                    mime=fetched_mime or mime,
                    name=str(item.get("description") or "")[:200],
                    size=size,
                    url=url,
                    data=data,
                )
            )
        return tuple(out)

    async def _download(self, url: str, cap_bytes: int) -> tuple[str, int, str]:
        try:
            async with self._client.stream("GET", url) as response:
                if response.status_code != 200:
                    log.warning("mastodon.media_refused", url=url, status=response.status_code)
                    return "", 0, ""
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) > cap_bytes:
                        log.warning("mastodon.media_too_large", url=url, cap_bytes=cap_bytes)
                        return "", 0, ""
                mime = response.headers.get("content-type", "").split(";")[0].strip()
        except httpx.HTTPError as exc:
            log.warning("mastodon.media_unavailable", url=url, error=str(exc))
            return "", 0, ""
        return base64.b64encode(bytes(body)).decode("ascii"), len(body), mime
