"""``[channels.slack]``: the keys, their checks, and which mode the adapter runs in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from postroom.core.errors import ConfigError

__all__ = ["SlackConfig", "parse_config"]

DEFAULT_BASE_URL = "https://slack.com/api/"


class SlackConfig(BaseModel):
    """The Slack app's credentials and how events reach postroom.

    ``mode`` defaults to ``socket`` when an app-level token is given (no public URL needed),
    else to ``events`` (Slack POSTs to ``/channels/slack/events``, signed with the signing
    secret).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bot_token: str = Field(min_length=6)
    app_token: str | None = None
    signing_secret: str | None = None
    mode: Literal["socket", "events"] | None = None
    base_url: str = DEFAULT_BASE_URL
    #: Answer a channel message in a thread under it (a DM is answered inline unless the
    #: person wrote in a thread).
    reply_in_thread: bool = True
    max_body_bytes: int = Field(1024 * 1024, ge=1024)

    @model_validator(mode="after")
    def _consistent(self) -> SlackConfig:
        if not self.bot_token.startswith("xoxb-"):
            raise ValueError("bot_token must be a bot token (xoxb-…)")
        if self.app_token is not None and not self.app_token.startswith("xapp-"):
            raise ValueError("app_token must be an app-level token (xapp-…)")
        if self.mode == "socket" and not self.app_token:
            raise ValueError('app_token is required for mode = "socket"')
        if self.mode == "events" and not self.signing_secret:
            raise ValueError('signing_secret is required for mode = "events"')
        if self.mode is None and not self.app_token and not self.signing_secret:
            raise ValueError("signing_secret (Events API) or app_token (Socket Mode) is required")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        return self

    @property
    def resolved_mode(self) -> Literal["socket", "events"]:
        if self.mode is not None:
            return self.mode
        return "socket" if self.app_token else "events"

    @property
    def api_url(self) -> str:
        """The Web API root with the trailing slash the SDK joins method names to."""
        return self.base_url if self.base_url.endswith("/") else self.base_url + "/"


def parse_config(section: Mapping[str, Any]) -> SlackConfig:
    """Validate ``[channels.slack]``; a :class:`ConfigError` names the key at fault."""
    try:
        return SlackConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required (the bot token, xoxb-…).") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"unknown key {key!r}.") from exc
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{key}: {message}." if key else f"{message}.") from exc
