"""Telegram messages as postroom sees them (ROUTING §1): addresses, mentions, replies, topics.

Pure functions over the SDK's ``Message`` objects; fetching media is :mod:`.media`'s job.

- chat ``telegram:user/<id>`` for a private chat, ``telegram:group/<id>`` for a group or a
  supergroup with the id's minus sign dropped (``-1001234`` → ``group/1001234``); the sender is
  ``telegram:user/<id>``. Channels (broadcast-only) are not chats postroom answers in.
- A forum topic is the message's native topic (its ``message_thread_id``), not part of the JID.
- Mentioned: an ``@<bot username>`` mention entity, a text mention of the bot, a command
  addressed to it (``/cmd@<bot username>``), or a reply to one of its messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from telegram import Chat, Message, MessageEntity
from telegram.constants import ChatType, MessageEntityType

from postroom.core.messages import InboundMessage

__all__ = [
    "VOICE_PLACEHOLDER",
    "BotIdentity",
    "chat_id_for",
    "chat_jid_for",
    "normalize",
]

#: What a voice note says until postroom's worker transcribes it (engine.enrich).
VOICE_PLACEHOLDER = "[Voice message]"

_GROUP_TYPES = frozenset({ChatType.GROUP, ChatType.SUPERGROUP})


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is, from ``getMe``."""

    id: int
    username: str

    def is_us(self, name: str) -> bool:
        return bool(self.username) and name.lower() == self.username.lower()


def chat_jid_for(chat: Chat) -> str | None:
    """The canonical chat JID, or ``None`` for a chat type postroom does not serve."""
    if chat.type == ChatType.PRIVATE:
        return f"telegram:user/{chat.id}"
    if chat.type in _GROUP_TYPES:
        return f"telegram:group/{abs(chat.id)}"
    return None


def chat_id_for(chat_jid: str) -> int:
    """The Bot API ``chat_id`` of a canonical chat JID; ``ValueError`` for anything else."""
    platform, _, room = chat_jid.partition(":")
    kind, _, number = room.partition("/")
    if platform != "telegram" or not number.isdigit() or kind not in ("user", "group"):
        raise ValueError(f"{chat_jid!r} is not a Telegram chat (telegram:user/<id> or group/<id>)")
    return int(number) if kind == "user" else -int(number)


def normalize(message: Message, me: BotIdentity) -> InboundMessage | None:
    """The message as ingest takes it (attachments not fetched yet), or ``None`` when it is not
    something to route: a service message, a channel post, a message without a sender."""
    chat_jid = chat_jid_for(message.chat)
    user = message.from_user
    if chat_jid is None or user is None:
        return None
    content = _content(message)
    if content is None:
        return None
    addressed = _addressed_command(message, me)
    if addressed is not None:
        # "/new@postroom_bot" is "/new" for this bot; the router's trigger does not know the
        # platform username, so the addressee is taken off here (the entity proves it is us).
        content = addressed
    replied = _replied_to(message)
    sender_chat = message.sender_chat
    sender_name = user.full_name or user.username or str(user.id)
    if sender_chat is not None and sender_chat.title:
        sender_name = sender_chat.title  # an anonymous admin or a linked channel
    topic = str(message.message_thread_id) if message.is_topic_message else ""
    details: dict[str, object] = {"chat_type": str(message.chat.type)}
    if message.chat.title:
        details["chat_title"] = message.chat.title
    if user.username:
        details["username"] = user.username
    if addressed is not None:
        details["addressed_command"] = True
    return InboundMessage(
        id=str(message.message_id),
        chat_jid=chat_jid,
        sender=f"telegram:user/{user.id}",
        content=content,
        timestamp=_aware(message.date),
        sender_name=sender_name,
        reply_to=str(replied.message_id) if replied is not None else None,
        topic=topic,
        mentioned=addressed is not None or _mentions(message, me, replied),
        is_dm=message.chat.type == ChatType.PRIVATE,
        is_from_me=user.id == me.id,
        metadata={"telegram": details},
    )


def _content(message: Message) -> str | None:
    if message.voice is not None or message.audio is not None:
        return VOICE_PLACEHOLDER
    text = message.text or message.caption
    if text:
        return text
    if message.photo:
        return "[Image]"
    if message.sticker is not None:
        emoji = message.sticker.emoji
        return f"[Sticker {emoji}]" if emoji else "[Sticker]"
    if message.document is not None:
        return f"[File: {message.document.file_name or 'unnamed'}]"
    if message.video is not None or message.animation is not None:
        return "[Video]"
    if message.video_note is not None:
        return "[Video message]"
    if message.location is not None:
        return f"[Location: {message.location.latitude}, {message.location.longitude}]"
    if message.contact is not None:
        return f"[Contact: {message.contact.first_name} {message.contact.phone_number}]"
    if message.poll is not None:
        return f"[Poll: {message.poll.question}]"
    return None


def _replied_to(message: Message) -> Message | None:
    """The message this one answers. In a forum topic Telegram sets ``reply_to_message`` to the
    topic's creation message on every message that is not a reply: that is not a reply."""
    replied = message.reply_to_message
    if replied is None:
        return None
    if message.is_topic_message and (
        replied.forum_topic_created is not None or replied.message_id == message.message_thread_id
    ):
        return None
    return replied


def _addressed_command(message: Message, me: BotIdentity) -> str | None:
    """``/cmd@<us> rest`` as ``/cmd rest`` when the message opens with a command for this bot."""
    if not message.text or not message.entities:
        return None
    for entity, text in message.parse_entities([MessageEntityType.BOT_COMMAND]).items():
        if entity.offset != 0:
            continue
        command, _, addressee = text.partition("@")
        if addressee and me.is_us(addressee):
            return command + message.text[len(text) :]
    return None


def _mentions(message: Message, me: BotIdentity, replied: Message | None) -> bool:
    if replied is not None and replied.from_user is not None and replied.from_user.id == me.id:
        return True
    found: dict[MessageEntity, str] = {}
    if message.text:
        found = message.parse_entities()
    elif message.caption:
        found = message.parse_caption_entities()
    for entity, text in found.items():
        if entity.type == MessageEntityType.MENTION and me.is_us(text.removeprefix("@")):
            return True
        if (
            entity.type == MessageEntityType.TEXT_MENTION
            and entity.user is not None
            and entity.user.id == me.id
        ):
            return True
        if entity.type == MessageEntityType.BOT_COMMAND and me.is_us(text.partition("@")[2]):
            return True
    return False


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
