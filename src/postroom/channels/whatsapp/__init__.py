"""WhatsApp: Cloud API webhooks in, Graph's ``/{phone_number_id}/messages`` out (httpx).

``[channels.whatsapp]``: ``access_token``, ``phone_number_id``, ``app_secret`` (webhook
signatures), ``verify_token`` (the subscription handshake), ``api_version``, ``base_url``,
``webhook_path``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from postroom.channels.whatsapp.channel import WhatsAppChannel
from postroom.channels.whatsapp.config import WEBHOOK_PATH, WhatsAppConfig, parse_config

__all__ = ["WEBHOOK_PATH", "WhatsAppChannel", "WhatsAppConfig", "build"]


def build(section: Mapping[str, Any]) -> WhatsAppChannel:
    """The WhatsApp adapter for ``[channels.whatsapp]``; a ConfigError names a bad key."""
    return WhatsAppChannel(parse_config(section))
