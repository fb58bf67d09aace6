"""What every channel adapter shares: the :class:`Channel` seam and the policy around it.

An adapter is a self-contained package ``postroom.channels.<name>`` with one class derived from
:class:`BaseChannel`. It talks to the engine only through :class:`ChannelContext` — the inbound
sink (ingest: one transaction; acknowledge the platform only after it returned) and the
outbound calls the delivery loop makes (:meth:`BaseChannel.send`, :meth:`BaseChannel.typing`).

The policy every adapter must obey lives here, in ``@final`` methods that call the adapter's
``do_*`` hooks (ARCHITECTURE, habit 5):

* :meth:`BaseChannel.send` renders the stored message for the platform (the ``🏠``/``⚙️``/``🔧``
  prefixes of MESSAGES §5, Markdown converted to the platform's format), falls back to plain
  text when the platform rejects the formatting, and turns the platform's rate limits into
  ``DeliveryFailed(retry_after=…)`` for the delivery loop;
* :meth:`BaseChannel.typing` is best-effort: a typing indicator that fails never fails a turn;
* :meth:`BaseChannel.receive` keeps the adapter's status, drops the bot's own echoes, and hands
  the message to ingest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar, Protocol, final

import structlog
from starlette.routing import BaseRoute

from postroom.core.display import display_text
from postroom.core.errors import PostroomError
from postroom.core.formatting import format_for
from postroom.core.messages import InboundMessage
from postroom.engine.delivery import DeliveryFailed, OutgoingChunk, SendResult
from postroom.engine.ingest import IngestResult

__all__ = [
    "BaseChannel",
    "Channel",
    "ChannelContext",
    "ChannelStatus",
    "FormattingRejected",
    "Inbound",
    "RateLimitedByPlatform",
]

log = structlog.get_logger(__name__)

Inbound = Callable[[InboundMessage], Awaitable[IngestResult]]


class FormattingRejected(PostroomError):
    """The platform refused the formatted text (a parse error): send it as plain text."""


class RateLimitedByPlatform(PostroomError):
    """The platform said to slow down; ``retry_after`` seconds when it said how long."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class ChannelStatus:
    """What ``postroom channels`` and ``doctor`` show about an adapter."""

    name: str
    state: str = "stopped"  # stopped | connecting | connected | error
    detail: str = ""
    last_event_at: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "last_event_at": self.last_event_at.isoformat() if self.last_event_at else None,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
        }


@dataclass(frozen=True, slots=True)
class ChannelContext:
    """Everything an adapter may use from the rest of postroom."""

    inbound: Inbound
    clock: Callable[[], datetime]
    assistant_name: str = "Postroom"
    image_bytes: int = 5 * 1024 * 1024
    #: Any other file an adapter fetches (a document, a PDF, a voice note) is at most this.
    file_bytes: int = 20 * 1024 * 1024
    extras: Mapping[str, Any] = field(default_factory=dict)


class Channel(Protocol):
    name: str
    platforms: tuple[str, ...]

    async def start(self, context: ChannelContext) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, chunk: OutgoingChunk) -> SendResult: ...

    async def typing(self, chat_jid: str, active: bool) -> None: ...

    def status(self) -> ChannelStatus: ...

    def routes(self) -> list[BaseRoute]: ...

    async def check(self) -> str: ...


class BaseChannel:
    """The policy around an adapter's hooks. Subclasses set ``name``, ``platforms`` and
    ``format_style`` and implement the ``do_*`` hooks."""

    name: ClassVar[str] = "channel"
    platforms: ClassVar[tuple[str, ...]] = ()
    #: A style of :func:`postroom.core.formatting.format_for`.
    format_style: ClassVar[str] = "plain"
    #: Prefix assistant messages with the assistant's name (a bot speaking through a person's
    #: own account, MESSAGES §5).
    name_assistant: ClassVar[bool] = False

    def __init__(self) -> None:
        self._status = ChannelStatus(self.name)
        self._context: ChannelContext | None = None
        self._listening = False

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def single_connection(self) -> bool:
        """Whether the adapter receives through one connection per account (long polling, a
        gateway, a sync loop) that only one node of a deployment may hold (PIPELINE §9)."""
        return False

    @property
    def listening(self) -> bool:
        """Whether a single-connection adapter holds its connection on this node."""
        return self._listening

    @final
    async def start(self, context: ChannelContext, *, listen: bool = True) -> None:
        """Start the adapter; with ``listen=False`` a single-connection adapter only sends
        until :meth:`listen` (its node took the adapter's lease)."""
        self._context = context
        self._listening = listen or not self.single_connection
        self._status.state = "connecting"
        try:
            await self.do_start()
        except Exception as exc:
            self.failed(exc)
            raise
        if self._status.state == "connecting":
            self._status.state = "connected"

    @final
    async def stop(self) -> None:
        try:
            await self.do_stop()
        finally:
            self._status.state = "stopped"

    @final
    async def listen(self) -> None:
        """Open the receiving connection of a started single-connection adapter."""
        if not self._listening:
            await self.do_listen()
            self._listening = True

    @final
    async def unlisten(self) -> None:
        """Close the receiving connection; the adapter goes on sending."""
        if self._listening:
            self._listening = False
            await self.do_unlisten()

    async def do_listen(self) -> None:
        """Open the receiving connection (single-connection adapters override it)."""

    async def do_unlisten(self) -> None:
        """Close the receiving connection (single-connection adapters override it)."""

    @property
    def context(self) -> ChannelContext:
        if self._context is None:
            raise RuntimeError(f"the {self.name} channel is not started")
        return self._context

    def status(self) -> ChannelStatus:
        return replace(self._status)

    def failed(self, error: BaseException | str) -> None:
        """Record a problem for ``postroom channels`` (adapters call it from their loops)."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._status.state = "error"
        self._status.last_error = text
        self._status.last_error_at = self._now()
        log.warning("channel.error", channel=self.name, error=text)

    def connected(self, detail: str = "") -> None:
        self._status.state = "connected"
        if detail:
            self._status.detail = detail

    def routes(self) -> list[BaseRoute]:
        """HTTP routes for webhook modes (mounted on the server)."""
        return []

    async def check(self) -> str:
        """One cheap call proving the credentials work (``postroom doctor``)."""
        return await self.do_check()

    async def fetch_attachment(self, url: str, *, cap_bytes: int) -> bytes | None:
        """The bytes of an attachment the adapter left to fetch after the acknowledgement
        (PIPELINE §1.4), or ``None`` (over *cap_bytes*, unreachable, or an adapter that fetches
        everything as it arrives: this default)."""
        return None

    # -- inbound -------------------------------------------------------------------------------
    @final
    async def receive(self, message: InboundMessage) -> IngestResult | None:
        """Hand a normalized message to ingest; ``None`` for the bot's own echo and for an
        empty message (no text, no attachment: a platform event with nothing to answer), both
        skipped.

        Returns once the message is committed: only then may the adapter acknowledge the
        platform (answer its webhook, advance its offset).
        """
        self._status.last_event_at = self._now()
        if message.is_from_me:
            return None
        if not message.attachments and not message.content.strip():
            log.debug("channel.empty_message_skipped", channel=self.name, chat_jid=message.chat_jid)
            return None
        return await self.context.inbound(message)

    # -- outbound ------------------------------------------------------------------------------
    @final
    async def send(self, chunk: OutgoingChunk) -> SendResult:
        text = self.render(chunk)
        try:
            try:
                return await self.do_send(
                    chunk, format_for(self.format_style, text), self.format_style
                )
            except FormattingRejected:
                # The platform refused our formatting: the words matter more than the markup.
                return await self.do_send(chunk, format_for("plain", text), "plain")
        except RateLimitedByPlatform as exc:
            raise DeliveryFailed(str(exc), retry_after=exc.retry_after) from exc

    def render(self, chunk: OutgoingChunk) -> str:
        """The text of a chunk as the platform shows it (MESSAGES §5)."""
        if chunk.message_type == "user":
            return chunk.content  # mirror copies already carry "[name] text"
        return display_text(
            chunk.message_type,
            chunk.content,
            assistant_name=self.context.assistant_name if self.name_assistant else None,
        )

    @final
    async def typing(self, chat_jid: str, active: bool) -> None:
        try:
            await self.do_typing(chat_jid, active)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # best-effort: a typing indicator never fails a turn
            log.debug("channel.typing_failed", channel=self.name, error=str(exc))

    # -- hooks ----------------------------------------------------------------------------------
    async def do_start(self) -> None:
        return None

    async def do_stop(self) -> None:
        return None

    async def do_send(self, chunk: OutgoingChunk, text: str, style: str) -> SendResult:
        raise NotImplementedError

    async def do_typing(self, chat_jid: str, active: bool) -> None:
        return None

    async def do_check(self) -> str:
        return "no check available"

    def _now(self) -> datetime:
        return self._context.clock() if self._context else datetime.now().astimezone()
