"""From a discord.py message to what postroom stores: addresses, mentions, readable text.

Addresses are ROUTING §1's: ``discord:guild/<guild_id>/channel/<channel_id>`` for a guild
channel, ``discord:dm/<channel_id>`` for a direct message, ``discord:user/<id>`` for a sender.
A message in a thread belongs to the thread's parent channel; the thread id is its native
topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postroom.channels.discord._sdk import discord

__all__ = [
    "Place",
    "channel_of",
    "is_snowflake",
    "mentions_bot",
    "readable_content",
    "reply_target",
    "sender_jid",
]

# Discord ids are snowflakes: 17 to 20 digits today. Requiring 15 keeps a topic someone typed
# (``#2024``) from being taken for a thread.
_SNOWFLAKE = re.compile(r"[1-9][0-9]{14,20}")
_GUILD_CHAT = re.compile(r"guild/([0-9]+)/channel/([0-9]+)")
_DM_CHAT = re.compile(r"dm/([0-9]+)")
_MARKUP = re.compile(r"<@!?([0-9]+)>|<@&([0-9]+)>|<#([0-9]+)>")


def is_snowflake(text: str | None) -> bool:
    """Whether *text* looks like a Discord id (a message, channel or thread)."""
    return bool(text) and _SNOWFLAKE.fullmatch(text or "") is not None


def sender_jid(user_id: int) -> str:
    return f"discord:user/{user_id}"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message was written."""

    guild_id: int | None
    #: The chat's channel: the parent channel for a message in a thread.
    channel_id: int
    thread_id: int | None = None

    @property
    def chat_jid(self) -> str:
        if self.guild_id is None:
            return f"discord:dm/{self.channel_id}"
        return f"discord:guild/{self.guild_id}/channel/{self.channel_id}"

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None

    @property
    def written_in(self) -> int:
        """The channel the message itself is in (the thread, when there is one)."""
        return self.thread_id or self.channel_id


def channel_of(chat_jid: str) -> int:
    """The Discord channel id of a chat JID; ``ValueError`` for anything that is not one."""
    platform, _, room = chat_jid.partition(":")
    found = _GUILD_CHAT.fullmatch(room) or _DM_CHAT.fullmatch(room)
    if platform != "discord" or found is None:
        raise ValueError(f"{chat_jid!r} is not a Discord chat address")
    return int(found.groups()[-1])


def mentions_bot(message: discord.Message, bot_id: int) -> bool:
    """Discord says the bot was called: a user mention of it (``<@id>``, ``<@!id>``), a mention
    of its managed role, or a reply to one of its messages."""
    if bot_id in message.raw_mentions or any(user.id == bot_id for user in message.mentions):
        return True
    if any(role.tags is not None and role.tags.bot_id == bot_id for role in message.role_mentions):
        return True
    return message.type is discord.MessageType.reply and _replied_author(message) == bot_id


def reply_target(message: discord.Message) -> str | None:
    """The id of the message this one replies to (forwards and pins are not replies)."""
    if message.type is not discord.MessageType.reply or message.reference is None:
        return None
    found = message.reference.message_id
    return str(found) if found is not None else None


def _replied_author(message: discord.Message) -> int | None:
    resolved = message.reference.resolved if message.reference is not None else None
    return resolved.author.id if isinstance(resolved, discord.Message) else None


def readable_content(message: discord.Message, bot_id: int) -> str:
    """The text as people read it: mention markup becomes ``@name``/``#channel``.

    A mention of the bot that opens the message is dropped (``mentioned`` carries it), so
    ``@bot /new`` is the command ``/new`` and ``@bot @research hi`` reaches the inline prefix.
    """
    text = message.content
    lead = re.match(rf"\s*<@!?{bot_id}>[\s,:]*", text)
    if lead is not None and text[lead.end() :].strip():
        text = text[lead.end() :]
    users = {user.id: user.display_name for user in message.mentions}
    roles = {role.id: role.name for role in message.role_mentions}
    channels = {channel.id: channel.name for channel in message.channel_mentions}

    def readable(found: re.Match[str]) -> str:
        user, role, channel = found.groups()
        if user is not None and int(user) in users:
            return f"@{users[int(user)]}"
        if role is not None and int(role) in roles:
            return f"@{roles[int(role)]}"
        if channel is not None and int(channel) in channels:
            return f"#{channels[int(channel)]}"
        return found.group(0)

    return _MARKUP.sub(readable, text)
