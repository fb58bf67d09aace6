"""Attachments of ``POST /api/v1/messages``: base64 ``data``, or a ``url`` the server fetches.

Each is checked before ingest sees the message, and refused with one sentence (400, or 413 when
it is over ``limits.image_bytes`` / ``limits.file_bytes``). A URL is fetched only from a public
address: a host that resolves to a loopback, private, link-local or otherwise non-global address
is refused, so a caller cannot make the server read its own network; redirects are not followed
(each would need the same check), and the download stops at the size cap.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from postroom.core.errors import InvalidInput, TooLarge
from postroom.core.messages import Attachment
from postroom.engine.attachments import AttachmentLimits, attachment_label, check_attachment

__all__ = ["Uploads", "UrlFetcher", "public_host"]

CheckHost = Callable[[str], Awaitable[None]]


async def public_host(host: str) -> None:
    """Refuse *host* unless every address it resolves to is a public (global) one."""
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM
            )
        except OSError:
            raise InvalidInput(
                f"The attachment URL's host {host!r} could not be resolved."
            ) from None
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not addresses or not all(a.is_global for a in addresses):
        raise InvalidInput(
            f"The attachment URL's host {host!r} is not a public address; postroom fetches "
            "attachments from public addresses only."
        )


@dataclass(frozen=True, slots=True)
class UrlFetcher:
    """Downloads one attachment URL within a size cap. *transport* and *check_host* are seams
    for tests (an in-process server instead of the internet)."""

    transport: httpx.AsyncBaseTransport | None = None
    check_host: CheckHost = public_host
    timeout_s: float = 10.0

    async def fetch(self, url: str, *, cap_bytes: int, label: str) -> tuple[bytes, str]:
        """The bytes at *url* and their MIME type."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"{label} has a url that is not an http(s) URL.")
        await self.check_host(parts.hostname)
        try:
            async with (
                httpx.AsyncClient(
                    transport=self.transport, timeout=self.timeout_s, follow_redirects=False
                ) as client,
                client.stream("GET", url) as response,
            ):
                if response.status_code != 200:
                    raise InvalidInput(
                        f"{label} could not be fetched: its URL answered HTTP "
                        f"{response.status_code}."
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > cap_bytes:
                        raise TooLarge(f"{label} is larger than the limit of {cap_bytes} bytes.")
                mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
        except httpx.HTTPError as exc:
            raise InvalidInput(f"{label} could not be fetched ({type(exc).__name__}).") from exc
        return bytes(body), mime


@dataclass(frozen=True, slots=True)
class Uploads:
    """Checks and completes the attachments of an API message."""

    limits: AttachmentLimits = field(default_factory=AttachmentLimits)
    fetcher: UrlFetcher = field(default_factory=UrlFetcher)

    async def resolve(self, attachments: Sequence[Attachment]) -> list[Attachment]:
        """Each attachment checked, a ``url`` replaced by the bytes it names."""
        return [await self._one(a) for a in attachments]

    async def _one(self, attachment: Attachment) -> Attachment:
        if not attachment.url or attachment.data:
            return check_attachment(attachment, self.limits)
        label = attachment_label(attachment)
        kind, mime = attachment.kind, attachment.mime.strip().lower()
        cap = max(self.limits.image_bytes, self.limits.file_bytes)
        raw, served = await self.fetcher.fetch(attachment.url, cap_bytes=cap, label=label)
        fetched = Attachment(
            kind, mime or served, attachment.name, len(raw), data=base64.b64encode(raw).decode()
        )
        # The cap of its kind (an image's is smaller) applies to what was fetched as well.
        return check_attachment(fetched, self.limits)
