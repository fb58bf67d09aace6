"""``[channels.discord]``: what the adapter needs, checked once at start-up (INTERFACES §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from postroom.core.durations import parse_duration
from postroom.core.errors import ConfigError

__all__ = ["DiscordConfig", "parse_config"]


class DiscordConfig(BaseModel):
    """The keys of ``[channels.discord]`` (``enabled`` is read by the app, not here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The bot token from the Discord developer portal (Bot → Reset Token).
    token: str = Field(min_length=1)
    #: The REST API base, version included (``https://discord.com/api/v10`` when unset): for
    #: tests and self-hosted REST proxies.
    base_url: str | None = None
    #: The gateway WebSocket (``wss://gateway.discord.gg/`` when unset).
    gateway_url: str | None = None
    #: Ask for the privileged Message Content intent (enable it in the developer portal too);
    #: without it Discord sends the text of guild messages only when they mention the bot.
    message_content: bool = True
    #: Skip messages written by other bots and webhooks (the bot's own are always skipped).
    ignore_bots: bool = True
    #: The longest one send may take, discord.py's own waiting on short rate limits included.
    send_timeout_s: float = Field(60.0, alias="send_timeout", gt=0)

    @field_validator("token")
    @classmethod
    def _bare_token(cls, value: str) -> str:
        token = value.strip()
        # discord.py adds the "Bot " scheme itself; a pasted "Bot xyz" would be sent twice.
        if token.lower().startswith("bot "):
            token = token[4:].strip()
        if not token or any(c.isspace() for c in token):
            raise ValueError("the bot token is one word without spaces")
        return token

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else _url(value, ("http", "https")).rstrip("/")

    @field_validator("gateway_url")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        return None if value is None else _url(value, ("ws", "wss"))

    @field_validator("send_timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("a send needs some time: write e.g. 60s")
        return seconds


def _url(value: str, schemes: tuple[str, ...]) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"expected a {' or '.join(schemes)} URL such as {schemes[0]}://host:port")
    return value.strip()


def parse_config(section: Mapping[str, Any]) -> DiscordConfig:
    """Validate ``[channels.discord]``; a bad key or value is a ConfigError naming the key."""
    try:
        return DiscordConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "discord"
        if error["type"] == "missing":
            raise ConfigError(
                f"{key} is required (the bot token from the Discord developer portal)."
            ) from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(
                f"Unknown key {key!r}; the keys are token, base_url, gateway_url, "
                "message_content, ignore_bots and send_timeout."
            ) from exc
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{key}: {reason}.") from exc
