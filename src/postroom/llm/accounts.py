"""Several keys per provider (PIPELINE §4): tried in the order listed; a rate-limited key rests.

HTTP 429/529 marks the account limited until its ``retry-after`` — or, when the API gave none,
for 1, 5, 25, then 60 minutes on successive strikes — and the call moves to the next account at
once. No rest is longer than ``max_rest_s`` (``llm.max_rest``): a ``retry-after`` of years, or
one that cannot be read, counts as that. When every account is resting the call fails with
:class:`RateLimited` whose ``retry_after`` is when the first account is free again; the worker
requeues the turn for then without using an attempt. The person only sees a slower answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from postroom.core.bounds import capped_s, later
from postroom.llm.base import ModelRequest, ModelResponse, Provider, RateLimited, TextSink

__all__ = ["AccountPool", "AccountStatus"]

log = structlog.get_logger(__name__)

LADDER_S = (60.0, 300.0, 1500.0, 3600.0)


@dataclass(frozen=True, slots=True)
class AccountStatus:
    label: str
    limited_until: datetime | None
    strikes: int


class AccountPool:
    """A :class:`Provider` over the accounts of one provider."""

    def __init__(
        self,
        name: str,
        accounts: Sequence[tuple[str, Provider]],
        *,
        clock: Callable[[], datetime],
        max_rest_s: float = 3600.0,
    ) -> None:
        if not accounts:
            raise ValueError("an account pool needs at least one account")
        self.name = name
        self._accounts = list(accounts)
        self._clock = clock
        self._max_rest_s = max_rest_s
        self._until: dict[str, datetime] = {}
        self._strikes: dict[str, int] = {}

    def accounts(self) -> list[tuple[str, Provider]]:
        return list(self._accounts)

    def status(self) -> list[AccountStatus]:
        now = self._clock()
        return [
            AccountStatus(
                label,
                until if (until := self._until.get(label)) and until > now else None,
                self._strikes.get(label, 0),
            )
            for label, _ in self._accounts
        ]

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        last: RateLimited | None = None
        for label, provider in self._accounts:
            if self._resting(label):
                continue
            try:
                response = await provider.complete(request, sink=sink)
            except RateLimited as exc:
                self._rest(label, exc.retry_after)
                last = exc
                if sink is not None:
                    sink.restart()  # a limit can come mid-stream: the next account starts over
                continue
            self._strikes.pop(label, None)
            return response
        wait = self._next_free_in()
        reason = f"every {self.name} account is rate-limited"
        if last is not None:
            reason += f" (last: {last})"
        raise RateLimited(reason, retry_after=wait, public=f"every {self.name} account is resting")

    async def check(self) -> str:
        results = []
        for label, provider in self._accounts:
            results.append(f"{label}: {await provider.check()}")
        return "; ".join(results)

    def _resting(self, label: str) -> bool:
        until = self._until.get(label)
        return until is not None and until > self._clock()

    def _rest(self, label: str, retry_after: float | None) -> None:
        strikes = self._strikes.get(label, 0) + 1
        self._strikes[label] = strikes
        asked = retry_after if retry_after is not None else LADDER_S[min(strikes, 4) - 1]
        seconds = capped_s(asked, self._max_rest_s)
        self._until[label] = later(self._clock(), seconds)
        log.warning("provider.account_limited", provider=self.name, account=label, rest_s=seconds)

    def _next_free_in(self) -> float | None:
        now = self._clock()
        waits = [(until - now).total_seconds() for until in self._until.values() if until > now]
        return min(waits) if waits else None
