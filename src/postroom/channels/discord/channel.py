"""The Discord adapter: a bot on the gateway (discord.py) in, REST messages out.

Inbound, each ``MESSAGE_CREATE`` becomes an :class:`InboundMessage` with ROUTING §1's
addresses (see :mod:`.inbound`); a message in a thread belongs to the thread's parent channel
and carries the thread id as its native topic. Messages are handed to ingest one at a time, in
the order the gateway delivered them. The gateway has no acknowledgement, and Discord never
redelivers: an event is done once ingest returned (or refused it).

Outbound, a chunk is posted to the chat's channel — into the thread when its topic is a thread
id — as a reply (``message_reference``) to the message it answers, with ``@everyone`` and role
pings disabled.

Rate limits: discord.py waits out short limits itself, per bucket, exactly as long as Discord
says (which is what the outbox would do), but only up to ``max_ratelimit_timeout`` — set to
its floor of 30 s — and raises :class:`discord.RateLimited` at once for longer ones. Each send is
also bounded by ``send_timeout`` as a whole, so a burst of 429s never holds a chat's delivery
for long. Both surface as :class:`RateLimitedByPlatform`/``DeliveryFailed`` for the outbox.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import mimetypes
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog

from postroom.channels.base import BaseChannel, FormattingRejected, RateLimitedByPlatform
from postroom.channels.discord._sdk import discord
from postroom.channels.discord.config import DiscordConfig, parse_config
from postroom.channels.discord.endpoints import Endpoints
from postroom.channels.discord.inbound import (
    Place,
    channel_of,
    is_snowflake,
    mentions_bot,
    readable_content,
    reply_target,
    sender_jid,
)
from postroom.core.errors import ConfigError, InvalidInput, PostroomError
from postroom.core.formatting import format_within
from postroom.core.messages import Attachment, InboundMessage
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["DiscordChannel", "build"]

log = structlog.get_logger(__name__)

#: Discord's limit on a message's content, in characters as sent (escapes count).
MESSAGE_LIMIT = 2000
#: discord.py refuses anything lower: it waits out shorter limits itself.
MAX_RATELIMIT_WAIT_S = 30.0
#: A typing indicator is best-effort; the typing relay must not wait on a slow one.
TYPING_TIMEOUT_S = 5.0
LOGIN_TIMEOUT_S = 30.0
RECONNECT_MAX_S = 300.0
#: Message types that carry what a person wrote (the rest are system notices: joins, pins…).
_CONVERSATION_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
#: Discord's "Invalid Form Body": the request itself is wrong (too long, bad field).
_INVALID_FORM_BODY = 50035
_PARENTS_CACHE = 4096
_NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
_HTTP_ERRORS = (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError)
_SEND_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError)


def build(section: Mapping[str, Any]) -> DiscordChannel:
    """The adapter for ``[channels.discord]``; ConfigError naming the key on a bad section."""
    return DiscordChannel(parse_config(section))


class _Client(discord.Client):
    """discord.py's client, handing gateway events to the adapter."""

    def __init__(self, adapter: DiscordChannel, **options: Any) -> None:
        super().__init__(**options)
        self._adapter = adapter

    async def on_message(self, message: discord.Message) -> None:
        # discord.py runs each handler as its own task, in the order events arrived; queueing
        # before the first await keeps that order for ingest.
        self._adapter.arrived(message)

    async def on_connect(self) -> None:
        self._adapter.gateway_up()

    async def on_resumed(self) -> None:
        self._adapter.gateway_up()

    async def on_disconnect(self) -> None:
        self._adapter.gateway_down()


class DiscordChannel(BaseChannel):
    name = "discord"
    platforms = ("discord",)
    format_style = "discord"

    def __init__(self, config: DiscordConfig) -> None:
        super().__init__()
        self._config = config
        self._endpoints = Endpoints(base_url=config.base_url, gateway_url=config.gateway_url)
        self._client: _Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[discord.Message] = asyncio.Queue()
        self._stopping = asyncio.Event()
        #: channel id -> its parent channel when it is a thread, else None (looked up once).
        self._parents: dict[int, int | None] = {}
        #: chat -> the channel (or thread) its latest message came from, for typing.
        self._last_place: dict[str, int] = {}

    @property
    def config(self) -> DiscordConfig:
        return self._config

    # -- lifecycle ---------------------------------------------------------------------------
    async def do_start(self) -> None:
        self._stopping.clear()
        self._endpoints.apply()
        try:
            client = await self._login()
        except ConfigError:
            self._endpoints.restore()
            raise
        except _HTTP_ERRORS as exc:
            # Discord is unreachable right now: keep trying in the background.
            self.failed(exc)
            client = None
        self._consumer = asyncio.create_task(self._consume(), name="discord-inbound")
        self._runner = asyncio.create_task(self._run(client), name="discord-gateway")

    async def do_stop(self) -> None:
        self._stopping.set()
        for task in (self._runner, self._consumer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._runner = self._consumer = None
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        self._endpoints.restore()

    async def do_check(self) -> str:
        with self._endpoints.applied():
            client = await self._login()
            try:
                user = client.user
                return f"logged in to Discord as {user} (id {user.id if user else '?'})"
            finally:
                await client.close()

    async def _login(self) -> _Client:
        """A client logged in over REST (``/users/@me``, ``/oauth2/applications/@me``)."""
        client = _Client(
            self,
            intents=self._intents(),
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
            max_messages=None,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            allowed_mentions=discord.AllowedMentions(
                everyone=False, roles=False, users=True, replied_user=True
            ),
        )
        try:
            async with asyncio.timeout(LOGIN_TIMEOUT_S):
                await client.login(self._config.token)
        except discord.LoginFailure as exc:
            await client.close()
            raise ConfigError(
                "token: Discord refused the bot token (401); copy it again from the developer "
                "portal (Bot → Reset Token)."
            ) from exc
        except BaseException:
            await client.close()
            raise
        return client

    def _intents(self) -> discord.Intents:
        intents = discord.Intents.none()
        intents.guilds = True  # channels and threads, to place a message in its parent channel
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = self._config.message_content
        return intents

    async def _run(self, client: _Client | None) -> None:
        """Stay connected to the gateway; log in again with backoff after a fatal close."""
        delay_s = 1.0
        while not self._stopping.is_set():
            try:
                if client is None:
                    client = await self._login()
                self._client = client
                # Reconnects and resumes after network trouble on its own; returns or raises
                # only when the connection cannot go on (closed, bad token, missing intent).
                await client.connect(reconnect=True)
                if self._stopping.is_set():
                    return
                self.failed("the Discord gateway closed the connection; reconnecting")
            except discord.PrivilegedIntentsRequired as exc:
                self.failed(
                    "Discord refused the Message Content intent: enable it for the bot in the "
                    "developer portal (Bot → Privileged Gateway Intents), or set "
                    "message_content = false"
                )
                log.debug("discord.intents_refused", error=str(exc))
            except (ConfigError, *_SEND_ERRORS) as exc:
                self.failed(exc)
            if client is not None:
                self._client = None
                await client.close()
                client = None
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, RECONNECT_MAX_S)

    def gateway_up(self) -> None:
        user = self._client.user if self._client is not None else None
        self.connected(f"gateway connected as {user}" if user else "gateway connected")

    def gateway_down(self) -> None:
        # discord.py reports a disconnect after the error that caused it has been recorded;
        # only a connection that was up is news (the cause stays visible otherwise).
        if not self._stopping.is_set() and self.status().state == "connected":
            self.failed("disconnected from the Discord gateway; reconnecting")

    # -- inbound -------------------------------------------------------------------------------
    def arrived(self, message: discord.Message) -> None:
        self._queue.put_nowait(message)

    async def _consume(self) -> None:
        while True:
            message = await self._queue.get()
            try:
                await self._handle(message)
            except InvalidInput as exc:  # TooLarge included: refused, nothing stored
                log.warning("discord.message_refused", message_id=message.id, error=str(exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # One event that cannot be stored must not stop every later one; Discord will
                # not redeliver it either way, so it is recorded where an operator looks.
                log.exception("discord.message_failed", message_id=message.id)
                self.failed(exc)

    async def _handle(self, message: discord.Message) -> None:
        client = self._client
        if client is None or client.user is None:
            return
        bot_id = client.user.id
        from_me = message.author.id == bot_id
        if not from_me and message.author.bot and self._config.ignore_bots:
            return
        if message.type not in _CONVERSATION_TYPES:
            return
        place = await self._place(client, message)
        attachments = () if from_me else await self._attachments(message)
        content = readable_content(message, bot_id)
        if not content.strip():
            content = _describe(message, attachments)
        if not content:
            return  # nothing a person could read: an embed-only or empty message
        metadata: dict[str, str] = {"channel_id": str(place.channel_id)}
        if place.guild_id is not None:
            metadata["guild_id"] = str(place.guild_id)
        if place.thread_id is not None:
            metadata["thread_id"] = str(place.thread_id)
        inbound = InboundMessage(
            id=str(message.id),
            chat_jid=place.chat_jid,
            sender=sender_jid(message.author.id),
            content=content,
            timestamp=message.created_at,
            sender_name=message.author.display_name,
            reply_to=reply_target(message),
            topic=str(place.thread_id) if place.thread_id is not None else "",
            mentioned=not from_me and mentions_bot(message, bot_id),
            is_dm=place.is_dm,
            is_from_me=from_me,
            attachments=attachments,
            metadata={"discord": metadata},
        )
        await self.receive(inbound)
        if not from_me:
            self._last_place[place.chat_jid] = place.written_in

    async def _place(self, client: _Client, message: discord.Message) -> Place:
        channel = message.channel
        if message.guild is not None:
            guild_id: int | None = message.guild.id
        elif isinstance(channel, discord.PartialMessageable):
            guild_id = channel.guild_id
        else:
            guild_id = None
        if guild_id is None:
            return Place(None, channel.id)
        if isinstance(channel, discord.Thread):
            return Place(guild_id, channel.parent_id, channel.id)
        if not isinstance(channel, discord.PartialMessageable):
            return Place(guild_id, channel.id)
        # A channel the cache does not know (its guild not streamed yet, a thread created
        # before the bot could see it): ask Discord once whether it is a thread.
        if channel.id not in self._parents:
            if len(self._parents) >= _PARENTS_CACHE:
                self._parents.clear()
            self._parents[channel.id] = await self._parent_of(client, channel.id)
        parent = self._parents[channel.id]
        return Place(guild_id, parent, channel.id) if parent else Place(guild_id, channel.id)

    async def _parent_of(self, client: _Client, channel_id: int) -> int | None:
        try:
            found = await client.fetch_channel(channel_id)
        except (*_HTTP_ERRORS, discord.InvalidData) as exc:
            log.info("discord.channel_lookup_failed", channel_id=channel_id, error=str(exc))
            return None
        if isinstance(found, discord.Thread):
            return found.parent_id
        return None

    async def _attachments(self, message: discord.Message) -> tuple[Attachment, ...]:
        cap, file_cap = self.context.image_bytes, self.context.file_bytes
        found: list[Attachment] = []
        for item in message.attachments:
            mime = _mime(item)
            if item.is_voice_message() or message.flags.voice or mime.startswith("audio/"):
                found.append(await self._fetched("voice", item, mime or "audio/ogg", cap))
            elif mime.startswith("image/"):
                found.append(await self._fetched("image", item, mime, cap))
            else:
                found.append(await self._fetched("file", item, mime, file_cap))
        return tuple(found)

    async def _fetched(
        self, kind: str, item: discord.Attachment, mime: str, cap: int
    ) -> Attachment:
        """An image, voice note or file with its bytes inline (Discord's signed CDN links
        expire within a day; the worker transcribes voice later), or only its link when it is
        over the cap or cannot be fetched."""
        bare = Attachment(kind, mime, item.filename, item.size, url=item.url)
        if item.size > cap:
            return bare
        try:
            body = await item.read()
        except _HTTP_ERRORS as exc:
            log.info("discord.attachment_fetch_failed", url=item.url, error=str(exc))
            return bare
        if len(body) > cap:
            return bare
        data = base64.b64encode(body).decode("ascii")
        return Attachment(kind, mime, item.filename, len(body), url=item.url, data=data)

    # -- outbound ------------------------------------------------------------------------------
    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        try:
            channel_id = channel_of(chunk.chat_jid)
        except ValueError as exc:
            raise DeliveryFailed(str(exc), permanent=True) from exc
        if not text.strip():
            return SendResult()  # Discord refuses empty messages; there is nothing to show
        client = self._client
        if client is None:
            raise DeliveryFailed("not connected to Discord yet")
        in_guild = chunk.chat_jid.startswith("discord:guild/")
        thread_id = int(chunk.topic) if in_guild and is_snowflake(chunk.topic) else None
        reference = (
            discord.MessageReference(
                message_id=int(chunk.reply_to),
                channel_id=thread_id or channel_id,
                fail_if_not_exists=False,
            )
            if chunk.reply_to is not None and is_snowflake(chunk.reply_to)
            else None
        )
        pieces = [text]
        if len(text) > MESSAGE_LIMIT:
            # Escapes can lengthen a full chunk past the limit: cut its source again.
            pieces = format_within(style, self.render(chunk), MESSAGE_LIMIT)
        sent = await self._send_piece(client, channel_id, thread_id, pieces[0], reference, style)
        for piece in pieces[1:]:
            await self._send_piece(client, channel_id, thread_id, piece, None, style)
        return SendResult(platform_message_id=str(sent.id))

    async def _send_piece(
        self,
        client: _Client,
        channel_id: int,
        thread_id: int | None,
        text: str,
        reference: discord.MessageReference | None,
        style: str,
    ) -> discord.Message:
        try:
            return await self._post(client, thread_id or channel_id, text, reference)
        except (discord.Forbidden, discord.NotFound) as exc:
            if thread_id is None:
                raise _send_error(exc, style) from exc
            # The thread is gone or closed to the bot: the answer still belongs in the chat.
            log.info("discord.thread_unavailable", thread_id=thread_id, error=str(exc))
            try:
                return await self._post(client, channel_id, text, None)
            except _SEND_ERRORS as again:
                raise _send_error(again, style) from again
        except _SEND_ERRORS as exc:
            raise _send_error(exc, style) from exc

    async def _post(
        self,
        client: _Client,
        channel_id: int,
        text: str,
        reference: discord.MessageReference | None,
    ) -> discord.Message:
        channel = client.get_partial_messageable(channel_id)
        async with asyncio.timeout(self._config.send_timeout_s):
            if reference is None:
                return await channel.send(content=text)
            return await channel.send(content=text, reference=reference)

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        # Discord has no "stop typing": the indicator ends with the next message or after
        # about 10 s, so stopping sends nothing (postroom refreshes it every few seconds).
        client = self._client
        if not active or client is None:
            return
        channel_id = self._last_place.get(chat_jid) or channel_of(chat_jid)
        async with asyncio.timeout(TYPING_TIMEOUT_S):
            await client.get_partial_messageable(channel_id).typing()


def _mime(item: discord.Attachment) -> str:
    declared = item.content_type or mimetypes.guess_type(item.filename)[0] or ""
    return declared.split(";")[0].strip().lower()


def _describe(message: discord.Message, attachments: tuple[Attachment, ...]) -> str:
    """Words for a message without text, so a model never gets an empty turn."""
    parts: list[str] = []
    for attachment in attachments:
        if attachment.kind == "voice":
            parts.append("[Voice message]")
        elif attachment.kind == "image":
            parts.append(f"[Image: {attachment.name}]")
        else:
            parts.append(f"[File: {attachment.name}]")
    parts.extend(f"[Sticker: {sticker.name}]" for sticker in message.stickers)
    return " ".join(parts)


def _send_error(exc: Exception, style: str) -> PostroomError:
    """Discord's refusal of a send, as the outbox understands it."""
    if isinstance(exc, discord.RateLimited):
        return RateLimitedByPlatform(str(exc), retry_after=exc.retry_after)
    if isinstance(exc, discord.HTTPException):
        detail = f"Discord answered {exc.status}: {exc.text or exc}"
        if exc.status == 429:
            return RateLimitedByPlatform(detail, retry_after=_retry_after(exc))
        if isinstance(exc, (discord.Forbidden, discord.NotFound)):
            # The channel is gone, or the bot was removed or lost the right to post.
            return DeliveryFailed(detail, permanent=True)
        if exc.status == 400 and exc.code == _INVALID_FORM_BODY and "content" in exc.text:
            if style != "plain":
                return FormattingRejected(detail)
            return DeliveryFailed(detail, permanent=True)
        # 401: the token was revoked — a restart with a new one delivers what is left.
        return DeliveryFailed(detail, permanent=exc.status == 400)
    if isinstance(exc, TimeoutError):
        return DeliveryFailed("Discord did not take the message in time")
    if isinstance(exc, _NETWORK_ERRORS):
        return DeliveryFailed(f"cannot reach Discord: {type(exc).__name__}: {exc}")
    return DeliveryFailed(f"{type(exc).__name__}: {exc}")


def _retry_after(exc: discord.HTTPException) -> float | None:
    """A 429 discord.py did not wait out (a Cloudflare limit, or retries used up)."""
    headers = getattr(exc.response, "headers", None) or {}
    for header in ("Retry-After", "X-RateLimit-Reset-After"):
        raw = headers.get(header)
        if raw:
            with contextlib.suppress(ValueError):
                return max(float(raw), 0.0)
    return None
