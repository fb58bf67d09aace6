"""The per-chat turn limit: the loop guard of last resort (PIPELINE §1 item 7).

Two bots answering each other, or a webhook that posts every answer back, are not marked as
the bot's own messages; without a limit they loop forever. In one chat, messages from
non-owner senders fire at most ``[limits] turns_per_minute`` turns in any 60 s; beyond that a
message is observed instead, and the chat hears about it at most once per 10 minutes.

The window lives in memory: it is consulted for every firing message, so it must cost no
database read, and losing it on a restart only forgets the last minute. It holds at most
``turns_per_minute`` times per chat, and chats quiet for a minute are forgotten once many
chats are tracked.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from postroom.core.access import Role
from postroom.core.decision import Action, Decision
from postroom.core.jid import split_jid

__all__ = ["DEFAULT_TURNS_PER_MINUTE", "TurnLimiter"]

DEFAULT_TURNS_PER_MINUTE = 20
WINDOW_S = 60.0
NOTICE_INTERVAL_S = 600.0
#: Beyond this many tracked chats, those quiet for a whole window are forgotten.
_PRUNE_AT = 10_000
#: Operator chats are the API token holder's own: never limited.
_OPERATOR_PLATFORM = "tui"


class TurnLimiter:
    """Counts each chat's fired turns over the last 60 s."""

    def __init__(
        self,
        *,
        turns_per_minute: int = DEFAULT_TURNS_PER_MINUTE,
        owners: frozenset[str] = frozenset(),
    ) -> None:
        self._limit = turns_per_minute
        self._owners = owners
        self._fired: dict[str, deque[float]] = {}
        self._noticed: dict[str, float] = {}

    @property
    def turns_per_minute(self) -> int:
        return self._limit

    def check(self, decision: Decision, chat_jid: str, sender: str, now: datetime) -> Decision:
        """*decision*, observed instead when it would fire one turn too many; changes nothing."""
        if not self._applies(decision, chat_jid, sender):
            return decision
        if self._recent(chat_jid, now.timestamp()) < self._limit:
            return decision
        return decision.as_rate_limited(self._limit)

    def record(self, decision: Decision, chat_jid: str, sender: str, now: datetime) -> None:
        """Count a turn that *decision* started (a message joining a queued turn starts none)."""
        if decision.action is not Action.FIRE or not self._applies(decision, chat_jid, sender):
            return
        at = now.timestamp()
        window = self._fired.get(chat_jid)
        if window is None:
            if len(self._fired) >= _PRUNE_AT:
                self._prune(at)
            window = self._fired[chat_jid] = deque(maxlen=self._limit)
        window.append(at)

    def claim_notice(self, chat_jid: str, now: datetime) -> bool:
        """Whether the chat should hear now that it is rate limited (once per 10 minutes)."""
        at = now.timestamp()
        last = self._noticed.get(chat_jid)
        if last is not None and at - last < NOTICE_INTERVAL_S:
            return False
        if len(self._noticed) >= _PRUNE_AT:
            self._noticed = {c: t for c, t in self._noticed.items() if at - t < NOTICE_INTERVAL_S}
        self._noticed[chat_jid] = at
        return True

    def _applies(self, decision: Decision, chat_jid: str, sender: str) -> bool:
        return (
            decision.action is Action.FIRE
            and decision.role is not Role.OWNER
            and sender not in self._owners
            and split_jid(chat_jid)[0] != _OPERATOR_PLATFORM
        )

    def _recent(self, chat_jid: str, at: float) -> int:
        window = self._fired.get(chat_jid)
        if not window:
            return 0
        while window and at - window[0] >= WINDOW_S:
            window.popleft()
        return len(window)

    def _prune(self, at: float) -> None:
        quiet = [c for c, w in self._fired.items() if not w or at - w[-1] >= WINDOW_S]
        for chat_jid in quiet:
            del self._fired[chat_jid]
