"""The HTTP transport the SDK talks through: Telegram's flood control read as data, and updates
the SDK cannot read taken out before they block the poll.

python-telegram-bot 22 turns a 429 into ``telegram.error.RetryAfter``, whose constructor emits
a ``PTBDeprecationWarning`` (its ``retry_after`` is moving from seconds to a ``timedelta``)
unless the process sets ``PTB_TIMEDELTA``. Only the entry point reads the environment, so the
adapter answers 429 itself, one level lower, in the SDK's documented networking hook
(``BaseRequest.do_request``): it raises :class:`FloodWait` with the seconds Telegram asked for.

``Bot.get_updates`` parses the whole batch at once: one update its classes refuse (a field
that a newer Bot API made required, a malformed object) fails every poll, and the offset can
never move past it. Here each update of a ``getUpdates`` answer is tried on its own first; an
unreadable one is dropped from the answer and its id kept in :attr:`TelegramRequest.unreadable`,
so the poll loop can acknowledge it once the readable ones around it are stored.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from telegram import Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

__all__ = ["FloodWait", "TelegramRequest"]

log = structlog.get_logger(__name__)

TOO_MANY_REQUESTS = 429
OK = 200


class FloodWait(TelegramError):
    """Telegram's flood control: come back after ``retry_after_s`` seconds (``None``: unsaid)."""

    __slots__ = ("retry_after_s",)

    def __init__(self, description: str, retry_after_s: float | None) -> None:
        super().__init__(description)
        self.retry_after_s = retry_after_s


class TelegramRequest(HTTPXRequest):
    """``HTTPXRequest`` that raises :class:`FloodWait` for HTTP 429 and sets aside updates the
    SDK cannot read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unreadable: list[int] = []

    def take_unreadable(self) -> list[int]:
        """The ids set aside since the last call (the poll loop confirms them)."""
        taken, self.unreadable = self.unreadable, []
        return taken

    async def do_request(
        self, url: str, method: str, *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        code, payload = await super().do_request(url, method, *args, **kwargs)
        if code == TOO_MANY_REQUESTS:
            description, retry_after_s = _flood_details(payload)
            raise FloodWait(description, retry_after_s)
        if code == OK and url.endswith("/getUpdates"):
            payload = self._readable_updates(payload)
        return code, payload

    def _readable_updates(self, payload: bytes) -> bytes:
        try:
            body = json.loads(payload)
        except ValueError:
            return payload  # the SDK reports it
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list):
            return payload
        readable = []
        for update in result:
            try:
                Update.de_json(update, None)
            except Exception as exc:  # whatever the SDK's classes refuse
                update_id = update.get("update_id") if isinstance(update, dict) else None
                if not isinstance(update_id, int):
                    readable.append(update)  # without an id it cannot be skipped: the SDK says
                    continue
                self.unreadable.append(update_id)
                log.warning(
                    "telegram.unreadable_update",
                    update_id=update_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                continue
            readable.append(update)
        if len(readable) == len(result):
            return payload
        return json.dumps(body | {"result": readable}).encode()


def _flood_details(payload: bytes) -> tuple[str, float | None]:
    try:
        body = json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        return "Too Many Requests", None
    if not isinstance(body, dict):
        return "Too Many Requests", None
    description = str(body.get("description") or "Too Many Requests")
    parameters = body.get("parameters")
    retry_after = parameters.get("retry_after") if isinstance(parameters, dict) else None
    if isinstance(retry_after, int | float) and not isinstance(retry_after, bool):
        return description, float(retry_after)
    return description, None
