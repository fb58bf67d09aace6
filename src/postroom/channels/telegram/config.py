"""``[channels.telegram]``: the bot token, where the Bot API lives, and how updates arrive."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from postroom.core.errors import ConfigError

__all__ = ["DEFAULT_BASE_URL", "TelegramConfig", "parse_config"]

DEFAULT_BASE_URL = "https://api.telegram.org"


class TelegramConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: From @BotFather: ``<bot id>:<secret>``.
    token: str = Field(pattern=r"^\d+:[A-Za-z0-9_-]+$")
    #: The Bot API server's root; the SDK adds ``/bot<token>`` and ``/file/bot<token>``.
    base_url: str = DEFAULT_BASE_URL
    mode: Literal["polling", "webhook"] = "polling"
    #: Telegram sends it back in ``X-Telegram-Bot-Api-Secret-Token`` (its own alphabet).
    webhook_secret: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,256}$")
    #: Public URL of ``/channels/telegram/webhook``: when set, ``setWebhook`` is called at start.
    webhook_url: str | None = None
    allowed_updates: tuple[str, ...] = ("message",)
    #: Long-polling wait in seconds (Telegram holds ``getUpdates`` open this long when idle).
    poll_timeout: int = Field(30, ge=0, le=300)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("webhook_url")
    @classmethod
    def _https_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("must be an https:// URL (Telegram only calls HTTPS webhooks)")
        return value


def parse_config(section: Mapping[str, Any]) -> TelegramConfig:
    """Validate ``[channels.telegram]``; :class:`ConfigError` names the offending key."""
    try:
        config = TelegramConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required (the bot token from @BotFather).") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"Unknown key {key!r}.") from exc
        if key == "token":
            raise ConfigError(
                "token must look like 123456:ABC-DEF… (the token @BotFather gave you)."
            ) from exc
        if key == "webhook_secret":
            raise ConfigError(
                "webhook_secret must be 1 to 256 characters of A-Z, a-z, 0-9, _ and -."
            ) from exc
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{key}: {message}.") from exc
    if config.mode == "webhook" and not config.webhook_secret:
        raise ConfigError(
            'webhook_secret is required when mode = "webhook" (every update is checked against it).'
        )
    return config
