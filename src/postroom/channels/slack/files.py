"""Files attached to Slack messages, fetched by the adapter (``url_private`` needs the bot
token): images (for vision models), audio clips (kind ``voice``, transcribed after the
acknowledgement when a transcriber is configured) and other files (PDFs, text), each within its
size cap, kept inline as base64 (ingest stores the bytes once, as a blob). The token is only
ever sent to Slack's own hosts (or to the configured ``base_url``'s host).
Downloads before ingest share the 3-second budget of an Events API request, so only pictures and
audio are fetched then, with a short timeout; other files, and what could not be fetched in
time, are fetched after the acknowledgement, before the turn runs (PIPELINE §1.4).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from postroom.core.messages import Attachment

__all__ = ["VOICE_PLACEHOLDER", "FileFetcher", "content_with_files", "kind_of_file"]

log = structlog.get_logger(__name__)

VOICE_PLACEHOLDER = "[Voice message]"
#: How long a download after the acknowledgement may take (no webhook waits for it).
LATE_TIMEOUT_S = 30.0


def kind_of_file(file: Mapping[str, Any]) -> str:
    mime = str(file.get("mimetype") or "")
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/") or file.get("subtype") == "slack_audio":
        return "voice"
    return "file"


class FileFetcher:
    """Downloads message files with the bot token, within a size cap."""

    def __init__(
        self, *, client: httpx.AsyncClient, token: str, api_url: str, timeout_s: float = 2.0
    ) -> None:
        self._client = client
        self._token = token
        self._api_host = urlsplit(api_url).hostname or ""
        self._timeout_s = timeout_s

    def trusted(self, url: str) -> bool:
        """Whether the bot token may be sent to *url*: Slack's hosts, or our API's host."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if host == self._api_host and parts.scheme in ("http", "https"):
            return True
        return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))

    async def attachments(
        self,
        files: Iterable[Mapping[str, Any]],
        *,
        cap_bytes: int,
        file_cap_bytes: int | None = None,
    ) -> tuple[Attachment, ...]:
        """Each file with its bytes when within its cap: *cap_bytes* for images and audio,
        fetched now, within the request's budget; any other file (a PDF, a text file), and a
        picture or clip that did not arrive in time, is left to :meth:`fetch` after the
        acknowledgement (``deferred``), within *file_cap_bytes*."""
        out: list[Attachment] = []
        for file in files:
            kind = kind_of_file(file)
            url = str(file.get("url_private_download") or file.get("url_private") or "")
            size = _int(file.get("size"))
            mime = str(file.get("mimetype") or "")
            name = str(file.get("name") or file.get("title") or "")
            cap = (
                cap_bytes
                if kind in ("image", "voice") or file_cap_bytes is None
                else file_cap_bytes
            )
            fetchable = bool(url) and size <= cap and self.trusted(url)
            data = ""
            if fetchable and kind in ("image", "voice"):
                data = await self._download(url, cap, self._timeout_s)
            out.append(
                Attachment(
                    kind=kind,
                    mime=mime,
                    name=name,
                    size=size,
                    url=url,
                    data=data,
                    deferred=fetchable and not data,
                )
            )
        return tuple(out)

    async def fetch(self, url: str, cap_bytes: int) -> bytes | None:
        """A file's bytes after the acknowledgement, with a patient timeout; ``None`` when the
        URL is not Slack's, the file is over the cap or cannot be had."""
        if not self.trusted(url):
            return None
        data = await self._download(url, cap_bytes, LATE_TIMEOUT_S)
        return base64.b64decode(data) if data else None

    async def _download(self, url: str, cap_bytes: int, timeout_s: float) -> str:
        try:
            async with self._client.stream(
                "GET",
                url,
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=timeout_s,
                follow_redirects=False,
            ) as response:
                if response.status_code != 200:
                    log.warning("slack.file_refused", url=url, status=response.status_code)
                    return ""
                body = bytearray()
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) > cap_bytes:
                        log.warning("slack.file_too_large", url=url, cap_bytes=cap_bytes)
                        return ""
        except httpx.HTTPError as exc:
            log.warning("slack.file_unavailable", url=url, error=str(exc))
            return ""
        return base64.b64encode(bytes(body)).decode("ascii")


def content_with_files(text: str, attachments: Iterable[Attachment]) -> str:
    """The stored text: the message itself, or a placeholder when it is only a file."""
    if text.strip():
        return text
    kinds = [a.kind for a in attachments]
    if "voice" in kinds:
        return VOICE_PLACEHOLDER
    if "image" in kinds:
        return "[Image]"
    names = [a.name for a in attachments if a.name]
    return f"[File: {', '.join(names)}]" if names else text


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
