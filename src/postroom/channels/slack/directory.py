"""Who and what the ids in Slack's payloads are: a channel's kind and a person's name, asked of
the Web API once (within a short deadline, so a slow Slack never holds up ingest) and
remembered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from postroom.channels.recent import Recent
from postroom.channels.slack.events import guess_kind, kind_of_channel

__all__ = ["Directory"]

log = structlog.get_logger(__name__)

LOOKUP_TIMEOUT_S = 1.5


class Directory:
    """Lookups with a bounded memory, over the channel's Web API client."""

    def __init__(self, web: Callable[[], AsyncWebClient]) -> None:
        self._web = web
        self._kinds: Recent[str, str] = Recent(4096)
        self._names: Recent[str, str] = Recent(4096)

    async def kind(self, channel_id: str, channel_type: Any) -> str:
        """channel, group or dm: from the event when it says, else asked once and cached."""
        kind = kind_of_channel(str(channel_type) if channel_type else None, channel_id)
        if kind is not None:
            self._kinds.put(channel_id, kind)
            return kind
        cached = self._kinds.get(channel_id)
        if cached is not None:
            return cached
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                response = await self._web().conversations_info(channel=channel_id)
            info = response.get("channel") or {}
            if info.get("is_im"):
                kind = "dm"
            elif info.get("is_mpim") or info.get("is_private") or info.get("is_group"):
                kind = "group"
            else:
                kind = "channel"
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("slack.channel_lookup_failed", channel=channel_id, error=str(exc))
            return guess_kind(channel_id)
        self._kinds.put(channel_id, kind)
        return kind

    async def name(self, user_id: str) -> str:
        cached = self._names.get(user_id)
        if cached is not None:
            return cached
        name = user_id
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                response = await self._web().users_info(user=user_id)
            user = response.get("user") or {}
            profile = user.get("profile") or {}
            name = str(
                profile.get("display_name")
                or profile.get("real_name")
                or user.get("real_name")
                or user.get("name")
                or user_id
            )
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            # Without users:read the id is the name; remembered so we do not ask again.
            log.debug("slack.user_lookup_failed", user=user_id, error=str(exc))
        self._names.put(user_id, name)
        return name
