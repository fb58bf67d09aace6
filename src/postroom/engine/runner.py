"""The seam between a turn and the model: an :class:`AgentRunner` takes the built request and the
folder's settings and returns the model's answer. The default one picks the folder's provider;
the tool loop of later releases lives behind the same interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from postroom.core.folders import FolderSettings
from postroom.llm.base import ModelRequest, ModelResponse, Provider, ProviderError

__all__ = ["AgentRunner", "ProviderRunner"]


class AgentRunner(Protocol):
    async def run(self, request: ModelRequest, *, settings: FolderSettings) -> ModelResponse: ...


class ProviderRunner:
    """Sends the request to the provider the folder is configured for."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._providers = dict(providers)

    def provider_for(self, settings: FolderSettings) -> Provider:
        provider = self._providers.get(settings.provider)
        if provider is None:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ProviderError(
                f"Folder {settings.path} uses provider {settings.provider!r}, which is not "
                f"configured (configured: {known}).",
                retryable=False,
            )
        return provider

    async def run(self, request: ModelRequest, *, settings: FolderSettings) -> ModelResponse:
        return await self.provider_for(settings).complete(request)
