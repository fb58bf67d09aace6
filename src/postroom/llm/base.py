"""The provider seam: one request and response shape for every model API (PIPELINE §4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from postroom.core.context import ContextMessage
from postroom.core.errors import PostroomError

__all__ = [
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "RateLimited",
]


class ProviderError(PostroomError):
    """A model call failed. ``retryable`` says whether trying the turn again later may help."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class RateLimited(ProviderError):
    """The provider refused for now (HTTP 429/529); ``retry_after`` seconds, when it said."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Exactly what a run sends: this is what the run record stores."""

    system: str
    messages: Sequence[ContextMessage]
    model: str | None = None
    tools: Sequence[Mapping[str, Any]] = ()

    def to_record(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "messages": [m.to_dict() for m in self.messages],
            "model": self.model,
            "tools": [dict(t) for t in self.tools],
        }


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What came back: ``text`` for the user (before tag processing), ``raw`` as received."""

    text: str
    raw: str
    model: str | None = None
    account: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    cost: float | None = None


class Provider(Protocol):
    """One model API. Adapters translate SDK errors into :class:`ProviderError`."""

    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
