"""Ending an engagement by hand (ROUTING §4: the MCP tool ``disengage``).

An engagement otherwise ends when its TTL runs out, on ``/new``, or when the chat's sticky
group is set or cleared (:mod:`postroom.engine.commands`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from postroom.core.folders import is_within
from postroom.core.jid import parse_jid
from postroom.core.steering import normalize_topic
from postroom.engine.clock import Clock
from postroom.store.protocol import Store

__all__ = ["Disengaged", "disengage"]


@dataclass(frozen=True, slots=True)
class Disengaged:
    """The live engagements of a chat that were ended, as ``(topic, folder)``."""

    chat_jid: str
    ended: Sequence[tuple[str, str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "chat_jid": self.chat_jid,
            "ended": [{"topic": topic, "folder": folder} for topic, folder in self.ended],
        }


async def disengage(
    store: Store,
    chat_jid: str,
    *,
    topic: str | None = None,
    clock: Clock,
    within: str | None = None,
) -> Disengaged:
    """End the engagement of *chat_jid* in *topic* (``""``: the chat as a whole), or in every
    topic when *topic* is ``None``. *within* a folder's tree, only engagements to folders
    under it end. The next message is routed by the table (or the sticky group) again."""
    parse_jid(chat_jid, what="chat_jid")
    wanted = None if topic is None else normalize_topic(topic)
    now = clock()
    ended: list[tuple[str, str]] = []
    async with store.write() as tx:
        state = await tx.chat_state(chat_jid)
        for name, engagement in sorted(state.engagements.items()):
            if wanted is not None and name != wanted:
                continue
            if within is not None and not is_within(engagement.folder, within):
                continue
            await tx.end_engagement(chat_jid, name)
            if engagement.until > now:
                ended.append((name, engagement.folder))
    return Disengaged(chat_jid, tuple(ended))
