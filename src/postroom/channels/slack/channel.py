"""The Slack adapter: Events API (signed webhooks) or Socket Mode in, ``chat.postMessage`` out.

Inbound, both modes share one path (:meth:`SlackChannel.handle_payload`): the event becomes
an :class:`InboundMessage` (``events``), files are fetched with the bot token, and the message
is ingested; only then is Slack acknowledged — the HTTP 200 of the Events API, the envelope
ack of Socket Mode. Slack sends the same message as a ``message`` and an ``app_mention`` event;
both carry the same ``ts``, which is the message id and therefore the dedupe key (so are
Slack's retries, ``X-Slack-Retry-Num``). Registered slash commands (``/new``, ``/stop``,
``/status``, ``/chatid``) arrive as their own payload — a signed form POST to
``/channels/slack/commands``, or a ``slash_commands`` envelope — and are ingested as the command
they stand for, addressed to the bot; the answer is a host message in the chat, as for a typed
command, and a refusal is shown to the person alone.

Outbound, a reply goes into the thread it belongs to: the thread of its topic (a Slack
``thread_ts`` normalized by postroom, turned back here), else — in channels — a new thread
under the message it answers. Slack has no typing indicator for bots: typing is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import Clock as SignatureClock
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from postroom.channels.base import BaseChannel, FormattingRejected, RateLimitedByPlatform
from postroom.channels.recent import Recent
from postroom.channels.slack.config import SlackConfig
from postroom.channels.slack.directory import Directory
from postroom.channels.slack.events import (
    BotIdentity,
    SlackMessage,
    is_ts,
    parse_event,
    parse_slash_command,
    thread_ts_of_topic,
    timestamp_of,
)
from postroom.channels.slack.files import FileFetcher, content_with_files
from postroom.core.decision import Action
from postroom.core.errors import InvalidInput
from postroom.core.jid import decode_id_part, split_jid
from postroom.core.messages import InboundMessage
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["COMMANDS_PATH", "EVENTS_PATH", "SlackChannel"]

log = structlog.get_logger(__name__)

EVENTS_PATH = "/channels/slack/events"
COMMANDS_PATH = "/channels/slack/commands"
#: The chat is gone or the bot is out of it: retrying cannot help.
PERMANENT_ERRORS = frozenset(
    {"channel_not_found", "not_in_channel", "is_archived", "account_inactive", "token_revoked"}
)
#: Slack refused the markup (only blocks can be malformed; mrkdwn text never is, in practice).
FORMAT_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "markdown_text_conflict"})
MAX_BACKOFF_S = 60.0


class _ContextClock(SignatureClock):
    """The signature window measured on postroom's clock (tests move it by hand)."""

    def __init__(self, channel: SlackChannel) -> None:
        self._channel = channel

    def now(self) -> float:
        return self._channel.context.clock().timestamp()


class SlackChannel(BaseChannel):
    name = "slack"
    platforms = ("slack",)
    format_style = "slack_mrkdwn"

    def __init__(self, config: SlackConfig) -> None:
        super().__init__()
        self._config = config
        self._verifier = SignatureVerifier(config.signing_secret or "unused", _ContextClock(self))
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._http: httpx.AsyncClient | None = None
        self._files: FileFetcher | None = None
        self._socket: SocketModeClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._bot: BotIdentity | None = None
        self._directory = Directory(lambda: self.web)
        #: (channel, ts) of messages written inside a thread → that thread's ts.
        self._parents: Recent[tuple[str, str], str] = Recent(4096)
        #: postroom message id → the thread its first chunk went to (later chunks follow).
        self._sent_threads: Recent[str, str] = Recent(1024)
        #: (channel, ts) ingested lately: the app_mention twin of a message is skipped.
        self._seen: Recent[tuple[str, str], bool] = Recent(4096)

    @property
    def config(self) -> SlackConfig:
        return self._config

    @property
    def bot(self) -> BotIdentity | None:
        return self._bot

    async def fetch_attachment(self, url: str, *, cap_bytes: int) -> bytes | None:
        """A file left for after the acknowledgement (see ``files``), with the bot token."""
        if self._files is None:
            return None
        return await self._files.fetch(url, cap_bytes)

    # -- lifecycle ---------------------------------------------------------------------------
    async def do_start(self) -> None:
        self._session = aiohttp.ClientSession()
        self._web = AsyncWebClient(
            token=self._config.bot_token,
            base_url=self._config.api_url,
            session=self._session,
            timeout=10,
        )
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(10.0))
        self._files = FileFetcher(
            client=self._http, token=self._config.bot_token, api_url=self._config.api_url
        )
        if self._config.resolved_mode == "socket":
            self._task = asyncio.create_task(self._run_socket(), name="slack-socket-mode")
            return
        try:
            await self._identify()
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            self.failed(exc)
            self._task = asyncio.create_task(self._identify_later(), name="slack-identify")

    async def do_stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._socket is not None:
            await self._socket.close()  # type: ignore[no-untyped-call]  # slack-sdk leaves it untyped
            self._socket = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._web = None

    async def do_check(self) -> str:
        identity = await self._auth_test()
        return f"Slack workspace {identity.team_id} as bot user {identity.user_id}"

    def routes(self) -> list[BaseRoute]:
        if self._config.resolved_mode != "events":
            return []
        return [
            Route(EVENTS_PATH, self._events, methods=["POST"]),
            Route(COMMANDS_PATH, self._commands, methods=["POST"]),
        ]

    @property
    def web(self) -> AsyncWebClient:
        if self._web is None:
            raise RuntimeError("the slack channel is not started")
        return self._web

    async def _auth_test(self) -> BotIdentity:
        response = await self.web.auth_test()
        return BotIdentity(
            user_id=str(response.get("user_id") or ""),
            bot_id=str(response.get("bot_id") or ""),
            team_id=str(response.get("team_id") or ""),
        )

    async def _identify(self) -> None:
        self._bot = await self._auth_test()
        self.connected(f"bot user {self._bot.user_id} in {self._bot.team_id}")

    async def _identify_later(self) -> None:
        delay_s = 1.0
        while True:
            await asyncio.sleep(delay_s)
            try:
                await self._identify()
                return
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
                self.failed(exc)
                delay_s = min(delay_s * 2, MAX_BACKOFF_S)

    async def _run_socket(self) -> None:
        """Identify, then hold a Socket Mode connection (the SDK reconnects by itself)."""
        delay_s = 1.0
        while self._bot is None:
            try:
                await self._identify()
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
                self.failed(exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, MAX_BACKOFF_S)
        assert self._config.app_token is not None
        socket = SocketModeClient(
            app_token=self._config.app_token, web_client=self.web, auto_reconnect_enabled=True
        )
        socket.socket_mode_request_listeners.append(self._on_socket_request)
        self._socket = socket
        await socket.connect()  # type: ignore[no-untyped-call]  # slack-sdk leaves it untyped
        self.connected(f"socket mode, bot user {self._bot.user_id} in {self._bot.team_id}")

    # -- inbound -------------------------------------------------------------------------------
    async def _signed_body(self, request: Request) -> bytes | Response:
        """The body of a request Slack signed, or the refusal to answer with."""
        body = await request.body()
        if len(body) > self._config.max_body_bytes:
            return JSONResponse({"error": "The body is too large."}, status_code=413)
        try:
            valid = self._verifier.is_valid_request(body, dict(request.headers))
        except ValueError:  # a timestamp that is not a number
            valid = False
        if not valid:
            return JSONResponse(
                {"error": "Missing, stale or wrong X-Slack-Signature."}, status_code=401
            )
        return body

    async def _events(self, request: Request) -> Response:
        body = await self._signed_body(request)
        if isinstance(body, Response):
            return body
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": "The body is not JSON."}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": "The body is not a JSON object."}, status_code=400)
        if payload.get("type") == "url_verification":
            return JSONResponse({"challenge": str(payload.get("challenge") or "")})
        await self.handle_payload(payload)
        return Response(status_code=200)

    async def _commands(self, request: Request) -> Response:
        body = await self._signed_body(request)
        if isinstance(body, Response):
            return body
        # A body that passed the signature check is UTF-8 (the check decodes it).
        fields = dict(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        refusal = await self.handle_command(fields)
        if refusal is None:
            return Response(status_code=200)
        # Shown to the person who typed the command, and to nobody else.
        return JSONResponse({"response_type": "ephemeral", "text": refusal})

    async def _on_socket_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        refusal: str | None = None
        if request.type == "events_api":
            await self.handle_payload(request.payload)
        elif request.type == "slash_commands":
            refusal = await self.handle_command(request.payload)
        # Acknowledged only once ingested: an exception above leaves it for Slack to resend.
        answer = {"text": refusal} if refusal is not None else None
        await client.send_socket_mode_response(
            SocketModeResponse(request.envelope_id, payload=answer)
        )

    async def handle_command(self, fields: Mapping[str, Any]) -> str | None:
        """Ingest a registered slash command as the command it stands for (the path both modes
        share). The answer reaches the chat as a host message; what is returned is a sentence
        for the person alone when the command was refused or not carried out."""
        try:
            command = parse_slash_command(fields)
        except InvalidInput as exc:
            return str(exc)
        kind = command.kind or await self._directory.kind(command.channel_id, None)
        name = await self._directory.name(command.user_id)
        inbound = command.inbound(kind, name, self.context.clock())
        try:
            result = await self.receive(inbound)
        except InvalidInput as exc:
            return str(exc)
        if result is not None and result.decision.action is Action.IGNORE:
            return f"{command.content} was not carried out: no agent answers in this channel."
        return None

    async def handle_payload(self, payload: Mapping[str, Any]) -> None:
        """Ingest the message an ``event_callback`` carries (the path both modes share)."""
        event = payload.get("event")
        if payload.get("type") != "event_callback" or not isinstance(event, Mapping):
            return
        if event.get("type") not in ("message", "app_mention"):
            return
        channel_id = str(event.get("channel") or "")
        if not channel_id:
            return
        kind = await self._directory.kind(channel_id, event.get("channel_type"))
        message = parse_event(
            payload,
            event,
            kind=kind,
            bot=self._bot,
            assistant_name=self.context.assistant_name,
        )
        if message is None:
            return
        key = (message.channel_id, message.ts)
        if self._seen.get(key):
            return
        if message.topic:
            self._parents.put(key, message.topic)
        inbound = await self._inbound(message)
        try:
            await self.receive(inbound)
        except InvalidInput as exc:  # TooLarge included: acknowledged, never redelivered
            log.warning("slack.message_refused", ts=message.ts, error=str(exc))
        self._seen.put(key, True)

    async def _inbound(self, message: SlackMessage) -> InboundMessage:
        attachments: tuple[Any, ...] = ()
        name = ""
        if not message.is_from_me:
            name = await self._directory.name(message.user_id)
            if message.files and self._files is not None:
                attachments = await self._files.attachments(
                    message.files,
                    cap_bytes=self.context.image_bytes,
                    file_cap_bytes=self.context.file_bytes,
                )
        metadata: dict[str, Any] = {
            "slack": {
                "ts": message.ts,
                "thread_ts": message.thread_ts or None,
                "channel": message.channel_id,
                "team": message.team_id,
                "event_id": message.event_id or None,
                "subtype": message.subtype or None,
            }
        }
        return InboundMessage(
            id=message.ts,
            chat_jid=message.chat_jid,
            sender=message.sender,
            content=content_with_files(message.text, attachments),
            timestamp=timestamp_of(message.ts),
            sender_name=name or message.user_id,
            reply_to=message.reply_to,
            topic=message.topic,
            mentioned=message.mentioned,
            is_dm=message.kind == "dm",
            is_from_me=message.is_from_me,
            attachments=attachments,
            metadata=metadata,
        )

    # -- outbound ------------------------------------------------------------------------------
    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        kind, channel_id = _address(chunk.chat_jid)
        thread_ts = self._thread_for(chunk, kind, channel_id)
        try:
            response = await self.web.chat_postMessage(
                channel=channel_id,
                text=text,
                mrkdwn=style == "slack_mrkdwn",
                thread_ts=thread_ts,
            )
        except SlackApiError as exc:
            raise _translate(exc, style) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryFailed(f"Slack could not be reached: {exc}") from exc
        ts = str(response.get("ts") or "")
        if chunk.chunk == 0:
            self._sent_threads.put(chunk.message_id, thread_ts or "")
        return SendResult(platform_message_id=ts or None)

    def _thread_for(self, chunk: OutgoingChunk, kind: str, channel_id: str) -> str | None:
        if chunk.chunk > 0:
            earlier = self._sent_threads.get(chunk.message_id)
            if earlier is not None:
                return earlier or None
        if chunk.topic:
            thread = thread_ts_of_topic(chunk.topic)
            if thread is not None:
                return thread
        reply_to = chunk.reply_to
        if reply_to and is_ts(reply_to):
            parent = self._parents.get((channel_id, reply_to))
            if parent is not None:
                return parent
            if self._config.reply_in_thread and kind != "dm":
                return reply_to
        return None

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        # Slack offers bots no typing indicator (only the legacy RTM API had one).
        return None


def _address(chat_jid: str) -> tuple[str, str]:
    """``slack:<team>/<kind>/<id>`` → (kind, channel id)."""
    platform, room = split_jid(chat_jid)
    parts = room.split("/")
    if platform != "slack" or len(parts) != 3 or parts[1] not in ("channel", "group", "dm"):
        raise DeliveryFailed(
            f"{chat_jid!r} is not a Slack chat address (slack:<team>/channel|group|dm/<id>).",
            permanent=True,
        )
    return parts[1], decode_id_part(parts[2])


def _translate(exc: SlackApiError, style: str) -> Exception:
    response = exc.response
    error = str(response.get("error") or "") if isinstance(response.data, dict) else ""
    if response.status_code == 429 or error == "ratelimited":
        retry_after = response.headers.get("Retry-After") or response.headers.get("retry-after")
        return RateLimitedByPlatform(
            f"Slack rate limit ({error or response.status_code})",
            retry_after=_seconds(retry_after),
        )
    if error in PERMANENT_ERRORS:
        return DeliveryFailed(f"Slack refused the chat: {error}", permanent=True)
    if error in FORMAT_ERRORS and style != "plain":
        return FormattingRejected(f"Slack refused the formatting: {error}")
    return DeliveryFailed(f"Slack refused the message: {error or response.status_code}")


def _seconds(value: Any) -> float | None:
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return None
