"""Slack events as postroom sees them: pure functions, no I/O.

One ``message`` (or ``app_mention``) event becomes a :class:`SlackMessage` with canonical
addresses (ROUTING §1): ``slack:<team>/channel/<id>`` for public channels,
``slack:<team>/group/<id>`` for private channels and group DMs, ``slack:<team>/dm/<id>`` for
direct messages, sender ``slack:user/<id>``. The thread a message was written in (its
``thread_ts``) is its native topic; postroom normalizes ``1712345678.123456`` to
``1712345678-123456``, and :func:`thread_ts_of_topic` turns that back into the ``thread_ts``
a reply must carry.

Registered slash commands (``/new``, ``/stop``, ``/status``, ``/chatid``, or one command such
as ``/postroom`` taking the command's name) arrive as their own payload, not as a message
event: :func:`parse_slash_command` reads one as the steering command it stands for.
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from postroom.core.errors import InvalidInput
from postroom.core.jid import make_jid
from postroom.core.messages import InboundMessage
from postroom.core.steering import SLASH_COMMANDS

__all__ = [
    "BotIdentity",
    "SlackCommand",
    "SlackMessage",
    "guess_kind",
    "is_ts",
    "kind_of_channel",
    "parse_event",
    "parse_slash_command",
    "slack_text_to_plain",
    "thread_ts_of_topic",
    "timestamp_of",
]

#: ``channel_type`` of a message event → the chat kind of its address.
_CHANNEL_TYPES: Mapping[str, str] = MappingProxyType(
    {"channel": "channel", "group": "group", "mpim": "group", "im": "dm"}
)
#: Subtypes that are not something a person said: edits, deletions, joins, topic changes...
#: Only these carry a person's words; everything else is acknowledged and ignored.
_SPOKEN_SUBTYPES = frozenset({"", "file_share", "thread_broadcast", "me_message", "bot_message"})

_TS = re.compile(r"\d{1,12}\.\d{1,9}")
_TS_TOPIC = re.compile(r"(\d{1,12})-(\d{1,9})")
_REFERENCE = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_SLACK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: ``channel_name`` of a slash command → the chat kind, where it tells.
_COMMAND_CHANNELS: Mapping[str, str] = MappingProxyType(
    {"directmessage": "dm", "privategroup": "group"}
)
_COMMAND_WORDS = ", ".join(sorted(SLASH_COMMANDS))


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is (``auth.test``): its user id, bot id and workspace."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """A message event, normalized but not yet enriched (files are fetched by the channel)."""

    ts: str
    team_id: str
    channel_id: str
    kind: str  # channel | group | dm
    user_id: str
    text: str
    thread_ts: str
    mentioned: bool
    is_from_me: bool
    files: tuple[Mapping[str, Any], ...]
    event_id: str
    subtype: str

    @property
    def chat_jid(self) -> str:
        return make_jid("slack", self.team_id, self.kind, self.channel_id)

    @property
    def sender(self) -> str:
        return make_jid("slack", "user", self.user_id)

    @property
    def topic(self) -> str:
        """The raw ``thread_ts`` of the thread this message is in ("" at the top level)."""
        return self.thread_ts if self.thread_ts and self.thread_ts != self.ts else ""

    @property
    def reply_to(self) -> str | None:
        """A message in a thread answers the thread's first message."""
        return self.topic or None


@dataclass(frozen=True, slots=True)
class SlackCommand:
    """A registered slash command, as the steering command it stands for (``/new``...)."""

    name: str
    team_id: str
    channel_id: str
    #: ``dm`` or ``group`` when the payload says so, else ``None`` (the channel is asked).
    kind: str | None
    user_id: str
    trigger_id: str

    @property
    def content(self) -> str:
        return f"/{self.name}"

    def inbound(self, kind: str, sender_name: str, now: datetime) -> InboundMessage:
        """The message ingest takes: the command, addressed to the bot (as ``/new@bot`` is)."""
        return InboundMessage(
            id=f"command-{self.trigger_id or uuid.uuid4().hex}",
            chat_jid=make_jid("slack", self.team_id, kind, self.channel_id),
            sender=make_jid("slack", "user", self.user_id),
            content=self.content,
            timestamp=now,
            sender_name=sender_name,
            mentioned=True,
            is_dm=kind == "dm",
            metadata={
                "slack": {"channel": self.channel_id, "team": self.team_id, "slash_command": True}
            },
        )


def parse_slash_command(fields: Mapping[str, Any]) -> SlackCommand:
    """Read a slash command payload (the form fields of the Events API, the payload of a Socket
    Mode envelope). ``/new`` is ``/new``; any other registered command (``/postroom``) takes the
    name as its text (``/postroom status``). :class:`InvalidInput` says what was wrong."""
    command = str(fields.get("command") or "").strip().lstrip("/").lower()
    text = str(fields.get("text") or "").strip()
    if command in SLASH_COMMANDS:
        if text:
            raise InvalidInput(f"/{command} takes nothing after it.")
        name = command
    else:
        name = text.lstrip("/\\").lower()
        if name not in SLASH_COMMANDS:
            raise InvalidInput(f"/{command or '?'} takes one of: {_COMMAND_WORDS}.")
    team_id = str(fields.get("team_id") or "")
    channel_id = str(fields.get("channel_id") or "")
    user_id = str(fields.get("user_id") or "")
    if not all(_SLACK_ID.fullmatch(value) for value in (team_id, channel_id, user_id)):
        raise InvalidInput("The slash command does not say its workspace, channel and user.")
    kind = _COMMAND_CHANNELS.get(str(fields.get("channel_name") or ""))
    return SlackCommand(
        name=name,
        team_id=team_id,
        channel_id=channel_id,
        kind=kind or kind_of_channel(None, channel_id),
        user_id=user_id,
        trigger_id=str(fields.get("trigger_id") or "")[:200],
    )


def kind_of_channel(channel_type: str | None, channel_id: str) -> str | None:
    """The chat kind from an event's ``channel_type``; ``None`` when the event has none."""
    if channel_type:
        return _CHANNEL_TYPES.get(channel_type, "channel")
    if channel_id.startswith("D"):
        return "dm"
    return None


def guess_kind(channel_id: str) -> str:
    """A last resort when Slack cannot be asked: the id's prefix (``D`` DM, ``G`` private)."""
    if channel_id.startswith("D"):
        return "dm"
    if channel_id.startswith("G"):
        return "group"
    return "channel"


def parse_event(
    payload: Mapping[str, Any],
    event: Mapping[str, Any],
    *,
    kind: str,
    bot: BotIdentity | None,
    assistant_name: str,
) -> SlackMessage | None:
    """A ``message``/``app_mention`` event as a :class:`SlackMessage`; ``None`` when it is not
    something a person said (an edit, a deletion, a join...)."""
    subtype = str(event.get("subtype") or "")
    if subtype not in _SPOKEN_SUBTYPES:
        return None
    ts = str(event.get("ts") or "")
    channel_id = str(event.get("channel") or "")
    if not _TS.fullmatch(ts) or not channel_id:
        return None
    team_id = str(payload.get("team_id") or event.get("team") or (bot.team_id if bot else ""))
    bot_user = _bot_user(payload, bot)
    user_id = str(event.get("user") or event.get("bot_id") or "")
    bot_id = str(event.get("bot_id") or "")
    own = bool(bot_user and user_id == bot_user) or bool(bot and bot_id and bot_id == bot.bot_id)
    # Other bots and integrations count as our own voice too: two bots answering each other
    # would loop forever (the bot-loop guard of ROUTING §3).
    is_from_me = own or subtype == "bot_message"
    raw_text = str(event.get("text") or "")
    mentioned = event.get("type") == "app_mention" or bool(bot_user and f"<@{bot_user}" in raw_text)
    files = tuple(f for f in event.get("files") or () if isinstance(f, Mapping))
    thread_ts = str(event.get("thread_ts") or "")
    return SlackMessage(
        ts=ts,
        team_id=team_id or "unknown",
        channel_id=channel_id,
        kind=kind,
        user_id=user_id or "unknown",
        text=slack_text_to_plain(raw_text, bot_user=bot_user, assistant_name=assistant_name),
        thread_ts=thread_ts if _TS.fullmatch(thread_ts) else "",
        mentioned=mentioned and not is_from_me,
        is_from_me=is_from_me,
        files=files,
        event_id=str(payload.get("event_id") or ""),
        subtype=subtype,
    )


def _bot_user(payload: Mapping[str, Any], bot: BotIdentity | None) -> str:
    if bot is not None and bot.user_id:
        return bot.user_id
    # Before auth.test answered, the event's own authorizations say who we are.
    authorizations: Sequence[Any] = payload.get("authorizations") or ()
    for authorization in authorizations:
        if isinstance(authorization, Mapping) and authorization.get("is_bot"):
            return str(authorization.get("user_id") or "")
    return ""


def slack_text_to_plain(text: str, *, bot_user: str, assistant_name: str) -> str:
    """Slack's wire text as a person reads it: ``<@U1>`` → ``@U1`` (the bot itself →
    ``@<assistant name>``, so a mention at the start is also postroom's trigger),
    ``<#C1|general>`` → ``#general``, ``<url|label>`` → ``label (url)``, entities decoded."""

    def replace(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            user = target[1:]
            return f"@{assistant_name}" if user == bot_user else f"@{label or user}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            special = target[1:].split("^", 1)[0]
            return f"@{label.lstrip('@') if label else special}"
        url = target.removeprefix("mailto:")
        return f"{label} ({url})" if label and label != url else url

    return html.unescape(_REFERENCE.sub(replace, text))


def thread_ts_of_topic(topic: str) -> str | None:
    """The ``thread_ts`` a normalized native topic came from (``1712345678-123456`` →
    ``1712345678.123456``); ``None`` for a topic that is not a Slack thread."""
    match = _TS_TOPIC.fullmatch(topic)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def is_ts(value: str | None) -> bool:
    return bool(value) and _TS.fullmatch(value or "") is not None


def timestamp_of(ts: str) -> datetime:
    return datetime.fromtimestamp(float(ts), tz=UTC)
