"""Ingest: the one function every channel calls with an inbound message (PIPELINE §1).

One transaction per message: dedupe on ``(id, chat_jid)`` (messages and drops), route, then
store the message — or, for a message nobody handles, a drop record without its content —
and apply what the decision asks for (a steering command and its ``host`` acknowledgement, a
``{sender}`` folder to create). Only after it commits may the adapter acknowledge the platform.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import structlog

from postroom.core.decision import Action, Decision, DropReason, Layer
from postroom.core.errors import InvalidInput, TooLarge
from postroom.core.jid import parse_jid
from postroom.core.messages import INTERNAL_SENDERS, InboundMessage, MessageType, Sender
from postroom.core.steering import normalize_topic
from postroom.engine.catalog import Catalog
from postroom.engine.clock import Clock
from postroom.engine.commands import apply_command
from postroom.engine.folders import FolderService
from postroom.engine.router import Router
from postroom.store.protocol import PriorOutcome, Store, StoreTx
from postroom.store.records import DropRecord, NewMessage

__all__ = ["IngestLimits", "IngestResult", "Ingestor", "host_message", "new_message_id"]

log = structlog.get_logger(__name__)

MAX_ID_LENGTH = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def new_message_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class IngestLimits:
    content_bytes: int = 65536
    #: ROUTING §2.2: at most one "folder missing" notice per chat in this many seconds.
    missing_notice_s: float = 3600.0


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


def host_message(
    chat_jid: str,
    text: str,
    *,
    clock: Clock,
    reply_to: str | None = None,
    topic: str = "",
    routed_to: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> NewMessage:
    """An operational notice for a chat: stored and shown, never sent to a model."""
    return NewMessage(
        id=new_message_id(),
        chat_jid=chat_jid,
        sender=Sender.HOST.value,
        sender_name="host",
        content=text,
        timestamp=clock(),
        message_type=MessageType.HOST,
        is_from_me=True,
        metadata=dict(metadata or {}),
        topic=topic,
        reply_to=reply_to,
        routed_to=routed_to,
    )


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
    ) -> None:
        self._store = store
        self._router = router
        self._catalog = catalog
        self._folders = folders
        self._clock = clock
        self._limits = limits

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
        if size > self._limits.content_bytes:
            raise TooLarge(
                f"The content is {size} bytes; the limit is {self._limits.content_bytes}."
            )

    async def ingest(self, message: InboundMessage, *, operator: bool = False) -> IngestResult:
        """Dedupe, route and store *message* in one transaction."""
        self.validate(message, operator=operator)
        async with self._store.write() as tx:
            prior = await tx.prior_outcome(message.id, message.chat_jid)
            if prior is not None:
                return IngestResult(
                    message.id, message.chat_jid, prior.seq, True, _duplicate(prior)
                )
            decision = await self._router.decide(tx, message)
            seq, decision = await self._apply(tx, message, decision)
        log.info(
            "message.ingested",
            message_id=message.id,
            chat_jid=message.chat_jid,
            action=decision.action.value,
            layer=decision.layer.value,
            folder=decision.folder,
            seq=seq,
        )
        return IngestResult(message.id, message.chat_jid, seq, False, decision)

    async def _apply(
        self, tx: StoreTx, message: InboundMessage, decision: Decision
    ) -> tuple[int | None, Decision]:
        """Store what the decision says; return the message's seq and the final decision."""
        now = self._clock()
        if decision.drop is not None:
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
            if decision.command is not None and decision.ack:
                await tx.insert_message(
                    host_message(
                        message.chat_jid,
                        decision.ack,
                        clock=self._clock,
                        metadata={"source": "command", "command": decision.command.kind.value},
                    )
                )
            elif decision.drop is DropReason.FOLDER_MISSING and await tx.claim_missing_notice(
                message.chat_jid, now=now, interval_s=self._limits.missing_notice_s
            ):
                await tx.insert_message(
                    host_message(
                        message.chat_jid,
                        f"⚠️ messages here are not answered: {decision.reason}",
                        clock=self._clock,
                        metadata={"source": "folder_missing"},
                    )
                )
            return None, decision

        if decision.create_from_template is not None and decision.folder is not None:
            await self._folders.create_from_template(
                tx, decision.folder, decision.create_from_template
            )
        ack = None
        if decision.action is Action.COMMAND:
            ack = await apply_command(tx, decision, message.chat_jid, now=now)
            if ack != decision.ack:
                decision = replace(decision, ack=ack)
        seq = await tx.insert_message(_stored_form(message, decision))
        if ack:
            await tx.insert_message(
                host_message(
                    message.chat_jid,
                    ack,
                    clock=self._clock,
                    reply_to=message.id,
                    metadata={
                        "source": "command",
                        "command": decision.command.kind.value if decision.command else None,
                    },
                )
            )
        return seq, decision


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


def _stored_form(message: InboundMessage, decision: Decision) -> NewMessage:
    """The row for an inbound message: the original text, with routing recorded beside it."""
    metadata: dict[str, Any] = dict(message.metadata)
    if message.attachments:
        metadata["attachments"] = [asdict(a) for a in message.attachments]
    if message.is_dm:
        metadata["is_dm"] = True
    if message.mentioned:
        metadata["mentioned"] = True
    if decision.action is Action.COMMAND:
        metadata["command"] = True
    elif decision.content is not None and decision.content != message.content:
        metadata["routed_content"] = decision.content
    routed = decision.action in (Action.FIRE, Action.OBSERVE)
    topic = decision.topic if decision.topic is not None else normalize_topic(message.topic)
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
        decision=decision.to_record(),
    )
