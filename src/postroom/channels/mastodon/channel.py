"""The Mastodon adapter through Mastodon.py: mentions polled in, replies posted out.

**Inbound.** One task polls the ``mention`` notifications (direct messages are mentions too,
with visibility ``direct``) every ``poll_interval_s``. Mastodon.py is synchronous (requests),
so each call runs in a worker thread. The cursor (the newest notification ingested) moves past
a notification only after ingest committed it, so a failure makes the next poll fetch it again;
nothing is dismissed on the server. The cursor lives in memory: at start-up the newest pages
are read and the mentions younger than ``catch_up_s`` are ingested — those that came while
postroom was down — while older ones are history, not new input. Polls ask with ``min_id``
(the page right after the cursor, followed page by page), not ``since_id`` (the newest page
after it), so a burst of mentions leaves no gap. Ingest dedupes on the status id, so a
mention seen before a restart is never stored or answered twice.

**Outbound.** An answer is a status replying to the one it answers, with the same visibility
(a direct message gets a direct answer), opening with ``@<acct>`` so it reaches the person.
The chat names the account by its id; its acct is remembered from the notifications (a
bounded map) and, when forgotten (after a restart), asked from the instance
(``GET /api/v1/accounts/:id``).
A chunk that no longer fits Mastodon's 500 characters once the mention is added is cut again;
each status replies to the previous one, so a long answer reads as a thread. Messages that
answer nothing (notices, scheduled answers) go to the person as a direct message. Each status
carries an ``Idempotency-Key`` derived from its delivery, so a retried send never posts twice.
Mastodon has no typing indicator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import structlog
from mastodon import (
    Mastodon,
    MastodonAPIError,
    MastodonError,
    MastodonNetworkError,
    MastodonNotFoundError,
    MastodonRatelimitError,
    MastodonServerError,
    MastodonUnauthorizedError,
)

from postroom.channels.base import BaseChannel, RateLimitedByPlatform
from postroom.channels.mastodon.config import MastodonConfig
from postroom.channels.mastodon.media import MediaFetcher
from postroom.channels.mastodon.statuses import (
    VISIBILITIES,
    BotAccount,
    account_id_of_chat,
    inbound_of,
    status_texts,
    text_of,
)
from postroom.channels.recent import Recent
from postroom.core.errors import InvalidInput, PostroomError
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["MastodonChannel", "MastodonUnavailable"]

log = structlog.get_logger(__name__)

#: Notifications per request (Mastodon's maximum is 80).
PAGE = 40
REQUEST_TIMEOUT_S = 30.0
MEDIA_TIMEOUT_S = 5.0
MAX_BACKOFF_S = 300.0
#: Answers that reply to nothing are private to the person they address.
DEFAULT_VISIBILITY = "direct"

T = TypeVar("T")


class MastodonUnavailable(PostroomError):
    """The instance refused the credentials or could not be reached."""


class MastodonChannel(BaseChannel):
    name = "mastodon"
    platforms = ("mastodon",)
    format_style = "plain"

    def __init__(self, config: MastodonConfig) -> None:
        super().__init__()
        self._config = config
        # Two clients: the poll loop's and the senders'. Mastodon.py keeps the last rate-limit
        # headers on the client, so each side reads its own; senders take turns (the lock).
        self._poll_api: Mastodon | None = None
        self._send_api: Mastodon | None = None
        self._send_lock = asyncio.Lock()
        self._http: httpx.AsyncClient | None = None
        self._media: MediaFetcher | None = None
        self._task: asyncio.Task[None] | None = None
        self._bot: BotAccount | None = None
        #: The newest notification ingested: the next poll asks for what came after it.
        self._cursor: str | None = None
        #: Status id → its visibility, for answers (asked from the instance when forgotten).
        self._visibility: Recent[str, str] = Recent(4096)
        #: Account id → its acct, for the mention that opens an answer (asked when forgotten).
        self._accts: Recent[str, str] = Recent(4096)
        #: (message id, chat) → the last status posted for it and its visibility, so the next
        #: chunk continues the thread.
        self._threads: Recent[tuple[str, str], tuple[str, str]] = Recent(1024)
        #: Calls still running in a worker thread (waited for before the sessions close).
        self._calls: set[asyncio.Future[Any]] = set()

    @property
    def config(self) -> MastodonConfig:
        return self._config

    @property
    def bot(self) -> BotAccount | None:
        return self._bot

    @property
    def cursor(self) -> str | None:
        return self._cursor

    # -- lifecycle ---------------------------------------------------------------------------
    def _client(self) -> Mastodon:
        return Mastodon(
            access_token=self._config.access_token,
            api_base_url=self._config.api_base_url,
            version_check_mode="none",
            # Never sleep inside a worker thread: a 429 becomes an exception we schedule around.
            ratelimit_method="throw",
            request_timeout=REQUEST_TIMEOUT_S,
        )

    async def do_start(self) -> None:
        self._poll_api = self._client()
        self._send_api = self._client()
        self._http = httpx.AsyncClient(timeout=MEDIA_TIMEOUT_S, follow_redirects=True)
        self._media = MediaFetcher(self._http)
        try:
            await self._identify()
        except MastodonError as exc:  # the poll loop keeps trying
            self.failed(exc)
        if self.listening:
            await self.do_listen()

    @property
    def single_connection(self) -> bool:
        # One poller per account: several would spend the account's rate limit many times.
        return True

    async def do_listen(self) -> None:
        # A node taking over catches up as a start-up does (mentions younger than catch_up_s).
        self._cursor = None
        self._task = asyncio.create_task(self._run(), name="mastodon-poll")

    async def do_unlisten(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def do_stop(self) -> None:
        await self.do_unlisten()
        if self._calls:  # a thread cannot be cancelled: let its request finish first
            await asyncio.wait(set(self._calls), timeout=REQUEST_TIMEOUT_S)
        for api in (self._poll_api, self._send_api):
            if api is not None:
                api.session.close()
        self._poll_api = self._send_api = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self._media = None

    async def do_check(self) -> str:
        api = self._send_api
        own = api is None
        client = self._client() if api is None else api
        try:
            async with self._send_lock:
                account = await self._call(client.account_verify_credentials)
        except MastodonError as exc:
            raise MastodonUnavailable(f"Mastodon refused the access token: {exc}") from exc
        finally:
            if own:
                client.session.close()
        bot = BotAccount.of(account, self._config.api_base_url)
        return f"Mastodon account @{bot.acct} on {self._host}"

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        # Mastodon has no typing indicator.
        return None

    @property
    def _host(self) -> str:
        return urlsplit(self._config.api_base_url).netloc

    async def _call(self, function: Callable[[], T]) -> T:
        """Run a blocking Mastodon.py call in a worker thread.

        Cancelling the caller cannot stop the thread; the call is kept in ``_calls`` until it
        ends, so ``stop`` closes the HTTP sessions only once no thread uses them.
        """
        future: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(function))
        self._calls.add(future)
        future.add_done_callback(self._call_ended)
        return await asyncio.shield(future)

    def _call_ended(self, future: asyncio.Future[Any]) -> None:
        self._calls.discard(future)
        if not future.cancelled():
            future.exception()  # seen here when its caller was cancelled, never logged twice

    async def _identify(self) -> BotAccount:
        api = self._require(self._poll_api)
        account = await self._call(api.account_verify_credentials)
        self._bot = BotAccount.of(account, self._config.api_base_url)
        self.connected(f"@{self._bot.acct} on {self._host}")
        return self._bot

    def _require(self, api: Mastodon | None) -> Mastodon:
        if api is None:
            raise RuntimeError("the mastodon channel is not started")
        return api

    # -- inbound -------------------------------------------------------------------------------
    async def _run(self) -> None:
        interval_s = self._config.poll_interval_s
        delay_s = interval_s
        while True:
            try:
                await self.poll()
                delay_s = interval_s
            except MastodonRatelimitError as exc:
                self.failed(exc)
                delay_s = max(interval_s, _reset_in(self._poll_api) or interval_s)
            except Exception as exc:  # the loop must outlive a bad poll; retried with backoff
                self.failed(exc)
                delay_s = min(max(delay_s * 2, interval_s), MAX_BACKOFF_S)
            await asyncio.sleep(delay_s)

    async def poll(self) -> int:
        """Ingest the mentions that came since the last poll; return how many were new."""
        api = self._require(self._poll_api)
        bot = self._bot or await self._identify()
        if self._cursor is None:
            fresh = await self._recent(api)
        else:
            fresh = await self._after_cursor(api)
        ingested = 0
        # The API lists the newest first; ingest in the order people wrote.
        for notification in reversed(fresh):
            if notification.get("type") == "mention":
                ingested += await self._ingest(notification, bot)
            self._cursor = str(notification.get("id"))
        if self._status.state != "connected":
            self.connected(f"@{bot.acct} on {self._host}")
        return ingested

    async def _page(self, api: Mastodon, **where: str | None) -> list[Mapping[str, Any]]:
        page = await self._call(
            functools.partial(api.notifications, types=["mention"], limit=PAGE, **where)
        )
        return list(page) if isinstance(page, list) else [page]

    async def _after_cursor(self, api: Mastodon) -> list[Mapping[str, Any]]:
        """Everything after the cursor, newest first (``min_id`` pages forward without gaps)."""
        fresh: list[Mapping[str, Any]] = []
        cursor = self._cursor
        while True:
            page = await self._page(api, min_id=cursor)
            fresh[:0] = page
            if len(page) < PAGE:
                return fresh
            cursor = str(page[0].get("id"))

    async def _recent(self, api: Mastodon) -> list[Mapping[str, Any]]:
        """At start-up: the mentions younger than ``catch_up_s``, newest first."""
        recent: list[Mapping[str, Any]] = []
        before: str | None = None
        while True:
            page = await self._page(api, max_id=before)
            young = [n for n in page if self._young(n)]
            recent.extend(young)
            if len(page) < PAGE or len(young) < len(page):
                break
            before = str(page[-1].get("id"))
        if not recent and page:
            # Only history so far: follow from the newest of it.
            self._cursor = str(page[0].get("id"))
        return recent

    def _young(self, notification: Mapping[str, Any]) -> bool:
        created = notification.get("created_at")
        if not isinstance(created, datetime):  # Mastodon.py parses it; a stray one counts
            return True
        horizon = self.context.clock() - timedelta(seconds=self._config.catch_up_s)
        return created.timestamp() >= horizon.timestamp()

    async def _ingest(self, notification: Mapping[str, Any], bot: BotAccount) -> int:
        status = notification.get("status")
        if not isinstance(status, Mapping):
            return 0
        account = status.get("account")
        own = isinstance(account, Mapping) and str(account.get("id")) == bot.id
        if isinstance(account, Mapping):
            self._remember_acct(account)
        media = status.get("media_attachments") or []
        attachments: tuple[Any, ...] = ()
        if media and not own and self._media is not None:
            attachments = await self._media.attachments(
                media, cap_bytes=self.context.image_bytes, with_audio=not text_of(status, bot)
            )
        message = inbound_of(notification, bot, attachments)
        if message is None:
            return 0
        visibility = str(status.get("visibility") or "")
        if visibility in VISIBILITIES:
            self._visibility.put(message.id, visibility)
        try:
            result = await self.receive(message)
        except InvalidInput as exc:  # refused for good (too large...): never fetched again
            log.warning("mastodon.status_refused", status_id=message.id, error=str(exc))
            return 0
        return 0 if result is None or result.duplicate else 1

    # -- outbound ------------------------------------------------------------------------------
    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        account_id = account_id_of_chat(chunk.chat_jid)
        if account_id is None:
            raise DeliveryFailed(
                f"{chunk.chat_jid!r} is not a Mastodon address (mastodon:account/<id>).",
                permanent=True,
            )
        api = self._require(self._send_api)
        key = (chunk.message_id, chunk.chat_jid)
        first_id: str | None = None
        async with self._send_lock:
            acct = await self._acct_of(api, account_id)
            in_reply_to, visibility = await self._thread_for(api, chunk)
            for index, part in enumerate(status_texts(text, acct)):
                status_id = await self._post(
                    api,
                    part,
                    in_reply_to=in_reply_to,
                    visibility=visibility,
                    idempotency_key=f"postroom-{chunk.delivery_id}-{index}",
                )
                first_id = first_id or status_id
                in_reply_to = status_id
                self._threads.put(key, (status_id, visibility))
        return SendResult(platform_message_id=first_id)

    def _remember_acct(self, account: Mapping[str, Any]) -> None:
        account_id, acct = str(account.get("id") or ""), str(account.get("acct") or "")
        if account_id and acct:
            self._accts.put(account_id, acct)

    async def _acct_of(self, api: Mastodon, account_id: str) -> str:
        """The acct of the account *account_id*: remembered, or asked from the instance."""
        acct = self._accts.get(account_id)
        if acct is not None:
            return acct
        try:
            account = await self._call(lambda: api.account(account_id))
        except MastodonNotFoundError as exc:  # gone, suspended, or never an account here
            raise DeliveryFailed(
                f"Mastodon knows no account {account_id!r}: {exc}", permanent=True
            ) from exc
        except MastodonError as exc:
            raise _translate(exc, api) from exc
        acct = str(account.get("acct") or "") if isinstance(account, Mapping) else ""
        if not acct:
            raise DeliveryFailed(f"Mastodon gave no acct for the account {account_id!r}.")
        self._accts.put(account_id, acct)
        return acct

    async def _thread_for(self, api: Mastodon, chunk: OutgoingChunk) -> tuple[str | None, str]:
        """The status to answer under and the visibility of the answer."""
        if chunk.chunk > 0:
            earlier = self._threads.get((chunk.message_id, chunk.chat_jid))
            if earlier is not None:
                return earlier
        if not chunk.reply_to:
            return None, DEFAULT_VISIBILITY
        visibility = self._visibility.get(chunk.reply_to)
        if visibility is None:
            reply_to = chunk.reply_to
            try:
                status = await self._call(lambda: api.status(reply_to))
            except MastodonNotFoundError:  # deleted, or not a status id: answer the person
                return None, DEFAULT_VISIBILITY
            except MastodonError as exc:
                raise _translate(exc, api) from exc
            visibility = str(status.get("visibility") or DEFAULT_VISIBILITY)
            if visibility not in VISIBILITIES:
                visibility = DEFAULT_VISIBILITY
            self._visibility.put(chunk.reply_to, visibility)
        return chunk.reply_to, visibility

    async def _post(
        self,
        api: Mastodon,
        text: str,
        *,
        in_reply_to: str | None,
        visibility: str,
        idempotency_key: str,
    ) -> str:
        def post(reply_to: str | None) -> Any:
            return api.status_post(
                text,
                in_reply_to_id=reply_to,
                visibility=visibility,
                idempotency_key=idempotency_key,
            )

        try:
            try:
                status = await self._call(lambda: post(in_reply_to))
            except MastodonNotFoundError:
                if in_reply_to is None:
                    raise
                # The status we answer was deleted meanwhile: the person still gets the answer.
                status = await self._call(lambda: post(None))
        except MastodonError as exc:
            raise _translate(exc, api) from exc
        return str(status.get("id"))


def _reset_in(api: Mastodon | None) -> float | None:
    """Seconds until the instance's rate-limit window resets (``X-RateLimit-Reset``)."""
    reset = getattr(api, "ratelimit_reset", None)
    remaining_s = float(reset) - time.time() if reset is not None else 0.0
    # A reset already past is a stale header of an earlier answer: the usual backoff applies.
    return remaining_s if remaining_s > 0 else None


def _translate(exc: MastodonError, api: Mastodon) -> Exception:
    if isinstance(exc, MastodonRatelimitError):
        return RateLimitedByPlatform("Mastodon rate limit", retry_after=_reset_in(api))
    if isinstance(exc, MastodonNetworkError | MastodonServerError | MastodonUnauthorizedError):
        return DeliveryFailed(f"Mastodon could not take the status: {exc}")
    # Validation errors, a blocked account, a forbidden action: the same request would be
    # refused again.
    return DeliveryFailed(
        f"Mastodon refused the status: {exc}", permanent=isinstance(exc, MastodonAPIError)
    )
