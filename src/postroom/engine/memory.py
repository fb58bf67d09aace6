"""A folder's memory (PIPELINE §6): facts and state, saved by tags and tools, injected into the
system prompt — sticky facts always, the others by relevance to the turn's new messages.

A fact is not stored twice: one whose words match an existing fact's words closely enough
(Jaccard similarity of the word sets ≥ 0.85) counts as already known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from postroom.store.protocol import Store, StoreTx
from postroom.store.records import MemoryFact

__all__ = ["MemoryService", "PromptMemory", "normalize_fact"]

STICKY = "sticky"
_WORD = re.compile(r"\w+", re.UNICODE)
SIMILAR = 0.85
MAX_FACT_CHARS = 2000


def normalize_fact(fact: str) -> str:
    """Lowercased words, sorted and unique: the shape near-duplicates share."""
    return " ".join(sorted(set(_WORD.findall(fact.lower()))))


def _similar(a: str, b: str) -> bool:
    left, right = set(a.split()), set(b.split())
    if not left or not right:
        return a == b
    return len(left & right) / len(left | right) >= SIMILAR


@dataclass(frozen=True, slots=True)
class PromptMemory:
    """What the system prompt gets: facts (sticky first) and state entries."""

    facts: tuple[str, ...] = ()
    state: tuple[str, ...] = ()


class MemoryService:
    def __init__(self, *, store: Store, relevant: int = 8, sticky: int = 30) -> None:
        self._store = store
        self._relevant = relevant
        self._sticky = sticky

    async def remember(
        self,
        tx: StoreTx,
        folder: str,
        category: str,
        fact: str,
        *,
        now: datetime,
        run_id: int | None = None,
    ) -> bool:
        """Store a fact unless the folder already knows it; True when stored."""
        fact = fact.strip()[:MAX_FACT_CHARS]
        if not fact:
            return False
        normalized = normalize_fact(fact)
        if any(_similar(normalized, known) for known in await tx.normalized_facts(folder)):
            return False
        await tx.insert_fact(folder, category, fact, normalized=normalized, now=now, run_id=run_id)
        return True

    async def for_prompt(self, tx: StoreTx, folder: str, query: str) -> PromptMemory:
        sticky = await tx.list_facts(folder, category=STICKY, limit=self._sticky)
        relevant = await tx.search_facts(folder, query, limit=self._relevant) if query else []
        seen = {fact.id for fact in sticky}
        facts = [f.fact for f in reversed(sticky)]
        facts += [f.fact for f in relevant if f.id not in seen]
        state = await tx.get_state(folder)
        return PromptMemory(tuple(facts), tuple(f"{k}: {v}" for k, v in state.items()))

    async def search(self, folder: str, query: str, *, limit: int = 10) -> list[MemoryFact]:
        async with self._store.read() as tx:
            found = await tx.search_facts(folder, query, limit=limit)
            if not found:
                found = await tx.list_facts(folder, limit=limit)
        return found
