"""A model provider a test holds the reins of: it answers like ``echo`` once let through."""

from __future__ import annotations

import asyncio
import re
from collections import Counter, deque
from collections.abc import Iterable

from postroom.llm import EchoProvider, ModelRequest, ModelResponse, ProviderError, TextSink

__all__ = ["GatedProvider", "chat_of", "conversation_of"]

_NOTICE = re.compile(r"^Chat: (\S+) .*^You are the agent in folder (\S+)\.$", re.M | re.S)


class GatedProvider:
    """The folders' provider (``echo``): answers like the echo provider once ``gate`` is open.

    It records every request and the order of starts, ends and cancellations, can hold one call
    on its own event (``holds[index]``), raises the queued ``failures`` first, and counts the
    calls in flight per conversation — ``(folder, chat)``, read off the system notices.
    """

    name = "echo"

    def __init__(self, *, open_gate: bool = True, failures: Iterable[ProviderError] = ()) -> None:
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.holds: dict[int, asyncio.Event] = {}
        self.failures = deque(failures)
        self.requests: list[ModelRequest] = []
        self.keys: list[tuple[str, str]] = []
        self.events: list[tuple[str, int]] = []
        self.in_flight: Counter[tuple[str, str]] = Counter()
        self.max_in_flight: Counter[tuple[str, str]] = Counter()
        self.total = 0
        self.max_total = 0
        self._echo = EchoProvider()

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        index = len(self.requests)
        key = conversation_of(request)
        self.requests.append(request)
        self.keys.append(key)
        self.events.append(("start", index))
        self.in_flight[key] += 1
        self.total += 1
        self.max_in_flight[key] = max(self.max_in_flight[key], self.in_flight[key])
        self.max_total = max(self.max_total, self.total)
        try:
            await self.gate.wait()
            hold = self.holds.get(index)
            if hold is not None:
                await hold.wait()
            if self.failures:
                self.events.append(("failed", index))
                raise self.failures.popleft()
            response = await self._echo.complete(request)
        except asyncio.CancelledError:
            self.events.append(("cancelled", index))
            raise
        finally:
            self.in_flight[key] -= 1
            self.total -= 1
        self.events.append(("done", index))
        return response

    async def check(self) -> str:
        return "gated echo"

    def cancelled(self) -> list[int]:
        return [index for event, index in self.events if event == "cancelled"]


def conversation_of(request: ModelRequest) -> tuple[str, str]:
    """``(folder, chat)`` of a request, read off its system notices."""
    found = _NOTICE.search(request.system)
    assert found is not None, request.system
    return found.group(2), found.group(1)


def chat_of(request: ModelRequest) -> str:
    return conversation_of(request)[1]
