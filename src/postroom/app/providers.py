"""Building the configured model providers (PIPELINE §4), each behind its account pool.

``[providers.<name>]`` sections name them; ``kind`` says which API a custom name speaks (an
OpenAI-compatible server: ``kind = "openai"`` with its ``base_url``). Keys come from the file,
``POSTROOM_PROVIDERS__<NAME>__API_KEYS`` or the vendor variables (``ANTHROPIC_API_KEY``...).
Adapters and their SDKs are imported only for the providers that are configured, so an install
that uses one provider does not pay for loading the others at start-up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from postroom.config import Config, ProviderConfig
from postroom.core.errors import ConfigError
from postroom.llm.accounts import AccountPool
from postroom.llm.base import Provider
from postroom.llm.echo import EchoProvider

__all__ = ["KINDS", "account_label", "build_providers", "close_providers"]

KINDS = ("anthropic", "openai", "gemini", "ollama", "local", "echo")
#: Providers that need no key (one account, the local one).
KEYLESS = frozenset({"ollama", "local", "echo"})


def account_label(name: str, index: int, key: str) -> str:
    """A name for an account that says which key without revealing it."""
    tail = key[-4:] if len(key) >= 12 else ""
    return f"{name}#{index + 1}" + (f" (…{tail})" if tail else "")


def _factory(kind: str) -> Callable[..., Provider]:
    # Heavy SDKs: imported only when a provider of that kind is configured.
    if kind == "anthropic":
        from postroom.llm.anthropic import AnthropicProvider

        return AnthropicProvider
    if kind == "openai":
        from postroom.llm.openai import OpenAIProvider

        return OpenAIProvider
    if kind == "gemini":
        from postroom.llm.gemini import GeminiProvider

        return GeminiProvider
    if kind == "ollama":
        from postroom.llm.ollama import OllamaProvider

        return OllamaProvider
    if kind == "local":
        from postroom.llm.local import LocalProvider

        return LocalProvider
    raise ConfigError(f"Unknown provider kind {kind!r}; the kinds are {', '.join(KINDS)}.")


def _kwargs(name: str, kind: str, section: ProviderConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"base_url": section.base_url, "stream": section.stream}
    if section.model:
        kwargs["default_model"] = section.model
    kwargs["timeout_s"] = section.timeout_s
    if kind == "openai" and name != "openai":
        kwargs["name"] = name
    return kwargs


def build_providers(config: Config, *, clock: Callable[[], datetime]) -> dict[str, Provider]:
    """Every configured provider, by name; ``echo`` always exists."""
    echo = config.providers.get("echo")
    providers: dict[str, Provider] = {"echo": EchoProvider(delay_ms=echo.delay_ms if echo else 0)}
    for name, section in config.providers.items():
        kind = section.kind or name
        if kind == "echo":
            continue
        if kind not in KINDS:
            raise ConfigError(
                f"Provider {name!r} has no known kind; set kind to one of {', '.join(KINDS)}."
            )
        if kind not in KEYLESS and not section.api_keys:
            continue  # named but without keys: folders using it get a clear error per turn
        factory = _factory(kind)
        kwargs = _kwargs(name, kind, section)
        if kind in KEYLESS:
            accounts = [(name, factory(account=name, **kwargs))]
        else:
            accounts = []
            for index, key in enumerate(section.api_keys):
                label = account_label(name, index, key)
                accounts.append((label, factory(api_key=key, account=label, **kwargs)))
        providers[name] = AccountPool(name, accounts, clock=clock, max_rest_s=config.llm.max_rest_s)
    return providers


def account_pools(providers: Mapping[str, Provider]) -> dict[str, AccountPool]:
    return {name: p for name, p in providers.items() if isinstance(p, AccountPool)}


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Let go of every account's HTTP connections (SDK clients hold sockets until closed)."""
    for provider in providers.values():
        accounts = provider.accounts() if isinstance(provider, AccountPool) else [("", provider)]
        for _, account in accounts:
            close = getattr(account, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):  # closing is best-effort at shutdown
                    await close()
