"""Ingest: the one function every channel calls with an inbound message (PIPELINE §1).

One transaction per message: dedupe on ``(id, chat_jid)`` (messages and drops), route, then
store the message — or, for a message nobody handles, a drop record without its content — and
do what the decision asks for: enqueue or join a turn, apply a steering command and write its
``host`` acknowledgement to the outbox, create a ``{sender}`` folder, copy the message to the
folder's mirror chats, offer a stranger a pairing code (ROUTING §8). A message that would fire
under a folder whose daily budget is used up is stored as observed instead, and its chat told.
Only after it commits may the adapter acknowledge the platform; then the workers, the delivery
loop and the live feed are woken, and the chat's typing indicator starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any

import structlog

from postroom.core.access import Role
from postroom.core.attachments import AttachmentRef
from postroom.core.decision import Action, CommandKind, Decision, DropReason, Layer
from postroom.core.display import display_text
from postroom.core.errors import InvalidInput, TooLarge
from postroom.core.folders import FolderDefaults, FolderSettings
from postroom.core.jid import parse_jid
from postroom.core.messages import INTERNAL_SENDERS, InboundMessage, MessageType, Sender
from postroom.core.steering import normalize_topic
from postroom.engine.access import open_pairing
from postroom.engine.attachments import AttachmentLimits, stored_attachments
from postroom.engine.budgets import BUDGET_NOTICE_S, BudgetBreach, budget_notice, find_breach
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.commands import apply_command
from postroom.engine.folders import FolderService
from postroom.engine.metrics import Metrics, NullMetrics
from postroom.engine.notices import new_message_id, post_notice
from postroom.engine.outbox import DeliveryKind, OutboundMessage, plan_deliveries, write_outbox
from postroom.engine.router import Router
from postroom.engine.signals import Signals
from postroom.engine.turn_limit import DEFAULT_TURNS_PER_MINUTE
from postroom.engine.turns import QueueSettings, enqueue_turn, turn_priority
from postroom.store.protocol import PriorOutcome, Store, StoreTx
from postroom.store.records import DropRecord, NewMessage

__all__ = ["IngestLimits", "IngestResult", "Ingestor", "new_message_id"]

log = structlog.get_logger(__name__)

MAX_ID_LENGTH = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class IngestLimits:
    content_bytes: int = 65536
    #: One image's and one other file's size caps (PIPELINE §1.2).
    attachments: AttachmentLimits = field(default_factory=AttachmentLimits)
    #: ROUTING §2.2: at most one "folder missing" notice per chat in this many seconds.
    missing_notice_s: float = 3600.0
    #: PIPELINE §1 item 7: turns non-owners may fire in one chat in any 60 s.
    turns_per_minute: int = DEFAULT_TURNS_PER_MINUTE


@dataclass(frozen=True, slots=True)
class IngestResult:
    id: str
    chat_jid: str
    seq: int | None
    duplicate: bool
    decision: Decision

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "chat_jid": self.chat_jid,
            "seq": self.seq,
            "duplicate": self.duplicate,
            "decision": self.decision.to_dict(),
        }


@dataclass(slots=True)
class _Effects:
    """What to do once the transaction committed."""

    typing: tuple[str, str | None] | None = None
    cancel: list[int] = field(default_factory=list)
    turn: bool = False
    outbox: bool = False


class Ingestor:
    """Stores and routes inbound messages, one transaction each."""

    def __init__(
        self,
        *,
        store: Store,
        router: Router,
        catalog: Catalog,
        folders: FolderService,
        clock: Clock,
        limits: IngestLimits,
        signals: Signals | None = None,
        queue: QueueSettings | None = None,
        defaults: FolderDefaults | None = None,
        owners: frozenset[str] = frozenset(),
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics or NullMetrics()
        self._router = router
        self._catalog = catalog
        self._folders = folders
        self._clock = clock
        self._limits = limits
        self._signals = signals or Signals()
        self._queue = queue or QueueSettings()
        self._defaults = defaults or FolderDefaults()
        self._owners = owners

    def validate(self, message: InboundMessage, *, operator: bool = False) -> None:
        """Refuse a malformed message with one clear sentence (nothing is stored)."""
        if not message.id or len(message.id) > MAX_ID_LENGTH or _CONTROL.search(message.id):
            raise InvalidInput(f"The message id must be 1 to {MAX_ID_LENGTH} printable characters.")
        parse_jid(message.chat_jid, what="chat_jid")
        if message.sender == Sender.TUI_USER.value:
            if not operator:
                raise InvalidInput("The sender tui-user is reserved for the terminal UI.")
        elif message.sender in INTERNAL_SENDERS:
            raise InvalidInput(f"The sender {message.sender!r} is reserved for postroom itself.")
        else:
            parse_jid(message.sender, what="sender")
        try:
            size = len(message.content.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput("The content is not valid UTF-8 text.") from None

        try:
            message.timestamp.astimezone(UTC)
        except OverflowError:
            raise InvalidInput("The timestamp is out of range once converted to UTC.") from None
        if size > self._limits.content_bytes:
            raise TooLarge(
                f"The content is {size} bytes; the limit is {self._limits.content_bytes}."
            )

    async def ingest(self, message: InboundMessage, *, operator: bool = False) -> IngestResult:
        """Dedupe, route and store *message* in one transaction."""
        self.validate(message, operator=operator)
        if not message.attachments and not message.content.strip():
            # PIPELINE §1: nothing to answer, so nothing is stored and no turn starts. (A
            # hypothetical message may be empty: explain() takes one.)
            raise InvalidInput("The message is empty: send some text or an attachment.")
        refs, blobs = stored_attachments(
            message.attachments, self._limits.attachments, strict=False
        )
        effects = _Effects()
        async with self._store.write() as tx:
            prior = await tx.prior_outcome(message.id, message.chat_jid)
            if prior is not None:
                return IngestResult(
                    message.id, message.chat_jid, prior.seq, True, _duplicate(prior)
                )
            decision = await self._router.decide(tx, message)
            seq, decision = await self._apply(tx, message, decision, effects, refs)
            if seq is not None and blobs:
                await tx.insert_blobs(
                    blobs, chat_jid=message.chat_jid, message_id=message.id, now=self._clock()
                )
        self._after_commit(effects)
        self._metrics.message_in(decision.action.value, decision.layer.value)
        log.debug(
            "message.ingested",
            message_id=message.id,
            chat_jid=message.chat_jid,
            action=decision.action.value,
            layer=decision.layer.value,
            folder=decision.folder,
            job_id=decision.job_id,
            seq=seq,
        )
        return IngestResult(message.id, message.chat_jid, seq, False, decision)

    def _after_commit(self, effects: _Effects) -> None:
        signals = self._signals
        for job_id in effects.cancel:
            signals.cancel_turn(job_id)
        if effects.turn:
            signals.turns.wake()
        if effects.outbox:
            signals.deliveries.wake()
        signals.stored.wake()
        if effects.typing is not None:
            # PIPELINE §1.5: the typing indicator starts as soon as a turn is decided.
            signals.typing(effects.typing[0], effects.typing[1], True)

    def _settings(self, folder: str) -> FolderSettings:
        return self._catalog.snapshot.settings(folder, self._defaults)

    async def _apply(
        self,
        tx: StoreTx,
        message: InboundMessage,
        decision: Decision,
        effects: _Effects,
        attachments: Sequence[AttachmentRef] = (),
    ) -> tuple[int | None, Decision]:
        """Store what the decision says; return the message's seq and the final decision."""
        now = self._clock()
        if decision.drop is not None:
            await self._drop(tx, message, decision, effects)
            return None, decision
        if decision.create_from_template is not None and decision.folder is not None:
            await self._folders.create_from_template(
                tx, decision.folder, decision.create_from_template
            )
        conversation_id: int | None = None
        if decision.action is Action.FIRE and decision.folder is not None:
            breach = await find_breach(tx, decision.folder, self._catalog.snapshot.folders, now=now)
            if breach is not None:
                decision = await self._over_budget(tx, message, decision, breach, effects)
        if decision.action is Action.FIRE and decision.folder is not None:
            settings = self._settings(decision.folder)
            enqueued = await enqueue_turn(
                tx,
                folder=decision.folder,
                topic=decision.topic or "",
                chat_jid=message.chat_jid,
                message_ref=(message.id, message.chat_jid),
                priority=turn_priority(
                    message.sender, settings, self._owners, owner=decision.role is Role.OWNER
                ),
                settings=settings,
                max_attempts=self._queue.max_attempts,
                now=now,
            )
            conversation_id = enqueued.conversation_id
            decision = decision.with_job(enqueued.job_id)
            if not enqueued.joined:
                # A new turn counts toward the chat's limit; joining a queued one does not.
                self._router.limiter.record(decision, message.chat_jid, message.sender, now)
            if enqueued.interrupted is not None:
                effects.cancel.append(enqueued.interrupted)
            effects.turn = True
            effects.typing = (message.chat_jid, decision.folder)
        ack: str | None = None
        if decision.action is Action.COMMAND:
            command = decision.command
            concerned = (
                command.folder if command and command.kind in _CONVERSATION_COMMANDS else None
            )
            outcome = await apply_command(
                tx,
                decision,
                message.chat_jid,
                now=now,
                settings=self._settings(concerned) if concerned else None,
            )
            ack = outcome.ack
            if outcome.cancelled_job is not None:
                effects.cancel.append(outcome.cancelled_job)
            if ack != decision.ack:
                decision = replace(decision, ack=ack)
        row = _stored_form(message, decision, conversation_id, attachments)
        seq = await tx.insert_message(row)
        if decision.rate_limited and self._router.limiter.claim_notice(message.chat_jid, now):
            await post_notice(
                tx,
                message.chat_jid,
                f"⚠️ this chat is rate limited: more than {self._router.limiter.turns_per_minute} "
                "turns in a minute; messages are kept but not answered for now.",
                clock=self._clock,
                metadata={"source": "rate_limited"},
            )
            effects.outbox = True
        if decision.action in (Action.FIRE, Action.OBSERVE) and decision.folder is not None:
            effects.outbox |= await self._mirror(tx, row, decision.folder)
        if ack:
            await post_notice(
                tx,
                message.chat_jid,
                ack,
                clock=self._clock,
                reply_to=message.id,
                metadata={
                    "source": "command",
                    "command": decision.command.kind.value if decision.command else None,
                },
            )
            effects.outbox = True
        return seq, decision

    async def _drop(
        self, tx: StoreTx, message: InboundMessage, decision: Decision, effects: _Effects
    ) -> None:
        assert decision.drop is not None
        now = self._clock()
        await tx.insert_drop(
            DropRecord(
                id=message.id,
                chat_jid=message.chat_jid,
                time=now,
                sender=message.sender,
                verb=decision.verb,
                reason=decision.drop.value,
            )
        )
        if decision.send_code:
            await open_pairing(tx, message, policy=self._router.access, clock=self._clock)
            effects.outbox = True
        elif decision.command is not None and decision.ack:
            await post_notice(
                tx,
                message.chat_jid,
                decision.ack,
                clock=self._clock,
                metadata={"source": "command", "command": decision.command.kind.value},
            )
            effects.outbox = True
        elif decision.drop is DropReason.FOLDER_MISSING and await tx.claim_missing_notice(
            message.chat_jid, now=now, interval_s=self._limits.missing_notice_s
        ):
            await post_notice(
                tx,
                message.chat_jid,
                f"⚠️ messages here are not answered: {decision.reason}",
                clock=self._clock,
                metadata={"source": "folder_missing"},
            )
            effects.outbox = True

    async def _over_budget(
        self,
        tx: StoreTx,
        message: InboundMessage,
        decision: Decision,
        breach: BudgetBreach,
        effects: _Effects,
    ) -> Decision:
        """No turn: the message is kept as observed (a later turn sees it), and the chat is
        told at most once an hour."""
        if await tx.claim_budget_notice(
            message.chat_jid, breach.folder, now=self._clock(), interval_s=BUDGET_NOTICE_S
        ):
            await post_notice(
                tx,
                message.chat_jid,
                budget_notice(breach),
                clock=self._clock,
                reply_to=message.id,
                metadata={"source": "budget", "folder": breach.folder},
            )
            effects.outbox = True
        log.info("budget.reached", folder=breach.folder, spent=breach.spent, budget=breach.budget)
        return replace(
            decision,
            action=Action.OBSERVE,
            layer=Layer.LIMIT,
            inline=None,
            trail=(*decision.trail, breach.describe()),
        )

    async def _mirror(self, tx: StoreTx, row: NewMessage, folder: str) -> bool:
        """MESSAGES §6: the folder's mirror chats get a copy of a user message from elsewhere."""
        mirrors = [chat for chat in self._settings(folder).mirror if chat != row.chat_jid]
        if not mirrors:
            return False
        text = display_text(
            MessageType.USER.value, row.content, sender_name=row.sender_name or row.sender
        )
        copy = OutboundMessage(
            message_id=row.id,
            message_chat_jid=row.chat_jid,
            message_type=MessageType.USER.value,
            content=text,
            folder=folder,
            topic=row.topic,
        )
        await write_outbox(
            tx, plan_deliveries(copy, mirrors, kind=DeliveryKind.MIRROR, now=self._clock())
        )
        return True


_CONVERSATION_COMMANDS = frozenset({CommandKind.NEW, CommandKind.STOP, CommandKind.STATUS})


def _duplicate(prior: PriorOutcome) -> Decision:
    if prior.decision is not None:
        return Decision.from_record(prior.decision).as_duplicate()
    reason = prior.drop_reason or DropReason.NO_ROUTE.value
    return Decision(
        Action.IGNORE,
        Layer.DUPLICATE,
        trail=(f"already received and dropped ({reason})",),
        drop=DropReason(reason),
    )


def _stored_form(
    message: InboundMessage,
    decision: Decision,
    conversation_id: int | None,
    attachments: Sequence[AttachmentRef],
) -> NewMessage:
    """The row for an inbound message: the original text, with routing recorded beside it
    (attachments as references to their blobs)."""
    metadata: dict[str, Any] = dict(message.metadata)
    if attachments:
        metadata["attachments"] = [a.to_dict() for a in attachments]
    if message.is_dm:
        metadata["is_dm"] = True
    if message.mentioned:
        metadata["mentioned"] = True
    if decision.layer is Layer.LIMIT:
        # Both are the `limit` layer: the chat's turns per minute, or a folder's daily budget.
        metadata["rate_limited" if decision.rate_limited else "over_budget"] = True
    if decision.action is Action.COMMAND:
        metadata["command"] = True
    elif decision.content is not None and decision.content != message.content:
        metadata["routed_content"] = decision.content
    routed = decision.action in (Action.FIRE, Action.OBSERVE)
    native = normalize_topic(message.topic) if message.topic else ""
    topic = decision.topic if decision.topic is not None else native
    if topic != native:
        # The stored topic is the turn's; a route preview resolves the message again and
        # needs the platform's own thread.
        metadata["native_topic"] = native
    return NewMessage(
        id=message.id,
        chat_jid=message.chat_jid,
        sender=message.sender,
        sender_name=message.sender_name,
        content=message.content,
        timestamp=message.timestamp,
        message_type=MessageType.USER,
        is_from_me=message.is_from_me,
        metadata=metadata,
        verb=decision.verb,
        topic=topic,
        reply_to=message.reply_to,
        routed_to=decision.folder if routed else None,
        observed=decision.action is Action.OBSERVE,
        conversation_id=conversation_id,
        decision=decision.to_record(),
    )
