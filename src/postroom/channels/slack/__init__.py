"""Slack: Events API or Socket Mode in, ``chat.postMessage`` out (slack-sdk).

``[channels.slack]``: ``bot_token`` (xoxb-…, required), ``signing_secret`` (Events API) or
``app_token`` (xapp-…, Socket Mode), ``mode``, ``base_url``, ``reply_in_thread``. Registered
slash commands are POSTed to ``/channels/slack/commands`` (Events API) or arrive over the socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from postroom.channels.slack.channel import COMMANDS_PATH, EVENTS_PATH, SlackChannel
from postroom.channels.slack.config import SlackConfig, parse_config

__all__ = ["COMMANDS_PATH", "EVENTS_PATH", "SlackChannel", "SlackConfig", "build"]


def build(section: Mapping[str, Any]) -> SlackChannel:
    """The Slack adapter for ``[channels.slack]``; a ConfigError names a bad key."""
    return SlackChannel(parse_config(section))
