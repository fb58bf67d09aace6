"""The nodes page's rows (PIPELINE §9): the listing the CLI and the API give, with each
heartbeat's age, the node serving the page marked, and what this process knows of itself."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

__all__ = ["age_text", "node_rows"]


def age_text(seconds: float) -> str:
    """How long ago, as the page says it: ``4 s ago``, ``3 min ago``, ``2 h ago``."""
    whole = max(int(seconds), 0)
    if whole < 120:
        return f"{whole} s ago"
    if whole < 7200:
        return f"{whole // 60} min ago"
    return f"{whole // 3600} h ago"


def node_rows(
    nodes: Iterable[dict[str, Any]],
    *,
    me: str,
    now: datetime,
    version: str,
    running: Sequence[str],
) -> list[dict[str, Any]]:
    """Each node as the table shows it. The database keeps no version or adapter list for
    another node, so this process fills in only its own: the adapters it runs when the
    listing names none for it."""
    rows = []
    for node in nodes:
        mine = node["id"] == me
        beat = datetime.fromisoformat(node["heartbeat_at"])
        adapters = list(node.get("adapters") or ())
        rows.append(
            node
            | {
                "me": mine,
                "age": age_text((now - beat).total_seconds()),
                "version": version if mine else None,
                "adapters": adapters or (list(running) if mine else []),
            }
        )
    # The node serving the page first, then the rest in the listing's order.
    return sorted(rows, key=lambda row: not row["me"])
