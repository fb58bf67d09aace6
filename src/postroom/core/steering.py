"""Steering: what a user can type to move a conversation (ROUTING §3, §3.1).

Whole-message commands (the trimmed text is one token): ``@`` / ``@<path>`` set or clear the
chat's sticky group, ``#`` / ``#<topic>`` the sticky topic, and ``/new``, ``/stop``,
``/status``, ``/chatid`` (also ``/cmd@botname``, and ``\\cmd`` for clients that swallow a
leading ``/``). The trigger followed by exactly one such token (``@Postroom /new``) is that
command, addressed to us. Inline prefixes at the very start of a longer message: ``@name rest``
sends this one message to the child folder ``name``, ``#topic rest`` runs it under ``topic``.
Parsing is purely textual; whether ``@path`` names a folder, and so whether it is a command at
all, is decided by resolution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from postroom.core.trigger import Trigger

__all__ = [
    "NO_STEERING",
    "SLASH_COMMANDS",
    "Steering",
    "SteeringKind",
    "normalize_topic",
    "parse_steering",
    "typed_topic",
]

SLASH_COMMANDS = frozenset({"new", "stop", "status", "chatid"})
MAX_TOPIC_LENGTH = 64

#: What a command or prefix can start with (``\\`` is ``/`` for clients that swallow it).
_LEADS = "@#/\\"
_TOPIC = re.compile(r"[a-z0-9_-]+")
_SPACE = re.compile(r"\s")
_NOT_TOPIC = re.compile(r"[^a-z0-9_-]+")
_STICKY_PATH = re.compile(r"[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)*")
_SLASH = re.compile(r"[/\\]([A-Za-z]+)(?:@([A-Za-z0-9_.-]+))?")
_INLINE_FOLDER = re.compile(r"\s*@([A-Za-z0-9_-]+)\s+(\S.*)", re.DOTALL)
_INLINE_TOPIC = re.compile(r"\s*#([^\s#]+)\s+(\S.*)", re.DOTALL)


class SteeringKind(StrEnum):
    NONE = "none"
    STICKY_CLEAR = "sticky_clear"
    STICKY_SET = "sticky_set"
    TOPIC_CLEAR = "topic_clear"
    TOPIC_SET = "topic_set"
    SLASH = "slash"
    INLINE_FOLDER = "inline_folder"
    INLINE_TOPIC = "inline_topic"


@dataclass(slots=True)  # built per message: not frozen (see Decision); never mutated
class Steering:
    """What the text of a message asks for.

    ``arg`` is the folder path (lowercased), topic, child name or command name; ``rest`` is
    the text after an inline prefix.
    """

    kind: SteeringKind
    arg: str = ""
    rest: str = ""
    #: The text starts with the trigger (``@Postroom``) or is ``/cmd@<this bot>``: a mention.
    calls_us: bool = False

    @property
    def is_command(self) -> bool:
        return self.kind in _COMMAND_KINDS


_COMMAND_KINDS = frozenset(
    {
        SteeringKind.STICKY_CLEAR,
        SteeringKind.STICKY_SET,
        SteeringKind.TOPIC_CLEAR,
        SteeringKind.TOPIC_SET,
        SteeringKind.SLASH,
    }
)
NO_STEERING = Steering(SteeringKind.NONE)
_ADDRESSED_TEXT = Steering(SteeringKind.NONE, calls_us=True)


def typed_topic(text: str) -> str | None:
    """A topic typed after ``#``: valid when ``[a-z0-9_-]+`` after lowercasing, else ``None``."""
    topic = text.lower()
    if len(topic) <= MAX_TOPIC_LENGTH and _TOPIC.fullmatch(topic):
        return topic
    return None


def normalize_topic(native: str) -> str:
    """A platform's native thread id as a topic: lowercase, other runs of characters → ``-``.

    Slack's ``1712345678.123456`` becomes ``1712345678-123456``.
    """
    if not native:
        return ""
    return _NOT_TOPIC.sub("-", native.lower()).strip("-")[:MAX_TOPIC_LENGTH]


def parse_steering(content: str, trigger: Trigger) -> Steering:
    """Classify the text of a user message. Never raises.

    Also says whether the text calls this bot (starts with the trigger, or is ``/cmd@bot``),
    since both questions look at the same first characters.
    """
    if not content:
        return NO_STEERING
    first = content[0]
    # Fast exit for ordinary text: routing calls this for every message.
    if first not in _LEADS and not first.isspace():
        return NO_STEERING
    stripped = content.strip()
    if not stripped:
        return NO_STEERING
    lead = stripped[0]
    if lead not in _LEADS:
        return NO_STEERING
    calls_us = False
    if lead == "@":
        after = trigger.after_trigger(content)
        calls_us = after is not None
        command = _command_after_trigger(after, trigger) if after else None
        if command is not None:
            return command
    if _SPACE.search(stripped) is None:
        found = _parse_token(stripped, trigger)
    elif lead == "@":
        m = _INLINE_FOLDER.match(content)
        found = (
            Steering(SteeringKind.INLINE_FOLDER, m.group(1).lower(), m.group(2))
            if m
            else NO_STEERING
        )
    elif lead == "#":
        m = _INLINE_TOPIC.match(content)
        topic = typed_topic(m.group(1)) if m else None
        found = (
            Steering(SteeringKind.INLINE_TOPIC, topic, m.group(2))
            if m is not None and topic is not None
            else NO_STEERING
        )
    else:
        found = NO_STEERING
    if calls_us and not found.calls_us:
        return Steering(found.kind, found.arg, found.rest, True)
    return found


def _command_after_trigger(after: str, trigger: Trigger) -> Steering | None:
    """``@Postroom /new``: the trigger followed by exactly one whole-message command."""
    token = after.strip()
    if not token or _SPACE.search(token) is not None:
        return None
    found = _parse_token(token, trigger)
    if not found.is_command:
        return None
    return Steering(found.kind, found.arg, found.rest, True)


def _parse_token(token: str, trigger: Trigger) -> Steering:
    lead, body = token[0], token[1:]
    if lead == "@":
        if not body:
            return Steering(SteeringKind.STICKY_CLEAR)
        if _STICKY_PATH.fullmatch(body):
            return Steering(SteeringKind.STICKY_SET, body.lower())
        return NO_STEERING
    if lead == "#":
        if not body:
            return Steering(SteeringKind.TOPIC_CLEAR)
        topic = typed_topic(body)
        if topic is not None:
            return Steering(SteeringKind.TOPIC_SET, topic)
        return NO_STEERING
    m = _SLASH.fullmatch(token)
    if m is None:
        return NO_STEERING
    name = m.group(1).lower()
    addressee = m.group(2)
    addressed = addressee is not None and trigger.addresses_us(addressee)
    if addressee is not None and not addressed:
        # "/new@otherbot" is for another bot in the same group.
        return NO_STEERING
    if name not in SLASH_COMMANDS:
        return _ADDRESSED_TEXT if addressed else NO_STEERING
    return Steering(SteeringKind.SLASH, name, calls_us=addressed)
