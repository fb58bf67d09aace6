"""The Telegram adapter: a bot account through python-telegram-bot's ``Bot`` (Bot API over httpx).

Updates arrive by long polling (default) or by webhook (``POST /channels/telegram/webhook``).
Either way an update is acknowledged only after ingest committed it (PIPELINE §1.3):

* polling: the offset handed to ``getUpdates`` moves past an update only once ``receive``
  returned, so a crash — or a failing database — makes Telegram deliver it again (ingest
  dedupes on the message id). The SDK's ``Updater`` confirms updates as soon as it fetched
  them, which is why this adapter runs its own loop over ``Bot.get_updates``.
* webhook: the answer (200) is written after ``receive`` returned; a wrong or missing
  ``X-Telegram-Bot-Api-Secret-Token`` is 401 and nothing is stored.

Input that ingest refuses (``InvalidInput``, ``TooLarge``) and updates the SDK cannot read
(:mod:`.request`) are logged and acknowledged, so Telegram does not offer them forever.

Outbound: ``sendMessage`` with ``parse_mode=HTML``, threaded under the triggering message and
into the forum topic; a chunk whose text is still over Telegram's 4,096 characters once
formatted (a display prefix can push it over) goes out as several messages. Typing is
``sendChatAction``, refreshed while the turn runs (:mod:`.chat_action`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from dataclasses import replace
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from telegram import Bot, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import InvalidToken, TelegramError

from postroom.channels.base import BaseChannel
from postroom.channels.telegram.chat_action import TypingKeeper
from postroom.channels.telegram.config import TelegramConfig
from postroom.channels.telegram.inbound import BotIdentity, chat_id_for, normalize
from postroom.channels.telegram.media import fetch_attachments
from postroom.channels.telegram.outbound import (
    Placement,
    is_missing_thread,
    placement_of,
    split_overlong,
    translate_send_error,
)
from postroom.channels.telegram.request import FloodWait, TelegramRequest
from postroom.core.errors import InvalidInput, PostroomError
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["WEBHOOK_PATH", "TelegramChannel", "TelegramUnavailable"]

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/channels/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_WEBHOOK_BODY = 1024 * 1024
#: How many chats remember the forum topic they last wrote in (for the typing indicator).
TOPIC_MEMORY = 1024


class TelegramUnavailable(PostroomError):
    """The Bot API could not be reached or refused the token."""


class TelegramChannel(BaseChannel):
    name = "telegram"
    platforms = ("telegram",)
    format_style = "telegram_html"

    def __init__(
        self,
        config: TelegramConfig,
        *,
        retry_base_s: float = 1.0,
        retry_max_s: float = 60.0,
        stop_grace_s: float = 10.0,
        typing_refresh_s: float = 4.0,
        typing_linger_s: float = 30.0,
    ) -> None:
        super().__init__()
        self._config = config
        self._retry_base_s = retry_base_s
        self._retry_max_s = retry_max_s
        self._stop_grace_s = stop_grace_s
        self._bot: Bot | None = None
        self._updates_request: TelegramRequest | None = None
        self._me: BotIdentity | None = None
        self._poller: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        #: The poll loop is handing updates to ingest: let it finish rather than cancel it.
        self._busy = False
        self._offset: int | None = None
        self._topics: dict[str, int] = {}
        self._connect_lock = asyncio.Lock()
        self._typing = TypingKeeper(
            self._send_typing, refresh_s=typing_refresh_s, linger_s=typing_linger_s
        )

    @property
    def identity(self) -> BotIdentity | None:
        """The bot's id and username once ``getMe`` answered."""
        return self._me

    @property
    def typing_chats(self) -> frozenset[str]:
        """The chats the bot is shown typing in right now."""
        return self._typing.active()

    # -- lifecycle ---------------------------------------------------------------------------
    async def do_start(self) -> None:
        base = self._config.base_url
        poll_read_s = float(self._config.poll_timeout) + 10.0
        self._updates_request = TelegramRequest(connection_pool_size=1, read_timeout=poll_read_s)
        self._bot = Bot(
            self._config.token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            request=TelegramRequest(read_timeout=20.0, media_write_timeout=30.0),
            get_updates_request=self._updates_request,
        )
        self._stopping = asyncio.Event()
        self._offset = None
        self._me = None
        try:
            await self._connect()
        except InvalidToken as exc:
            await self._close_bot()
            raise TelegramUnavailable(
                "Telegram refused the bot token; check [channels.telegram] token."
            ) from exc
        except TelegramError as exc:
            # Unreachable for now: the poll loop (or the next webhook call) keeps trying.
            self.failed(exc)
        if self._config.mode == "polling" and self.listening:
            self._poller = asyncio.create_task(self._poll(), name="telegram-poll")

    @property
    def single_connection(self) -> bool:
        # One getUpdates caller per bot: Telegram answers a second one with a conflict.
        return self._config.mode == "polling"

    async def do_listen(self) -> None:
        self._stopping = asyncio.Event()
        self._offset = None  # what the last poller did not confirm comes again (ingest dedupes)
        self._poller = asyncio.create_task(self._poll(), name="telegram-poll")

    async def do_unlisten(self) -> None:
        self._stopping.set()
        await self._stop_poller()

    async def do_stop(self) -> None:
        self._stopping.set()
        await self._typing.close()
        await self._stop_poller()
        await self._close_bot()

    async def _stop_poller(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            if not self._busy:
                poller.cancel()  # waiting on Telegram or backing off: nothing to lose
            # An update being ingested finishes first (its offset is confirmed below).
            done, _ = await asyncio.wait({poller}, timeout=self._stop_grace_s)
            if not done:
                poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            await self._confirm_offset()

    async def _close_bot(self) -> None:
        bot, self._bot = self._bot, None
        if bot is not None:
            with contextlib.suppress(TelegramError, RuntimeError):
                await bot.shutdown()

    async def _connect(self) -> BotIdentity:
        """``getMe`` (who are we), then make sure updates come the configured way."""
        async with self._connect_lock:
            if self._me is not None:
                return self._me
            bot = self._require_bot()
            await bot.initialize()
            if self._config.mode == "polling":
                # getUpdates is refused while a webhook is set.
                await bot.delete_webhook()
            elif self._config.webhook_url:
                await bot.set_webhook(
                    self._config.webhook_url,
                    secret_token=self._config.webhook_secret,
                    allowed_updates=list(self._config.allowed_updates),
                )
            me = BotIdentity(bot.id, bot.username or "")
            self._me = me
            self.connected(f"@{me.username} ({self._config.mode})")
            return me

    def _require_bot(self) -> Bot:
        if self._bot is None:
            raise TelegramUnavailable("the telegram channel is not started")
        return self._bot

    # -- long polling ------------------------------------------------------------------------
    async def _poll(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                me = await self._connect()
                updates = await self._require_bot().get_updates(
                    offset=self._offset,
                    timeout=self._config.poll_timeout,
                    allowed_updates=list(self._config.allowed_updates),
                )
                unreadable = self._take_unreadable()
                if failures:
                    self.connected(f"@{me.username} (polling)")
                    failures = 0
                self._busy = True
                try:
                    for update in updates:
                        await self._handle(update, me)
                        # Only now is the update safe: the next getUpdates confirms it.
                        self._offset = update.update_id + 1
                        if self._stopping.is_set():
                            return
                    if unreadable:
                        # Set aside by the transport, logged there: acknowledged with the rest.
                        self._offset = max(self._offset or 0, max(unreadable) + 1)
                finally:
                    self._busy = False
            except Exception as exc:
                # Whatever failed — the network, the token, the database under ingest — the
                # offset did not move past the update, so retrying after a pause loses nothing.
                failures += 1
                self.failed(exc)
                await self._backoff(failures)

    def _take_unreadable(self) -> list[int]:
        request = self._updates_request
        return request.take_unreadable() if request is not None else []

    async def _backoff(self, failures: int) -> None:
        delay_s = min(self._retry_base_s * 2 ** (failures - 1), self._retry_max_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=delay_s)

    async def _confirm_offset(self) -> None:
        """Tell Telegram what was ingested, so a restart does not fetch it again."""
        bot = self._bot
        if bot is None or self._offset is None or self._me is None:
            return
        with contextlib.suppress(TelegramError, OSError):
            await bot.get_updates(offset=self._offset, timeout=0, limit=1)

    # -- inbound -----------------------------------------------------------------------------
    async def _handle(self, update: Update, me: BotIdentity) -> None:
        """Ingest one update; returns once it may be acknowledged. Raises only when ingest
        failed in a way a redelivery can fix."""
        message = update.message
        if message is None:
            return  # edits, channel posts, callbacks...: nothing postroom routes
        inbound = normalize(message, me)
        if inbound is None:
            return
        if inbound.topic:
            self._remember_topic(inbound.chat_jid, int(inbound.topic))
        if not inbound.is_from_me:
            attachments = await fetch_attachments(
                self._require_bot(),
                message,
                cap_bytes=self.context.image_bytes,
                file_cap_bytes=self.context.file_bytes,
            )
            if attachments:
                inbound = replace(inbound, attachments=attachments)
        try:
            await self.receive(inbound)
        except InvalidInput as exc:  # TooLarge included: refused for good, so acknowledged
            log.warning(
                "telegram.refused",
                update_id=update.update_id,
                chat_jid=inbound.chat_jid,
                error=str(exc),
            )

    def _remember_topic(self, chat_jid: str, thread_id: int) -> None:
        self._topics.pop(chat_jid, None)
        self._topics[chat_jid] = thread_id
        if len(self._topics) > TOPIC_MEMORY:
            self._topics.pop(next(iter(self._topics)))

    # -- webhook -----------------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        if self._config.mode != "webhook":
            return []
        return [Route(WEBHOOK_PATH, self._webhook, methods=["POST"])]

    async def _webhook(self, request: Request) -> Response:
        expected = (self._config.webhook_secret or "").encode()
        presented = request.headers.get(SECRET_HEADER, "").encode()
        if not expected or not hmac.compare_digest(expected, presented):
            return _error(401, "Missing or wrong X-Telegram-Bot-Api-Secret-Token.")
        body = await request.body()
        if len(body) > MAX_WEBHOOK_BODY:
            return _error(413, f"The update is over {MAX_WEBHOOK_BODY} bytes.")
        try:
            me = await self._connect()
        except (TelegramError, PostroomError) as exc:
            self.failed(exc)
            return _error(503, "The Bot API is unreachable; Telegram will retry.")
        try:
            payload: Any = json.loads(body)
        except ValueError as exc:
            return _error(400, f"The body is not JSON: {exc}.")
        if not isinstance(payload, dict) or not isinstance(payload.get("update_id"), int):
            return _error(400, "The body is not a Telegram Update.")
        try:
            update = Update.de_json(payload, self._require_bot())
        except Exception as exc:
            # Signed by Telegram, so an update, but one the SDK cannot read: sending it again
            # cannot help, so it is acknowledged (and logged) like refused input.
            log.warning(
                "telegram.unreadable_update",
                update_id=payload["update_id"],
                error=f"{type(exc).__name__}: {exc}",
            )
            return JSONResponse({"ok": True})
        try:
            await self._handle(update, me)
        except Exception as exc:
            # Not committed (the database, most likely): a 5xx makes Telegram send it again.
            self.failed(exc)
            return _error(503, "The update could not be stored; Telegram will retry.")
        if self.status().state == "error":
            self.connected()  # an update went through: whatever failed before is over
        return JSONResponse({"ok": True})

    # -- outbound ----------------------------------------------------------------------------
    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        try:
            chat_id = chat_id_for(chunk.chat_jid)
        except ValueError as exc:
            raise DeliveryFailed(str(exc), permanent=True) from exc
        if not text.strip():
            return SendResult(None)  # Telegram refuses empty messages; nothing to show
        placement = placement_of(chunk)
        parse_mode = ParseMode.HTML if style == "telegram_html" else None
        head, *rest = split_overlong(text, style, source=lambda: self.render(chunk))
        first = await self._send_piece(chunk.chat_jid, chat_id, head, parse_mode, placement)
        # Only the first piece answers the triggering message; the rest follow it in order.
        following = replace(placement, reply_to_message_id=None)
        for piece in rest:
            await self._send_piece(chunk.chat_jid, chat_id, piece, parse_mode, following)
        return SendResult(str(first.message_id))

    async def _send_piece(
        self, chat_jid: str, chat_id: int, text: str, parse_mode: str | None, placement: Placement
    ) -> Message:
        try:
            try:
                return await self._send_message(chat_id, text, parse_mode, placement)
            except TelegramError as exc:
                if placement.message_thread_id is None or not is_missing_thread(exc):
                    raise
                # The topic is gone (or the group is no forum): the chat itself still works.
                return await self._send_message(
                    chat_id, text, parse_mode, replace(placement, message_thread_id=None)
                )
        except TelegramError as exc:
            raise translate_send_error(exc, chat_jid=chat_jid) from exc
        except PostroomError as exc:  # not started
            raise DeliveryFailed(str(exc)) from exc

    async def _send_message(
        self, chat_id: int, text: str, parse_mode: str | None, placement: Placement
    ) -> Message:
        reply = (
            ReplyParameters(placement.reply_to_message_id, allow_sending_without_reply=True)
            if placement.reply_to_message_id is not None
            else None
        )
        return await self._require_bot().send_message(
            chat_id,
            text,
            parse_mode=parse_mode,
            message_thread_id=placement.message_thread_id,
            reply_parameters=reply,
        )

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        if active:
            await self._typing.start(chat_jid)
        else:
            # No "stop typing" in the Bot API: the indicator ends when it is not refreshed.
            self._typing.stop(chat_jid)

    async def _send_typing(self, chat_jid: str) -> None:
        try:
            await self._require_bot().send_chat_action(
                chat_id_for(chat_jid),
                ChatAction.TYPING,
                message_thread_id=self._topics.get(chat_jid),
            )
        except FloodWait:
            return  # a typing indicator is never worth waiting for
        except TelegramError as exc:
            raise TelegramUnavailable(f"sendChatAction failed: {exc}") from exc

    async def do_check(self) -> str:
        """``getMe``: proves the token and the Bot API URL (``postroom doctor``)."""
        base = self._config.base_url
        bot = self._bot or Bot(
            self._config.token, base_url=f"{base}/bot", request=TelegramRequest()
        )
        try:
            if bot is self._bot:
                me = await bot.get_me()
            else:
                # initialize() is the getMe here, and only an initialized Bot closes its
                # connections on shutdown().
                await bot.initialize()
                me = bot.bot
        except InvalidToken as exc:
            raise TelegramUnavailable("Telegram refused the bot token.") from exc
        except TelegramError as exc:
            raise TelegramUnavailable(f"The Bot API at {base} is unreachable: {exc}") from exc
        finally:
            if bot is not self._bot:
                with contextlib.suppress(TelegramError, RuntimeError):
                    await bot.shutdown()
        return f"bot @{me.username} (id {me.id}), {self._config.mode}"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status)
