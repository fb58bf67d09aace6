"""Matrix through matrix-nio (aiohttp): a sync loop in, ``m.room.message`` events out.

Chats are ``matrix:room/<room_id>``, senders ``matrix:user/<mxid>`` (ROUTING §1); a message in
an ``m.thread`` has the thread's root event id as its native topic, and answers in that topic
go back into the thread.

**Inbound.** One task runs ``/sync`` long-polls. The sync token advances only after every
message of the batch went through ingest, so a crash or a store failure makes the homeserver
send the batch again (ingest drops what it already has). The token lives in memory: when the
adapter starts, it makes one *initial* sync whose timeline it skips (old history is not new
input), and follows from there — messages sent while postroom was down are not answered.
Invites from ``allowed_inviters`` are joined; any other invite is ignored. Encrypted rooms are
not supported (their events are skipped).

**Outbound.** ``m.room.message`` with a plain ``body`` and, when the text has markup, an
``org.matrix.custom.html`` ``formatted_body``; answers reply to the message they answer
(``m.in_reply_to``) and stay in its thread (``rel_type: m.thread``). Assistant replies are
``m.text``, host notices ``m.notice`` (the Matrix convention for automated messages).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import nio  # type: ignore[import-untyped]  # matrix-nio ships no type information
import structlog

from postroom.channels.base import BaseChannel, FormattingRejected, RateLimitedByPlatform
from postroom.channels.matrix.config import MatrixConfig, parse_config
from postroom.channels.matrix.events import (
    event_time,
    localpart,
    mentions_bot,
    parse_mxc,
    relations,
    strip_reply_fallback,
)
from postroom.channels.recent import Recent
from postroom.core.errors import InvalidInput, PostroomError
from postroom.core.formatting import has_markup, to_matrix_html, to_plain
from postroom.core.jid import decode_id_part, make_jid, split_jid
from postroom.core.messages import Attachment, InboundMessage
from postroom.core.steering import normalize_topic
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult

__all__ = ["MatrixChannel", "MatrixError", "build"]

log = structlog.get_logger(__name__)

TYPING_TIMEOUT_MS = 8000
MEDIA_TIMEOUT_S = 30.0
MAX_BACKOFF_S = 60.0
#: Thread roots remembered by their topic, for answers (older ones are looked up again).
MAX_THREADS = 4096
#: The initial sync only needs room state and invites: its timeline is skipped.
INITIAL_FILTER = {"room": {"timeline": {"limit": 1}}}
_FORMAT_ERRORS = frozenset({"M_BAD_JSON", "M_NOT_JSON", "M_INVALID_PARAM", "M_TOO_LARGE"})
_AUTH_ERRORS = frozenset(
    {"M_FORBIDDEN", "M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_USER_DEACTIVATED"}
)
_MEDIA = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": "file"}
_VOICE_KEYS = ("org.matrix.msc3245.voice", "org.matrix.msc3245.voice.v2")


class MatrixError(PostroomError):
    """The homeserver refused or failed a request; ``errcode`` is Matrix's code, if any."""

    def __init__(self, message: str, *, errcode: str | None = None) -> None:
        super().__init__(message)
        self.errcode = errcode


class _IngestFailed(PostroomError):
    """Ingest failed for a reason other than bad input: the batch must come again."""


def build(section: Mapping[str, Any]) -> MatrixChannel:
    """The adapter for ``[channels.matrix]`` (without ``enabled``); ConfigError when invalid."""
    return MatrixChannel(parse_config(section))


def room_of(chat_jid: str) -> str:
    """``matrix:room/!abc:example.org`` → ``!abc:example.org``."""
    platform, room = split_jid(chat_jid)
    kind, _, rest = room.partition("/")
    if platform != "matrix" or kind != "room" or not rest.startswith("!"):
        raise DeliveryFailed(f"{chat_jid!r} is not a Matrix room chat", permanent=True)
    return decode_id_part(rest)


def _error(response: Any, doing: str) -> MatrixError:
    code = getattr(response, "status_code", None)
    errcode = code if isinstance(code, str) else None
    # The errcode (M_FORBIDDEN, M_UNKNOWN_TOKEN…) is what an operator searches the docs for.
    detail = " ".join(str(part) for part in (code, getattr(response, "message", "")) if part)
    return MatrixError(f"the homeserver refused to {doing}: {detail}", errcode=errcode)


class MatrixChannel(BaseChannel):
    name = "matrix"
    platforms = ("matrix",)
    # Rendered here: Matrix wants both a plain body and HTML, from the same Markdown.
    format_style = "markdown"

    def __init__(self, config: MatrixConfig) -> None:
        super().__init__()
        self._config = config
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._since: str | None = None
        self._user_id = config.user_id or ""
        self._display_name = ""
        self._threads: Recent[tuple[str, str], str] = Recent(MAX_THREADS)
        self._ignored_invites: set[str] = set()

    @property
    def config(self) -> MatrixConfig:
        return self._config

    @property
    def user_id(self) -> str:
        return self._user_id

    # -- lifecycle -------------------------------------------------------------------------
    def _new_client(self, *, device_id: str | None) -> Any:
        return nio.AsyncClient(
            self._config.base_url,
            user=self._config.user_id or "",
            device_id=device_id or "",
            store_path="",
            config=nio.AsyncClientConfig(
                # Rate limits and timeouts come back to us: the outbox and the sync loop
                # decide when to try again, not a sleep inside the SDK.
                max_limit_exceeded=0,
                max_timeouts=0,
                encryption_enabled=False,
                store_sync_tokens=False,
                request_timeout=max(30.0, self._config.sync_timeout_s + 15.0),
            ),
        )

    async def do_start(self) -> None:
        self._client = self._new_client(device_id=self._config.device_id)
        try:
            await self._login(self._client)
        except MatrixError as exc:
            if exc.errcode in _AUTH_ERRORS:
                await self._close_client()
                raise
            self.failed(exc)  # the homeserver is not there yet: the loop keeps trying
        except (aiohttp.ClientError, OSError, TimeoutError, nio.ProtocolError) as exc:
            self.failed(exc)
        else:
            self.connected(f"logged in as {self._user_id}")
        self._task = asyncio.create_task(self._sync_loop(), name="matrix-sync")
        self._task.add_done_callback(self._loop_ended)

    async def do_stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_client()

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failed(f"the sync loop stopped: {task.exception()!r}")

    async def _login(self, client: Any) -> None:
        """Log in with the password, or adopt the access token (asking whose it is if needed)."""
        config = self._config
        if config.access_token:
            client.access_token = config.access_token
            if config.device_id:
                client.device_id = config.device_id
            if config.user_id:
                client.user_id = config.user_id
            else:
                who = await client.whoami()
                if not isinstance(who, nio.WhoamiResponse):
                    raise _error(who, "accept the access token")
                client.user_id = who.user_id
        else:
            response = await client.login(config.password, device_name=config.device_name)
            if not isinstance(response, nio.LoginResponse):
                raise _error(response, f"log in {config.user_id}")
        self._user_id = client.user_id
        profile = await client.get_displayname(self._user_id)
        if isinstance(profile, nio.ProfileGetDisplayNameResponse) and profile.displayname:
            self._display_name = profile.displayname

    # -- inbound ---------------------------------------------------------------------------
    async def _sync_loop(self) -> None:
        backoff = 1.0
        while True:
            client = self._client
            try:
                if not client.logged_in:
                    await self._login(client)
                    self.connected(f"logged in as {self._user_id}")
                await self._sync_once(client)
                backoff = 1.0
            except (
                MatrixError,
                _IngestFailed,
                aiohttp.ClientError,
                OSError,
                TimeoutError,
                nio.ProtocolError,
            ) as exc:
                self.failed(exc)
                if (
                    isinstance(exc, MatrixError)
                    and exc.errcode == "M_UNKNOWN_TOKEN"
                    and self._config.password
                ):
                    client.access_token = ""  # log in again on the next round
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _sync_once(self, client: Any) -> None:
        initial = self._since is None
        if initial:
            response = await client.sync(timeout=0, sync_filter=INITIAL_FILTER)
        else:
            response = await client.sync(
                timeout=int(self._config.sync_timeout_s * 1000), since=self._since
            )
        if not isinstance(response, nio.SyncResponse):
            raise _error(response, "sync")
        await self._accept_invites(client, response)
        if not initial:
            await self._ingest(client, response)
        # Only now: a batch that failed half-way comes again (ingest drops what it has).
        self._since = response.next_batch
        if self._status.state != "connected" or initial:
            self.connected(f"syncing as {self._user_id}")

    async def _accept_invites(self, client: Any, response: Any) -> None:
        for room_id in response.rooms.invite:
            if room_id in self._ignored_invites:
                continue
            room = client.invited_rooms.get(room_id)
            inviter = getattr(room, "inviter", None)
            if not self._config.accepts_invite_from(inviter):
                self._ignored_invites.add(room_id)
                log.info("matrix.invite_ignored", room_id=room_id, inviter=inviter)
                continue
            joined = await client.join(room_id)
            if isinstance(joined, nio.JoinResponse):
                log.info("matrix.joined", room_id=room_id, inviter=inviter)
            else:
                log.warning("matrix.join_failed", room_id=room_id, error=str(joined))

    async def _ingest(self, client: Any, response: Any) -> None:
        for room_id, info in response.rooms.join.items():
            room = client.rooms.get(room_id)
            for event in info.timeline.events:
                source = getattr(event, "source", None)
                if not isinstance(source, Mapping) or source.get("type") != "m.room.message":
                    continue
                message = await self._normalize(room_id, room, source)
                if message is None:
                    continue
                try:
                    await self.receive(message)
                except InvalidInput as exc:  # TooLarge included: skip it, never loop on it
                    log.warning("matrix.message_refused", event_id=message.id, reason=str(exc))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # The store failed, not the message: keep the token so the batch comes again.
                    raise _IngestFailed(f"ingest failed: {exc}") from exc

    async def _normalize(
        self, room_id: str, room: Any, event: Mapping[str, Any]
    ) -> InboundMessage | None:
        content = event.get("content")
        sender = event.get("sender")
        event_id = event.get("event_id")
        if not (
            isinstance(content, Mapping) and isinstance(sender, str) and isinstance(event_id, str)
        ):
            return None
        related = relations(content)
        if related.is_edit:
            return None  # an edit is not a new message
        body = content.get("body")
        text = body if isinstance(body, str) else ""
        if related.quoted:
            text = strip_reply_fallback(text)
        mine = sender == self._user_id
        msgtype = content.get("msgtype")
        attachments: tuple[Attachment, ...] = ()
        if isinstance(msgtype, str) and msgtype in _MEDIA and not mine:
            attachment, text = await self._attachment(msgtype, content, text)
            attachments = (attachment,)
        elif msgtype == "m.emote":
            text = f"* {text}"
        if related.thread_root:
            self._remember_thread(room_id, related.thread_root)
        names = [self._display_name]
        if room is not None:
            names.append(room.user_name(self._user_id) or "")
        sender_name = (room.user_name(sender) if room is not None else None) or localpart(sender)
        members = room.member_count if room is not None else 0
        return InboundMessage(
            id=event_id,
            chat_jid=make_jid("matrix", "room", room_id),
            sender=make_jid("matrix", "user", sender),
            content=text,
            timestamp=event_time(event, self.context.clock()),
            sender_name=sender_name,
            reply_to=related.reply_to,
            topic=related.thread_root or "",
            mentioned=not mine
            and mentions_bot(content, text, user_id=self._user_id, names=[n for n in names if n]),
            is_dm=0 < members <= 2,
            is_from_me=mine,
            attachments=attachments,
            metadata={"matrix": {"thread_root": related.thread_root}}
            if related.thread_root
            else {},
        )

    async def _attachment(
        self, msgtype: str, content: Mapping[str, Any], body: str
    ) -> tuple[Attachment, str]:
        """The attachment of a media event, fetched within the cap, and the message's text."""
        info = content.get("info")
        info = info if isinstance(info, Mapping) else {}
        mime = info.get("mimetype")
        mime = mime if isinstance(mime, str) else ""
        size = info.get("size")
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        filename = content.get("filename")
        name = filename if isinstance(filename, str) and filename else body
        # Since Matrix 1.10 a body that differs from the file name is a caption.
        caption = body if isinstance(filename, str) and filename and body != filename else ""
        kind = _MEDIA[msgtype]
        if kind == "audio" and any(key in content for key in _VOICE_KEYS):
            kind = "voice"
        url = content.get("url")
        url = url if isinstance(url, str) else ""
        data = b""
        if kind in ("image", "voice", "audio") and url:
            data = await self._download(url, self.context.image_bytes, size) or b""
        elif kind == "file" and url:
            data = await self._download(url, self.context.file_bytes, size) or b""
        attachment = Attachment(
            kind=kind,
            mime=mime,
            name=name,
            size=len(data) or size,
            url=url,
            data=base64.b64encode(data).decode() if data else "",
        )
        if kind in ("voice", "audio"):
            text = "[Voice message]"
        elif caption:
            text = caption
        else:
            text = f"[{kind.capitalize()}: {name}]" if name else f"[{kind.capitalize()}]"
        return attachment, text

    async def _download(self, mxc: str, limit: int, declared: int) -> bytes | None:
        """The media's bytes through the client's session, or ``None`` when it is over *limit*
        or cannot be fetched (the message still goes in, with the mxc URL)."""
        parts = parse_mxc(mxc)
        if parts is None or declared > limit or self._client is None:
            return None
        server, media_id = parts
        path = (
            f"{nio.api.MATRIX_MEDIA_API_PATH}/download/{quote(server, safe='')}/"
            f"{quote(media_id, safe='')}?allow_remote=true"
        )
        headers = {"Authorization": f"Bearer {self._client.access_token}"}
        try:
            response = await self._client.send(
                "GET", path, headers=headers, timeout=MEDIA_TIMEOUT_S
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("matrix.media_failed", mxc=mxc, error=str(exc))
            return None
        try:
            if response.status != 200 or (response.content_length or 0) > limit:
                return None
            data = bytearray()
            async for piece in response.content.iter_chunked(64 * 1024):
                data += piece
                if len(data) > limit:
                    return None
            return bytes(data)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("matrix.media_failed", mxc=mxc, error=str(exc))
            return None
        finally:
            response.release()

    def _remember_thread(self, room_id: str, root: str) -> None:
        key = (room_id, normalize_topic(root))
        self._threads.put(key, root)

    # -- outbound --------------------------------------------------------------------------
    def _logged_in_client(self) -> Any:
        client = self._client
        if client is None or not client.logged_in:
            raise DeliveryFailed("the Matrix channel is not connected")
        return client

    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        client = self._logged_in_client()
        room_id = room_of(chunk.chat_jid)
        body, html = text, None
        if style == "markdown":
            # The plain body for clients that draw no HTML, and the HTML only when it adds some.
            body = to_plain(text)
            html = to_matrix_html(text) if has_markup(text) else None
        content: dict[str, Any] = {
            "msgtype": "m.notice" if chunk.message_type == "host" else "m.text",
            "body": body,
        }
        if html is not None:
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = html
        reply = chunk.reply_to if chunk.reply_to and chunk.reply_to.startswith("$") else None
        root = await self._thread_root(client, room_id, chunk.topic, reply)
        if root is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": reply is None,
                "m.in_reply_to": {"event_id": reply or root},
            }
        elif reply is not None:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply}}
        # The transaction id makes a retried PUT idempotent on the homeserver.
        txn = f"postroom-{chunk.delivery_id}-{chunk.attempt}-{uuid.uuid4().hex[:8]}"
        try:
            response = await client.room_send(room_id, "m.room.message", content, tx_id=txn)
        except (aiohttp.ClientError, OSError, TimeoutError, nio.ProtocolError) as exc:
            raise DeliveryFailed(f"the homeserver is unreachable: {exc}") from exc
        if isinstance(response, nio.RoomSendResponse):
            return SendResult(platform_message_id=str(response.event_id))
        code = getattr(response, "status_code", None)
        message = f"the homeserver refused the message: {response}"
        if code == "M_LIMIT_EXCEEDED":
            millis = getattr(response, "retry_after_ms", None)
            raise RateLimitedByPlatform(
                message, retry_after=millis / 1000 if isinstance(millis, int) else None
            )
        if code == "M_FORBIDDEN":
            raise DeliveryFailed(f"{message} (is the bot still in the room?)", permanent=True)
        if code in _FORMAT_ERRORS and html is not None:
            raise FormattingRejected(message)
        raise DeliveryFailed(message)

    async def _thread_root(
        self, client: Any, room_id: str, topic: str, reply: str | None
    ) -> str | None:
        """The root event of the thread *topic* names, if it names one.

        The stored topic is normalized (lowercase): the root's real id is remembered from the
        inbound message, or — after a restart — read from the event being answered.
        """
        if not topic:
            return None
        known = self._threads.get((room_id, topic))
        if known is not None or reply is None:
            return known
        try:
            response = await client.room_get_event(room_id, reply)
        except (aiohttp.ClientError, OSError, TimeoutError, nio.ProtocolError):
            return None
        source = getattr(getattr(response, "event", None), "source", None)
        if not isinstance(source, Mapping) or not isinstance(source.get("content"), Mapping):
            return None
        root = relations(source["content"]).thread_root
        if root is None or normalize_topic(root) != topic:
            return None
        self._remember_thread(room_id, root)
        return root

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        client = self._client
        if client is None or not client.logged_in:
            return
        response = await client.room_typing(
            room_of(chat_jid), typing_state=active, timeout=TYPING_TIMEOUT_MS
        )
        if not isinstance(response, nio.RoomTypingResponse):
            log.debug("matrix.typing_refused", chat_jid=chat_jid, error=str(response))

    # -- doctor ----------------------------------------------------------------------------
    async def do_check(self) -> str:
        if self._client is not None and self._client.logged_in:
            return await self._whoami(self._client)
        # Never the configured device: logging in to it would end the server's own session.
        client = self._new_client(device_id=None)
        try:
            if self._config.access_token:
                client.access_token = self._config.access_token
                return await self._whoami(client)
            response = await client.login(
                self._config.password, device_name=f"{self._config.device_name} (doctor)"
            )
            if not isinstance(response, nio.LoginResponse):
                raise _error(response, f"log in {self._config.user_id}")
            detail = await self._whoami(client)
            await client.logout()  # the check's own device: leave no trace behind
            return detail
        except (aiohttp.ClientError, OSError, TimeoutError, nio.ProtocolError) as exc:
            raise MatrixError(f"{self._config.base_url} is unreachable: {exc}") from exc
        finally:
            await client.close()

    async def _whoami(self, client: Any) -> str:
        response = await client.whoami()
        if not isinstance(response, nio.WhoamiResponse):
            raise _error(response, "accept the credentials")
        return f"logged in as {response.user_id} on {self._config.base_url}"
