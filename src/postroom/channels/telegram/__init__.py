"""Telegram: a bot account through the Bot API (python-telegram-bot), by long polling or
webhook. Chats ``telegram:user/<id>`` and ``telegram:group/<id>`` (ROUTING §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from postroom.channels.telegram.channel import WEBHOOK_PATH, TelegramChannel, TelegramUnavailable
from postroom.channels.telegram.config import TelegramConfig, parse_config
from postroom.channels.telegram.inbound import BotIdentity, chat_id_for, chat_jid_for, normalize

__all__ = [
    "WEBHOOK_PATH",
    "BotIdentity",
    "TelegramChannel",
    "TelegramConfig",
    "TelegramUnavailable",
    "build",
    "chat_id_for",
    "chat_jid_for",
    "normalize",
]


def build(section: Mapping[str, Any]) -> TelegramChannel:
    """The adapter for ``[channels.telegram]`` (``enabled`` already taken off)."""
    return TelegramChannel(parse_config(section))
