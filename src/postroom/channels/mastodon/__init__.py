"""Mastodon: mentions and direct messages polled in, replies posted out (Mastodon.py).

Chats and senders are ``mastodon:account/<id>``, the account's ``id`` on the instance (ROUTING
§1). ``[channels.mastodon]``: ``access_token``, ``base_url`` (the instance), ``poll_interval_s``,
``catch_up_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from postroom.channels.mastodon.channel import MastodonChannel, MastodonUnavailable
from postroom.channels.mastodon.config import MastodonConfig, parse_config

__all__ = ["MastodonChannel", "MastodonConfig", "MastodonUnavailable", "build"]


def build(section: Mapping[str, Any]) -> MastodonChannel:
    """The Mastodon adapter for ``[channels.mastodon]``; a ConfigError names a bad key."""
    return MastodonChannel(parse_config(section))
