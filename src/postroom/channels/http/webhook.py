"""Outbound webhooks (INTERFACES §4) and the event-stream sink.

Each delivery is one ``POST`` of JSON ``{id, chat_jid, topic, reply_to, folder, message_type,
content, chunk, chunks}`` with ``Idempotency-Key: <id>:<chat_jid>:<chunk>`` and, when a secret
is set, ``X-Postroom-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<path>.<body>">``
(the path of ``outbound_url``, as sent), so a receiver can refuse a replay or another path's
body. A 2xx answer marks it delivered; 429 and 503 honour ``Retry-After``; anything else is
retried like any delivery.

The requests go through one aiohttp session with keep-alive: every answer of a webhook platform
is one request, and aiohttp's client costs a fraction of httpx's per request — at hundreds of
answers a second that was a third of the gateway's CPU. aiohttp itself takes a fifth of a second
to import, so the session is opened lazily, and the import is started on a worker thread once the
server listens (:meth:`WebhookSession.preload`).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from postroom.core.durations import parse_retry_after
from postroom.core.signing import sign_request
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

if TYPE_CHECKING:
    import aiohttp

__all__ = ["EventStreamSink", "WebhookSession", "WebhookSink", "sign_body", "webhook_body"]

SIGNATURE_HEADER = "X-Postroom-Signature"


def sign_body(secret: str, url: str, body: bytes, *, now: float) -> str:
    """The signature header of a POST of *body* to *url* at *now* (INTERFACES §4)."""
    return sign_request(secret, urlsplit(url).path or "/", body, now=now)


def webhook_body(delivery: OutgoingChunk) -> bytes:
    payload = {
        "id": delivery.message_id,
        "chat_jid": delivery.chat_jid,
        "topic": delivery.topic,
        "reply_to": delivery.reply_to,
        "folder": delivery.folder,
        "message_type": delivery.message_type,
        "content": delivery.content,
        "chunk": delivery.chunk,
        "chunks": delivery.chunks,
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


class WebhookSession:
    """The one aiohttp session every webhook sink shares, opened on first use."""

    def __init__(self, *, timeout_s: float = 10.0) -> None:
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._loading: asyncio.Future[ModuleType] | None = None

    def preload(self) -> None:
        """Start importing aiohttp on a worker thread, so the first send need not wait."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(
                asyncio.to_thread(importlib.import_module, "aiohttp")
            )

    async def get(self) -> aiohttp.ClientSession:
        if self._session is None:
            self.preload()
            assert self._loading is not None
            aiohttp = await asyncio.shield(self._loading)
            if self._session is None:
                self._session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                    # No cookies from one platform's endpoint leak into another's requests.
                    cookie_jar=aiohttp.DummyCookieJar(),
                )
        return self._session

    async def close(self) -> None:
        if self._loading is not None and not self._loading.done():
            await asyncio.gather(self._loading, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None


class WebhookSink:
    """Delivers a platform's chats by POSTing each chunk to its ``outbound_url``."""

    def __init__(
        self,
        *,
        url: str,
        secret: str | None,
        client: WebhookSession,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._url = url
        self._secret = secret
        self._client = client
        # Wall-clock seconds: the receiver compares the signature's time with its own clock.
        self._now = now

    async def send(self, delivery: OutgoingChunk) -> SendResult:
        body = webhook_body(delivery)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": f"{delivery.message_id}:{delivery.chat_jid}:{delivery.chunk}",
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, self._url, body, now=self._now())
        session = await self._client.get()
        import aiohttp  # loaded by the session: a dictionary lookup from here on

        try:
            async with session.post(self._url, data=body, headers=headers) as response:
                await response.read()
                status = response.status
                platform_id = response.headers.get("x-platform-message-id")
                retry_after = response.headers.get("retry-after")
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise DeliveryFailed(f"webhook {self._url} unreachable: {reason}") from exc
        if 200 <= status < 300:
            return SendResult(platform_id)
        throttled = status in (429, 503)
        raise DeliveryFailed(
            f"webhook {self._url} answered {status}",
            retry_after=parse_retry_after(retry_after, now=datetime.now(UTC))
            if throttled
            else None,
        )


class EventStreamSink:
    """For chats with neither an adapter nor a webhook (the web chat, API clients): the
    message is already on the live feed, and publishing the delivery counts as delivering."""

    async def send(self, delivery: OutgoingChunk) -> SendResult:
        return SendResult(None)
