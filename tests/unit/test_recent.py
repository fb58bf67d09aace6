"""The channel adapters' bounded caches forget their least recently used entries."""

from __future__ import annotations

from postroom.channels.recent import Recent


def test_the_least_recently_used_entry_goes_first() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.put("a", 1)
    recent.put("b", 2)
    assert recent.get("a") == 1  # "a" is now the most recently used
    recent.put("c", 3)
    assert (recent.get("a"), recent.get("b"), recent.get("c")) == (1, None, 3)
    assert len(recent) == 2


def test_put_replaces_and_pop_forgets() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.put("a", 1)
    recent.put("a", 2)
    assert recent.get("a") == 2 and len(recent) == 1
    recent.pop("a")
    recent.pop("missing")
    assert recent.get("a") is None and len(recent) == 0
