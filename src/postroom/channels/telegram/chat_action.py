"""The typing indicator: ``sendChatAction`` kept alive while a turn runs.

Telegram shows a chat action for about five seconds, or until the bot's next message, and has
no call to end it. So "typing" is a refresh: one ``sendChatAction`` at once, then one every
``refresh_s`` (4 s by default) until the turn says it is over — stopping is simply not sending
again. The engine repeats its "active" signal during a turn; a chat whose signal was not
renewed for ``linger_s`` stops on its own, so a lost "inactive" never leaves a bot typing
forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

__all__ = ["TypingKeeper"]

log = structlog.get_logger(__name__)

SendAction = Callable[[str], Awaitable[None]]


class TypingKeeper:
    """One refresh task per chat that is typing."""

    def __init__(self, send: SendAction, *, refresh_s: float = 4.0, linger_s: float = 30.0) -> None:
        self._send = send
        self._refresh_s = refresh_s
        self._linger_s = linger_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._renewed: dict[str, float] = {}

    def active(self) -> frozenset[str]:
        """The chats shown as typing right now."""
        return frozenset(self._tasks)

    async def start(self, chat_jid: str) -> None:
        """Show typing in *chat_jid* now and keep it up (a repeated start only renews it)."""
        self._renewed[chat_jid] = time.monotonic()
        if chat_jid in self._tasks:
            return  # already refreshing: the renewal above is all a repeat needs
        # Registered before the first send, so a stop arriving meanwhile ends it.
        self._tasks[chat_jid] = asyncio.create_task(
            self._keep(chat_jid), name=f"telegram-typing-{chat_jid}"
        )
        await self._send(chat_jid)

    def stop(self, chat_jid: str) -> None:
        self._renewed.pop(chat_jid, None)
        task = self._tasks.pop(chat_jid, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._renewed.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep(self, chat_jid: str) -> None:
        try:
            while True:
                await asyncio.sleep(self._refresh_s)
                renewed = self._renewed.get(chat_jid)
                if renewed is None or time.monotonic() - renewed > self._linger_s:
                    return
                try:
                    await self._send(chat_jid)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the next refresh tries again
                    log.debug("telegram.typing_failed", chat_jid=chat_jid, error=str(exc))
        finally:
            if self._tasks.get(chat_jid) is asyncio.current_task():
                del self._tasks[chat_jid]
                self._renewed.pop(chat_jid, None)
