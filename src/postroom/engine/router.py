"""The router service: the state lookups around :func:`postroom.core.resolution`.

For one message it loads just what resolution needs — the catalog snapshot (rebuilt only when
the stored catalog version moved), the chat's sticky state and engagements, and the message a
reply points at — inside the caller's transaction, then decides; last, the chat's turn limit
may turn a firing message into an observed one (decision layer ``limit``).
"""

from __future__ import annotations

from postroom.core.decision import Decision, RoutingMessage
from postroom.core.messages import InboundMessage, MessageType
from postroom.core.resolution import resolve
from postroom.core.trigger import Trigger
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.turn_limit import TurnLimiter
from postroom.store.protocol import Store, StoreTx

__all__ = ["Router"]


class Router:
    """Decides where inbound messages go."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        trigger: Trigger,
        clock: Clock,
        limiter: TurnLimiter | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._trigger = trigger
        self._clock = clock
        self.limiter = limiter or TurnLimiter()

    @property
    def trigger(self) -> Trigger:
        return self._trigger

    async def decide(
        self,
        tx: StoreTx,
        message: InboundMessage,
        *,
        message_type: MessageType = MessageType.USER,
    ) -> Decision:
        """Route *message* with the state visible in *tx* (changes nothing)."""
        snapshot = await self._catalog.current(tx)
        chat = await tx.chat_state(message.chat_jid)
        reply = None
        if message.reply_to:
            reply = await tx.find_reply_target(message.chat_jid, message.reply_to)
        routing = RoutingMessage(
            chat_jid=message.chat_jid,
            sender=message.sender,
            content=message.content,
            verb=message.verb,
            mentioned=message.mentioned,
            native_topic=message.topic,
            message_type=message_type,
            is_from_me=message.is_from_me,
            reply=reply,
        )
        now = self._clock()
        decision = resolve(
            routing, snapshot.index, chat, snapshot.paths, now=now, trigger=self._trigger
        )
        # The decision layer `limit` comes last: only a message that would fire is limited.
        return self.limiter.check(decision, message.chat_jid, message.sender, now)

    async def explain(
        self, message: InboundMessage, *, message_type: MessageType = MessageType.USER
    ) -> Decision:
        """The decision for a hypothetical message against the current state; changes nothing."""
        async with self._store.read() as tx:
            return await self.decide(tx, message, message_type=message_type)
