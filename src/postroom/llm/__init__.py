"""Model providers behind one :class:`Provider` protocol."""

from postroom.llm.base import (
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderError,
    RateLimited,
    TextSink,
    ToolSpec,
)
from postroom.llm.echo import EchoProvider

__all__ = [
    "EchoProvider",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "RateLimited",
    "TextSink",
    "ToolSpec",
]
