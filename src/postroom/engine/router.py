"""The router service: the state lookups around :func:`postroom.core.resolution`.

For one message it loads just what resolution needs — the catalog snapshot (rebuilt only when
the stored catalog version moved), the chat's sticky state and engagements, and the message a
reply points at — inside the caller's transaction, then decides. Admission (ROUTING §8) comes
first: a refused sender's message is decided here, before the route table is consulted;
last, the chat's turn limit may turn a firing message into an observed one (decision
layer ``limit``).
"""

from __future__ import annotations

from dataclasses import replace

from postroom.core.access import AccessPolicy, Admission, Verdict, admit, pairing_step
from postroom.core.decision import Action, Decision, DropReason, Layer, RoutingMessage
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
        access: AccessPolicy | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._trigger = trigger
        self._clock = clock
        self.limiter = limiter or TurnLimiter()
        self._access = access or AccessPolicy()

    @property
    def access(self) -> AccessPolicy:
        return self._access

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
        admission: Admission | None = None
        if message_type is MessageType.USER and not message.is_from_me:
            admission = admit(
                message.chat_jid,
                message.sender,
                message.is_dm,
                snapshot.principals,
                self._access,
            )
            if admission.verdict is not Verdict.ADMIT:
                return await self._refuse(tx, message, admission)
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
        if admission is not None and admission.why is not None:
            decision = replace(
                decision, trail=(admission.why, *decision.trail), role=admission.role
            )
        # The decision layer `limit` comes last: only a message that would fire is limited.
        return self.limiter.check(decision, message.chat_jid, message.sender, now)

    async def _refuse(self, tx: StoreTx, message: InboundMessage, admission: Admission) -> Decision:
        """The decision for a sender admission refused: nothing but a drop record is stored."""
        why = admission.why or "not admitted"
        send_code = False
        if admission.verdict is Verdict.PAIR:
            platform = message.chat_jid.partition(":")[0]
            state = await tx.pairing_state(message.chat_jid, platform, now=self._clock())
            send_code, note = pairing_step(state, self._access)
            why = f"{why}: {note}"
        return Decision(
            Action.IGNORE,
            Layer.ACCESS,
            trail=(why,),
            verb=message.verb or "message",
            drop=DropReason(admission.drop or DropReason.NOT_ADMITTED.value),
            role=admission.role,
            send_code=send_code,
        )

    async def explain(
        self, message: InboundMessage, *, message_type: MessageType = MessageType.USER
    ) -> Decision:
        """The decision for a hypothetical message against the current state; changes nothing."""
        async with self._store.read() as tx:
            return await self.decide(tx, message, message_type=message_type)
