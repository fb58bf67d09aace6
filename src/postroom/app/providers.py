"""Building the configured model providers (PIPELINE §4), each behind its account pool.

``[providers.<name>]`` sections name them; ``kind`` says which API a custom name speaks (an
OpenAI-compatible server: ``kind = "openai"`` with its ``base_url``). Keys come from the file,
``POSTROOM_PROVIDERS__<NAME>__API_KEYS`` or the vendor variables (``ANTHROPIC_API_KEY``...).
Adapters and their SDKs are imported only for the providers that are configured, so an install
that uses one provider does not pay for loading the others at start-up. A provider of
``kind = "cli"`` runs a command instead (:mod:`postroom.llm.cli`): each of its ``accounts`` — a
set of environment variables — is an account of the pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from postroom.config import Config, ProviderConfig
from postroom.core.errors import ConfigError, PostroomError
from postroom.core.folder_settings import BUILTIN_PROVIDERS
from postroom.llm.accounts import AccountPool
from postroom.llm.base import Provider
from postroom.llm.cli import DEFAULT_CLI_COMMAND, CliProvider
from postroom.llm.echo import EchoProvider

log = structlog.get_logger(__name__)

__all__ = [
    "KEYLESS",
    "KINDS",
    "account_label",
    "build_provider",
    "build_providers",
    "close_providers",
]

KINDS = (*BUILTIN_PROVIDERS, "cli")
#: Where command-line runners keep a working directory per conversation, in the data directory.
SESSIONS_DIR = "sessions"
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


def build_providers(
    config: Config,
    *,
    clock: Callable[[], datetime],
    used: Collection[str] = (),
    data_dir: Path | None = None,
) -> dict[str, Provider]:
    """Every configured provider, by name; ``echo`` always exists. A provider that needs no
    key (``local``, ``ollama``) is also built without a section when the defaults or a folder
    (*used*) name it. Command-line runners work in ``DIR/sessions`` of *data_dir*."""
    echo = config.providers.get("echo")
    providers: dict[str, Provider] = {"echo": EchoProvider(delay_ms=echo.delay_ms if echo else 0)}
    sessions_dir = (data_dir or Path()) / SESSIONS_DIR
    for name, section in config.providers.items():
        provider = build_provider(
            name, section, clock=clock, max_rest_s=config.llm.max_rest_s, sessions_dir=sessions_dir
        )
        if provider is not None:
            providers[name] = provider
    for name in sorted(({config.defaults.provider, *used} & KEYLESS) - set(config.providers)):
        try:
            implied = build_provider(
                name, ProviderConfig(), clock=clock, max_rest_s=config.llm.max_rest_s
            )
        except PostroomError as exc:
            # Not asked for by a section: the server still starts; the folders that use it get
            # the error per turn, and postroom doctor says how to install it.
            log.warning("provider.unavailable", provider=name, error=str(exc))
            continue
        if implied is not None:
            providers[name] = implied
    return providers


def build_provider(
    name: str,
    section: ProviderConfig,
    *,
    clock: Callable[[], datetime],
    max_rest_s: float,
    sessions_dir: Path = Path(SESSIONS_DIR),
) -> Provider | None:
    """One ``[providers.<name>]`` behind its account pool; ``None`` for ``echo`` (built in) and
    for a provider named without keys (folders using it get a clear error per turn). No account
    rests longer than *max_rest_s* (``llm.max_rest``) after a rate limit."""
    kind = section.kind or name
    if kind == "echo":
        return None
    if kind == "cli":
        return _cli_pool(name, section, clock=clock, max_rest_s=max_rest_s, sessions=sessions_dir)
    if kind not in KINDS:
        raise ConfigError(
            f"Provider {name!r} has no known kind; set kind to one of {', '.join(KINDS)}."
        )
    if kind not in KEYLESS and not section.api_keys:
        return None
    factory = _factory(kind)
    kwargs = _kwargs(name, kind, section)
    if kind in KEYLESS:
        accounts = [(name, factory(account=name, **kwargs))]
    else:
        accounts = []
        for index, key in enumerate(section.api_keys):
            label = account_label(name, index, key)
            accounts.append((label, factory(api_key=key, account=label, **kwargs)))
    return AccountPool(name, accounts, clock=clock, max_rest_s=max_rest_s)


def _cli_pool(
    name: str,
    section: ProviderConfig,
    *,
    clock: Callable[[], datetime],
    max_rest_s: float,
    sessions: Path,
) -> AccountPool:
    """A command-line runner: one account per set of variables in ``accounts`` (or one)."""
    account_envs = section.accounts or ({},)
    accounts: list[tuple[str, Provider]] = []
    for index, variables in enumerate(account_envs):
        label = f"{name}#{index + 1}" if section.accounts else name
        runner = CliProvider(
            name=name,
            command=section.command or DEFAULT_CLI_COMMAND,
            sessions_dir=sessions,
            account=label,
            env={**section.env, **variables},
            default_model=section.model,
            rate_limit_pattern=section.rate_limit_pattern,
            input_mode=section.input or "conversation",
        )
        accounts.append((label, runner))
    return AccountPool(name, accounts, clock=clock, max_rest_s=max_rest_s)


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
