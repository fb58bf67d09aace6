"""Shared fixtures for the pure routing tests: the table of ROUTING §7, message builders and a
tiny pure simulator of what the engine does with a decision (commands, template folders,
engagement after a delivered reply)."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from postroom.core import (
    EMPTY_CHAT,
    Action,
    ChatState,
    CommandKind,
    Decision,
    Engagement,
    MessageType,
    ReplyTarget,
    Route,
    RouteIndex,
    RoutingMessage,
    Trigger,
    parse_match,
    parse_target,
    resolve,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
TTL = timedelta(minutes=30)
TRIGGER = Trigger()

#: ROUTING §7: the folders that exist.
SPEC_FOLDERS: frozenset[str] = frozenset(
    {
        "atlas",
        "atlas/content",
        "atlas/social",
        "atlas/legal",
        "atlas/dm",
        "atlas/posts",
        "main",
        "acme",
        "acme/eng",
        "other",
    }
)

#: ROUTING §7: the table, as ``(id, seq, match, target)``.
SPEC_ROWS: tuple[tuple[int, int, str, str], ...] = (
    (1, -10, "chat_jid=telegram:user/12345", "atlas/legal"),
    (2, 0, "platform=telegram", "atlas"),
    (3, 0, "platform=discord room=dm/*", "atlas/dm"),
    (4, 0, "platform=reddit verb=post", "atlas/posts"),
    (5, 10, "platform=discord room=guild/sloth", "main"),
    (6, 20, "platform=discord room=guild/* verb=mention", "main"),
    (7, 30, "platform=discord room=guild/*", "main#observe"),
    (8, 40, "chat_jid=hook:acme/eng/github", "acme/eng#deploy"),
    (9, 9999, "", "atlas"),
)


def route(id: int, seq: int, match: str, target: str) -> Route:
    return Route(id=id, seq=seq, match=parse_match(match), target=parse_target(target))


def table(rows: Iterable[tuple[int, int, str, str]]) -> RouteIndex:
    return RouteIndex(route(*row) for row in rows)


SPEC_TABLE = table(SPEC_ROWS)


def spec_table_without(*ids: int) -> RouteIndex:
    return table(row for row in SPEC_ROWS if row[0] not in ids)


def default_sender(chat_jid: str) -> str:
    platform = chat_jid.partition(":")[0]
    return {
        "telegram": "telegram:user/7",
        "discord": "discord:user/alice",
        "slack": "slack:user/U1",
        "reddit": "reddit:user/redditor",
        "hook": "hook:github",
        "matrix": "matrix:user/@bob:example.org",
        "tui": "tui-user",
    }.get(platform, f"{platform}:user/1")


def msg(
    chat_jid: str,
    content: str = "hi",
    *,
    sender: str | None = None,
    verb: str = "message",
    mentioned: bool = False,
    native_topic: str = "",
    message_type: MessageType = MessageType.USER,
    is_from_me: bool = False,
    reply: ReplyTarget | None = None,
) -> RoutingMessage:
    return RoutingMessage(
        chat_jid=chat_jid,
        sender=default_sender(chat_jid) if sender is None else sender,
        content=content,
        verb=verb,
        mentioned=mentioned,
        native_topic=native_topic,
        message_type=message_type,
        is_from_me=is_from_me,
        reply=reply,
    )


def assistant_reply(routed_to: str | None, topic: str = "") -> ReplyTarget:
    """The stored assistant message a reply points at."""
    return ReplyTarget(
        message_type=MessageType.ASSISTANT, is_from_me=True, routed_to=routed_to, topic=topic
    )


def run(
    message: RoutingMessage,
    routes: RouteIndex = SPEC_TABLE,
    chat: ChatState = EMPTY_CHAT,
    folders: Set[str] = SPEC_FOLDERS,
    *,
    now: datetime = T0,
    trigger: Trigger = TRIGGER,
) -> Decision:
    return resolve(message, routes, chat, folders, now=now, trigger=trigger)


def engaged(folder: str, until: datetime, topic: str = "") -> ChatState:
    return ChatState(engagements={topic: Engagement(folder, until)})


def apply_command(state: ChatState, decision: Decision) -> ChatState:
    """What the engine stores on the chat for a command decision (ROUTING §3.1, §4)."""
    command = decision.command
    if command is None:
        return state
    kind = command.kind
    if kind is CommandKind.SET_STICKY:
        # Setting or clearing the sticky group ends the chat's engagement (every topic).
        return replace(state, sticky_group=command.folder, engagements={})
    if kind is CommandKind.CLEAR_STICKY:
        return replace(state, sticky_group=None, engagements={})
    if kind is CommandKind.SET_TOPIC:
        return replace(state, sticky_topic=command.topic)
    if kind is CommandKind.CLEAR_TOPIC:
        return replace(state, sticky_topic=None)
    if kind is CommandKind.NEW:
        return replace(state, engagements={})
    # refuse_sticky, stop, status, chatid: nothing stored on the chat.
    return state


@dataclass
class ChatSim:
    """One chat, driven message by message, with the engine's effects applied by hand."""

    routes: RouteIndex
    folders: set[str]
    chat_jid: str
    state: ChatState = field(default_factory=ChatState)
    ttl: timedelta = TTL

    def send(self, message: RoutingMessage, now: datetime) -> Decision:
        decision = resolve(message, self.routes, self.state, self.folders, now=now, trigger=TRIGGER)
        self.state = apply_command(self.state, decision)
        if decision.create_from_template is not None and decision.folder is not None:
            self.folders.add(decision.folder)
        return decision

    def reply_delivered(self, decision: Decision, now: datetime) -> None:
        """The agent's reply to a fired turn was delivered: it engages ``(chat, topic)``."""
        assert decision.action is Action.FIRE
        assert decision.folder is not None
        assert decision.topic is not None
        if self.ttl <= timedelta(0):
            return
        engagements = dict(self.state.engagements)
        engagements[decision.topic] = Engagement(decision.folder, now + self.ttl)
        self.state = replace(self.state, engagements=engagements)
