"""Outbound webhooks (INTERFACES §4) and the event-stream sink.

Each delivery is one ``POST`` of JSON ``{id, chat_jid, topic, reply_to, folder, message_type,
content, chunk, chunks}`` with ``Idempotency-Key: <id>:<chat_jid>:<chunk>`` and, when a secret
is set, ``X-Postroom-Signature: sha256=<hex HMAC-SHA256 of the body>``. A 2xx answer marks it
delivered; 429 and 503 honour ``Retry-After``; anything else is retried like any delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx

from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["EventStreamSink", "WebhookSink", "sign_body", "webhook_body"]

SIGNATURE_HEADER = "X-Postroom-Signature"


def sign_body(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


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


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None


class WebhookSink:
    """Delivers a platform's chats by POSTing each chunk to its ``outbound_url``."""

    def __init__(self, *, url: str, secret: str | None, client: httpx.AsyncClient) -> None:
        self._url = url
        self._secret = secret
        self._client = client

    async def send(self, delivery: OutgoingChunk) -> SendResult:
        body = webhook_body(delivery)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": f"{delivery.message_id}:{delivery.chat_jid}:{delivery.chunk}",
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, body)
        try:
            response = await self._client.post(self._url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"webhook {self._url} unreachable: {exc}") from exc
        if 200 <= response.status_code < 300:
            return SendResult(response.headers.get("x-platform-message-id"))
        raise DeliveryFailed(
            f"webhook {self._url} answered {response.status_code}",
            retry_after=_retry_after(response) if response.status_code in (429, 503) else None,
        )


class EventStreamSink:
    """For chats with neither an adapter nor a webhook (the web chat, API clients): the
    message is already on the live feed, and publishing the delivery counts as delivering."""

    async def send(self, delivery: OutgoingChunk) -> SendResult:
        return SendResult(None)
