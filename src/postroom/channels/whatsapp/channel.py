"""The WhatsApp adapter: Cloud API webhooks in, ``POST /{phone_number_id}/messages`` out.

Inbound, Meta POSTs webhooks signed with the app secret to ``webhook_path`` (after a GET
handshake that echoes ``hub.challenge`` when ``hub.verify_token`` matches). Each message is
normalized (:mod:`.events`), its image or voice note fetched within the size cap, and ingested;
the webhook is answered 200 only after every message of it was committed, so a failure makes
Meta send it again — and a redelivery is harmless, the ``wamid`` being the dedupe key.

Outbound, an answer is a text message quoting (``context``) the message it answers, in
WhatsApp's own markup. The typing indicator is tied to a received message (it also marks it
read) and lasts until the answer or 25 s, so it is sent again only when it would have expired.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

import httpx
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from postroom.channels.base import BaseChannel, RateLimitedByPlatform
from postroom.channels.recent import Recent
from postroom.channels.whatsapp.config import WhatsAppConfig
from postroom.channels.whatsapp.events import (
    MediaRef,
    WhatsAppMessage,
    parse_payload,
    signature_valid,
)
from postroom.channels.whatsapp.graph import GraphClient, GraphError
from postroom.core.errors import InvalidInput, PostroomError
from postroom.core.jid import decode_id_part, split_jid
from postroom.core.messages import Attachment, InboundMessage
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["WhatsAppChannel"]

log = structlog.get_logger(__name__)

#: How a document left for later names its media id (``fetch_attachment`` reads it back).
_MEDIA_REF = "whatsapp-media:"
#: How long a download after the acknowledgement may take (no webhook waits for it).
LATE_TIMEOUT_S = 30.0

#: Graph's codes for "too many messages" (app, account, throughput, spam, per-recipient pair).
RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131048, 131056})
#: The recipient cannot get this message at all: retrying cannot help.
PERMANENT_CODES = frozenset(
    {
        131026,  # undeliverable (no WhatsApp, old client, terms not accepted)
        131030,  # not in the test number's allowed list
        131047,  # outside the 24-hour window: only templates may be sent
    }
)
#: WhatsApp drops the indicator after 25 s; sent again a little before that.
TYPING_RESEND_S = 20.0
TYPING_TIMEOUT_S = 3.0
VOICE_PLACEHOLDER = "[Voice message]"


class WhatsAppChannel(BaseChannel):
    name = "whatsapp"
    platforms = ("whatsapp",)
    # WhatsApp's markers are Slack's (*bold* _italic_ ~strike~); do_send undoes the rest.
    format_style = "whatsapp"

    def __init__(self, config: WhatsAppConfig) -> None:
        super().__init__()
        self._config = config
        self._http: httpx.AsyncClient | None = None
        #: chat → the last message received there (what a typing indicator is attached to).
        self._last_received: Recent[str, str] = Recent(4096)
        #: chat → (message id, when) of the indicator last shown there.
        self._typing_shown: Recent[str, tuple[str, float]] = Recent(4096)

    @property
    def config(self) -> WhatsAppConfig:
        return self._config

    # -- lifecycle ---------------------------------------------------------------------------
    async def do_start(self) -> None:
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(self._config.send_timeout_s))
        try:
            detail = await self._describe(self._graph(self._http))
        except (GraphError, httpx.HTTPError) as exc:
            # Webhooks still arrive; the status shows what is wrong until a send succeeds.
            self.failed(exc)
            return
        self.connected(detail)

    async def do_stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def do_check(self) -> str:
        try:
            async with self._client() as http:
                return await self._describe(self._graph(http))
        except httpx.HTTPError as exc:
            raise PostroomError(f"WhatsApp's Graph API could not be reached: {exc}.") from exc

    def routes(self) -> list[BaseRoute]:
        return [Route(self._config.webhook_path, self._webhook, methods=["GET", "POST"])]

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        """The running client, or one for this call alone (``postroom doctor`` checks unstarted)."""
        if self._http is not None:
            yield self._http
            return
        async with httpx.AsyncClient(timeout=httpx.Timeout(self._config.send_timeout_s)) as http:
            yield http

    def _graph(self, http: httpx.AsyncClient) -> GraphClient:
        return GraphClient(
            http=http,
            api_url=self._config.api_url,
            phone_number_id=self._config.phone_number_id,
            access_token=self._config.access_token,
            timeout_s=self._config.send_timeout_s,
        )

    @property
    def graph(self) -> GraphClient:
        if self._http is None:
            raise DeliveryFailed("the whatsapp channel is not started")
        return self._graph(self._http)

    async def _describe(self, graph: GraphClient) -> str:
        phone = await graph.phone()
        number = str(phone.get("display_phone_number") or self._config.phone_number_id)
        name = str(phone.get("verified_name") or "")
        return f"WhatsApp number {number}" + (f" ({name})" if name else "")

    # -- inbound -------------------------------------------------------------------------------
    async def _webhook(self, request: Request) -> Response:
        if request.method == "GET":
            return self._handshake(request)
        body = await request.body()
        if len(body) > self._config.max_body_bytes:
            return JSONResponse({"error": "The body is too large."}, status_code=413)
        signature = request.headers.get("x-hub-signature-256")
        if not signature_valid(self._config.app_secret, body, signature):
            return JSONResponse({"error": "Missing or wrong X-Hub-Signature-256."}, status_code=401)
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": "The body is not JSON."}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": "The body is not a JSON object."}, status_code=400)
        await self.handle_payload(payload)
        return Response(status_code=200)

    def _handshake(self, request: Request) -> Response:
        """Meta's subscription check: echo the challenge when our verify token comes back."""
        params = request.query_params
        token = params.get("hub.verify_token", "")
        if params.get("hub.mode") != "subscribe" or not hmac.compare_digest(
            token.encode(), self._config.verify_token.encode()
        ):
            return JSONResponse({"error": "Wrong hub.mode or hub.verify_token."}, status_code=403)
        return PlainTextResponse(params.get("hub.challenge", ""))

    async def handle_payload(self, payload: Mapping[str, Any]) -> None:
        """Ingest every message of a webhook payload; returns once all are committed."""
        messages = parse_payload(
            payload,
            phone_number_id=self._config.phone_number_id,
            assistant_name=self.context.assistant_name,
        )
        for message in messages:
            inbound = await self._inbound(message)
            if not message.is_from_me:
                # Remembered first: ingest itself may start the turn that wants to show typing.
                self._last_received.put(message.chat_jid, message.id)
            try:
                await self.receive(inbound)
            except InvalidInput as exc:  # TooLarge included: acknowledged, never redelivered
                log.warning("whatsapp.message_refused", id=message.id, error=str(exc))

    async def _inbound(self, message: WhatsAppMessage) -> InboundMessage:
        attachments: tuple[Attachment, ...] = ()
        text = message.text
        metadata: dict[str, Any] = {
            "whatsapp": {
                "id": message.id,
                "type": message.type,
                "group_id": message.group_id or None,
                "context_from": message.context_from or None,
                # Graph keeps media for 30 days: the id lets a later reader fetch it.
                "media_id": message.media.media_id if message.media else None,
            }
        }
        if message.media is not None and not message.is_from_me:
            attachment = await self._fetch(message.media)
            attachments = (attachment,)
            if not text.strip():
                text = _placeholder(attachment)
        return InboundMessage(
            id=message.id,
            chat_jid=message.chat_jid,
            sender=message.sender,
            content=text,
            timestamp=message.timestamp or self.context.clock(),
            sender_name=message.name or message.wa_id,
            reply_to=message.reply_to,
            verb=message.verb,
            mentioned=message.mentioned,
            is_dm=not message.group_id,
            is_from_me=message.is_from_me,
            attachments=attachments,
            metadata=metadata,
        )

    async def _fetch(self, media: MediaRef) -> Attachment:
        """The attachment of a message; images and voice notes inline when within the cap (a
        voice note is transcribed after the acknowledgement, before its turn runs); a document
        left for after the acknowledgement."""
        bare = Attachment(kind=media.kind, mime=media.mime, name=media.name)
        if media.kind == "file" and media.media_id:
            # A document may be large: it is fetched after the acknowledgement, before the
            # turn runs, so the webhook is answered at once (PIPELINE §1.4).
            return replace(bare, url=f"{_MEDIA_REF}{media.media_id}", deferred=True)
        if media.kind not in ("image", "voice") or not media.media_id:
            return bare
        try:
            file = await self.graph.media(
                media.media_id,
                cap_bytes=self.context.image_bytes,
                timeout_s=self._config.media_timeout_s,
            )
        except (GraphError, httpx.HTTPError) as exc:
            # The message goes in without its bytes rather than not at all.
            log.warning("whatsapp.media_unavailable", media_id=media.media_id, error=str(exc))
            return bare
        mime = media.mime or file.mime
        if file.data is None:
            log.info("whatsapp.media_over_cap", media_id=media.media_id, size=file.size)
            return Attachment(kind=media.kind, mime=mime, name=media.name, size=file.size)
        data = base64.b64encode(file.data).decode("ascii")
        return Attachment(
            kind=media.kind, mime=mime, name=media.name, size=len(file.data), data=data
        )

    async def fetch_attachment(self, url: str, *, cap_bytes: int) -> bytes | None:
        """A document left for after the acknowledgement: its media id, looked up and
        downloaded with the access token (Graph keeps media for 30 days)."""
        if not url.startswith(_MEDIA_REF):
            return None
        try:
            file = await self.graph.media(
                url.removeprefix(_MEDIA_REF), cap_bytes=cap_bytes, timeout_s=LATE_TIMEOUT_S
            )
        except (GraphError, httpx.HTTPError) as exc:
            log.warning("whatsapp.media_unavailable", media=url, error=str(exc))
            return None
        return file.data

    # -- outbound ------------------------------------------------------------------------------
    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        kind, to = _address(chunk.chat_jid)
        if not text.strip():
            return SendResult()  # WhatsApp refuses an empty text; there is nothing to show
        # The first chunk quotes what it answers; the rest follow it without repeating that.
        quoted = chunk.reply_to if chunk.chunk == 0 and _is_wamid(chunk.reply_to) else None
        try:
            message_id = await self.graph.send_text(
                to=to, text=text, group=kind == "group", context_id=quoted
            )
        except GraphError as exc:
            raise _translate(exc) from exc
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"WhatsApp could not be reached: {exc}") from exc
        # The answer dismissed the typing indicator: the next turn shows it afresh.
        self._typing_shown.pop(chunk.chat_jid)
        if self.status().state == "error":
            self.connected()
        return SendResult(platform_message_id=message_id or None)

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        # WhatsApp has no "stop typing": the indicator ends with the answer or after 25 s.
        if not active:
            self._typing_shown.pop(chat_jid)
            return
        message_id = self._last_received.get(chat_jid)
        if message_id is None:
            return  # the indicator needs a received message to hang on
        now = self.context.clock().timestamp()
        shown = self._typing_shown.get(chat_jid)
        if shown is not None and shown[0] == message_id and now - shown[1] < TYPING_RESEND_S:
            return
        await self.graph.typing(message_id, timeout_s=TYPING_TIMEOUT_S)
        self._typing_shown.put(chat_jid, (message_id, now))


def _is_wamid(value: str | None) -> bool:
    return bool(value) and str(value).startswith("wamid.")


def _address(chat_jid: str) -> tuple[str, str]:
    """``whatsapp:user/<wa_id>`` or ``whatsapp:group/<id>`` → (kind, recipient)."""
    platform, room = split_jid(chat_jid)
    kind, _, ident = room.partition("/")
    if platform != "whatsapp" or kind not in ("user", "group") or not ident or "/" in ident:
        raise DeliveryFailed(
            f"{chat_jid!r} is not a WhatsApp chat address (whatsapp:user/<wa_id> or "
            "whatsapp:group/<id>).",
            permanent=True,
        )
    return kind, decode_id_part(ident)


def _translate(exc: GraphError) -> PostroomError:
    if exc.status == 429 or exc.code in RATE_LIMIT_CODES:
        return RateLimitedByPlatform(f"WhatsApp rate limit: {exc}", retry_after=exc.retry_after)
    if exc.code in PERMANENT_CODES:
        return DeliveryFailed(f"WhatsApp cannot deliver to this chat: {exc}", permanent=True)
    return DeliveryFailed(f"WhatsApp refused the message: {exc}")


def _placeholder(attachment: Attachment) -> str:
    """Words for a message that is only a file."""
    labels = {
        "voice": VOICE_PLACEHOLDER,
        "image": "[Image]",
        "video": "[Video]",
        "sticker": "[Sticker]",
    }
    if attachment.kind in labels:
        return labels[attachment.kind]
    return f"[File: {attachment.name}]" if attachment.name else "[File]"
