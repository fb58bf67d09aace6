"""An answer on its way: the model's text shown live while it is written (``stream = true``).

A streaming provider writes the answer piece by piece into an :class:`AnswerStream`, which
publishes ``stream`` events on the live feed for the web chat and the TUI. The events are
ephemeral: never stored, never in the outbox, so a platform chat only ever receives the stored
answer, and the stored ``assistant`` row replaces the growing text wherever it was shown.

What a stream shows is what the reader will be allowed to see: tags are removed as they are
when the answer is stored, and a tag still being written is held back (:func:`partial_text`).
Pieces are coalesced: at most one event per ``interval_s``, however fast the model writes.

An event's ``offset`` says how many characters (code points) of the shown text come before
its ``text``; ``offset`` 0 replaces what was shown (a new call of the tool loop, a retry on
another account). The last event has ``done`` set and the id of the stored answer that
replaces the text (``answer_id``), or ``None`` when the run stored no answer.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from postroom.core.tags import partial_text
from postroom.engine.signals import EventBus

__all__ = ["STREAM_INTERVAL_S", "AnswerStream"]

#: At most one event per this many seconds per answer.
STREAM_INTERVAL_S = 0.075


class AnswerStream:
    """The live text of one turn's answer in one chat (a :class:`~postroom.llm.base.TextSink`).

    Timers run on the event loop it was made in; nothing here awaits, so a provider can write
    from inside its read loop.
    """

    def __init__(
        self,
        *,
        bus: EventBus,
        chat_jid: str,
        folder: str,
        role: str,
        job_id: int,
        interval_s: float = STREAM_INTERVAL_S,
    ) -> None:
        self._bus = bus
        self._base = {"chat_jid": chat_jid, "folder": folder, "job_id": job_id}
        self._folder = folder
        self._role = role
        self._interval_s = interval_s
        self._loop = asyncio.get_running_loop()
        self._raw: list[str] = []
        self._shown = ""
        self._timer: asyncio.TimerHandle | None = None
        self._last = -math.inf
        self._published = False
        self._closed = False

    def write(self, text: str) -> None:
        if text and not self._closed:
            self._raw.append(text)
            self._schedule()

    def restart(self) -> None:
        if not self._closed:
            self._raw.clear()
            self._schedule()

    def close(self, answer_id: str | None) -> None:
        """The run ended: its stored answer is *answer_id*, or there is none (``None``)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._published:
            self._publish(offset=len(self._shown), text="", done=True, answer_id=answer_id)

    def _schedule(self) -> None:
        if self._timer is None:
            delay = max(0.0, self._last + self._interval_s - self._loop.time())
            self._timer = self._loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        self._timer = None
        self._last = self._loop.time()
        if not self._bus.wants("stream"):
            return  # nobody is watching: not even the tags are worth reading
        raw = "".join(self._raw)
        self._raw = [raw]
        visible = partial_text(raw, folder=self._folder, role=self._role)
        if visible == self._shown:
            return
        if visible.startswith(self._shown):
            offset, text = len(self._shown), visible[len(self._shown) :]
        else:
            offset, text = 0, visible  # removing a finished tag changed what came before
        self._shown = visible
        self._publish(offset=offset, text=text, done=False, answer_id=None)

    def _publish(self, *, offset: int, text: str, done: bool, answer_id: str | None) -> None:
        self._published = True
        data: dict[str, Any] = {
            **self._base,
            "offset": offset,
            "text": text,
            "done": done,
            "answer_id": answer_id,
        }
        self._bus.publish("stream", data)
