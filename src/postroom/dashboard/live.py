"""The dashboard's live feed: Server-Sent Events over the signed-in session (an EventSource
cannot send a bearer header, and the token never goes in its URL).

``event: message`` carries a stored message already rendered as the conversation view lists
it (for the folder and chat the page shows); ``event: change`` tells the other pages that
something moved, so htmx reloads the part that shows it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from postroom.core.folders import is_within
from postroom.dashboard.insight import message_view
from postroom.dashboard.shell import Shell
from postroom.engine.services import Services
from postroom.engine.sessions import Session

__all__ = ["routes"]

KEEPALIVE_S = 15.0


def routes(shell: Shell, context: Any) -> list[BaseRoute]:
    feed = LiveFeed(shell, context.services)
    return [Route("/dashboard/events", shell.page(feed.events), methods=["GET"])]


class LiveFeed:
    def __init__(self, shell: Shell, services: Services) -> None:
        self._shell = shell
        self._services = services

    async def events(self, request: Request, session: Session) -> Response:
        return StreamingResponse(
            self._stream(request, session),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _stream(self, request: Request, session: Session) -> AsyncIterator[bytes]:
        chat = request.query_params.get("chat") or None
        folder = request.query_params.get("folder") or None
        within = session.principal.folder
        subscription = self._services.signals.bus.subscribe(
            kinds=frozenset({"message", "delivery"})
        )
        try:
            yield b": connected\n\n"
            async for event in subscription.with_keepalives(KEEPALIVE_S, request.is_disconnected):
                if event is None:
                    yield b": keep-alive\n\n"
                    continue
                data = event.data
                routed = data.get("routed_to") or data.get("folder")
                if within is not None and not (routed and is_within(str(routed), within)):
                    continue
                yield _frame("change", event.kind)
                if event.kind == "message" and _shown(data, chat=chat, folder=folder):
                    html = self._shell.fragment("_message.html", m=message_view(dict(data)))
                    yield _frame("message", html)
        finally:
            subscription.close()


def _shown(data: dict[str, Any], *, chat: str | None, folder: str | None) -> bool:
    if chat is not None and data.get("chat_jid") != chat:
        return False
    routed = data.get("routed_to")
    return folder is None or (isinstance(routed, str) and is_within(routed, folder))


def _frame(kind: str, text: str) -> bytes:
    lines = "".join(f"data: {line}\n" for line in text.splitlines() or [""])
    return f"event: {kind}\n{lines}\n".encode()
