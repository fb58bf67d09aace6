"""The TUI's link to ``postroom serve``: one WebSocket to ``/ws/tui``, reconnected with back-off.

The link owns no UI: it reports its state and hands every frame to callbacks. A refusal the
server states on purpose (the token, close 4401; the folder, close 4404) ends the link, since
trying again cannot help; anything else (the server restarting, the network) is retried with
growing delays, and each new connection starts over with a fresh ``hello`` and ``history``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

__all__ = [
    "BACKOFF_S",
    "Connection",
    "LinkState",
    "LinkStatus",
    "auth_headers",
    "socket_url",
]

#: Delays between attempts; the last one repeats.
BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
CLOSE_UNAUTHORIZED = 4401
CLOSE_NOT_FOUND = 4404
MAX_FRAME_BYTES = 1 << 24

Frame = dict[str, Any]


class LinkState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    #: The server refused on purpose (token or folder): no more attempts.
    REFUSED = "refused"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class LinkStatus:
    state: LinkState
    #: One sentence for the operator: why it is not connected, or to what it is.
    detail: str = ""
    retry_in_s: float | None = None
    attempt: int = 0


def socket_url(base_url: str, *, folder: str) -> str:
    """``ws://host:port/ws/tui?folder=…`` from the server's HTTP (or WS) address. The token is
    never part of it: it travels in the ``Authorization`` header (:func:`auth_headers`)."""
    parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"{base_url!r} is not an http:// or ws:// address")
    path = parts.path.rstrip("/") + "/ws/tui"
    return urlunsplit((scheme, parts.netloc, path, urlencode({"folder": folder}), ""))


def auth_headers(token: str) -> dict[str, str]:
    """The header that carries the API token to ``/ws/tui``."""
    return {"Authorization": f"Bearer {token}"}


class _Refused(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Connection:
    """Keeps one socket open to the server while :meth:`run` runs."""

    def __init__(
        self,
        *,
        url: str,
        token: str,
        folder: str,
        on_frame: Callable[[Frame], Awaitable[None]],
        on_status: Callable[[LinkStatus], None],
        backoff_s: Sequence[float] = BACKOFF_S,
        open_timeout_s: float = 5.0,
    ) -> None:
        if not backoff_s:
            raise ValueError("backoff_s needs at least one delay")
        self._url = url
        self._token = token
        #: Reconnecting returns to the folder last shown (the app updates it on each hello).
        self.folder = folder
        self._on_frame = on_frame
        self._on_status = on_status
        self._backoff_s = tuple(backoff_s)
        self._open_timeout_s = open_timeout_s
        self._socket: ClientConnection | None = None
        self.status = LinkStatus(LinkState.CONNECTING)

    def _report(self, status: LinkStatus) -> None:
        self.status = status
        self._on_status(status)

    async def run(self) -> None:
        """Connect, read frames, reconnect on loss; return once the server refused us."""
        failures = 0
        while True:
            self._report(
                LinkStatus(
                    LinkState.CONNECTING if failures == 0 else LinkState.RECONNECTING,
                    attempt=failures + 1,
                )
            )
            try:
                greeted = await self._session()
                reason = "the server closed the connection"
            except _Refused as exc:
                self._report(LinkStatus(LinkState.REFUSED, exc.detail))
                return
            except (OSError, TimeoutError, WebSocketException) as exc:
                greeted = False
                reason = _describe(exc)
            if greeted:
                failures = 0  # a working connection was lost: start the back-off again
            delay = self._backoff_s[min(failures, len(self._backoff_s) - 1)]
            failures += 1
            self._report(
                LinkStatus(LinkState.RECONNECTING, reason, retry_in_s=delay, attempt=failures)
            )
            await asyncio.sleep(delay)

    async def _session(self) -> bool:
        """One connection, until it ends. True when the server greeted us (a good link)."""
        greeted = False
        url = socket_url(self._url, folder=self.folder)
        async with connect(
            url,
            additional_headers=auth_headers(self._token),
            open_timeout=self._open_timeout_s,
            max_size=MAX_FRAME_BYTES,
            proxy=None,
            compression=None,
        ) as socket:
            self._socket = socket
            try:
                async for raw in socket:
                    try:
                        frame = json.loads(raw)
                    except ValueError:
                        continue  # not ours to show; the server only sends JSON objects
                    if not isinstance(frame, dict):
                        continue
                    if frame.get("type") == "hello":
                        greeted = True
                        self.folder = str(frame.get("folder") or self.folder)
                        self._report(LinkStatus(LinkState.CONNECTED, str(frame.get("chat_jid"))))
                    await self._on_frame(frame)
            except ConnectionClosed:
                pass
            finally:
                self._socket = None
            code, reason = socket.close_code, socket.close_reason or ""
        if code == CLOSE_UNAUTHORIZED:
            raise _Refused(
                "The server refused the API token (close 4401): check [api] token in "
                "postroom.toml or POSTROOM_API_TOKEN."
            )
        if code == CLOSE_NOT_FOUND:
            raise _Refused(f"The server refused the folder: {reason or 'no such folder'}.")
        return greeted

    async def send(self, frame: Frame) -> bool:
        """Send one frame; False when not connected (the caller says so, nothing is queued)."""
        socket = self._socket
        if socket is None:
            return False
        try:
            await socket.send(json.dumps(frame))
        except ConnectionClosed:
            return False
        return True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InvalidStatus):
        return (
            f"the server answered HTTP {exc.response.status_code} at /ws/tui "
            "(is this postroom serve?)"
        )
    if isinstance(exc, TimeoutError):
        return "the server did not answer in time"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is postroom serve running?)"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__
