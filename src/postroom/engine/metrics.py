"""The counting seam: engine components report what happened through :class:`Metrics`; the
server plugs in Prometheus (:mod:`postroom.app.metrics`), everything else a no-op."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Metrics", "NullMetrics"]


class Metrics(Protocol):
    def message_in(self, action: str, layer: str) -> None: ...

    def delivery(self, status: str) -> None: ...

    def turn(self, outcome: str, duration_s: float | None) -> None: ...


class NullMetrics:
    def message_in(self, action: str, layer: str) -> None:
        return None

    def delivery(self, status: str) -> None:
        return None

    def turn(self, outcome: str, duration_s: float | None) -> None:
        return None
