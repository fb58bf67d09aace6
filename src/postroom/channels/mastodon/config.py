"""``[channels.mastodon]``: validated once, when the gateway builds the adapter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from postroom.core.errors import ConfigError

__all__ = ["MastodonConfig", "parse_config"]

_URL = re.compile(r"https?://[^\s/]+(/\S*)?")


class MastodonConfig(BaseModel):
    """The keys of ``[channels.mastodon]`` (``enabled`` is read by the gateway)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The bot account's access token (scopes ``read:accounts read:notifications
    #: read:statuses write:statuses``).
    access_token: str = Field(min_length=1)
    #: The instance the bot account lives on, e.g. ``https://mastodon.social``.
    base_url: str
    #: Seconds between two looks at the notifications.
    poll_interval_s: float = Field(15.0, gt=0, le=3600)
    #: At start-up, mentions younger than this many seconds are answered (those that arrived
    #: while postroom was down); older ones are history, not new input.
    catch_up_s: float = Field(600.0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> MastodonConfig:
        if not _URL.fullmatch(self.base_url):
            raise ValueError("base_url must be an http:// or https:// URL")
        return self

    @property
    def api_base_url(self) -> str:
        return self.base_url.rstrip("/")


def parse_config(section: Mapping[str, Any]) -> MastodonConfig:
    """The section as a :class:`MastodonConfig`; a :class:`ConfigError` naming the key if not."""
    try:
        return MastodonConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            what = "the bot account's token" if key == "access_token" else "the instance's URL"
            raise ConfigError(f"{key} is required ({what}).") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"Unknown key {key!r} in [channels.mastodon].") from exc
        message = str(error["msg"]).removeprefix("Value error, ")
        if not key:  # a model-level check names its key itself
            raise ConfigError(f"{message}.") from exc
        raise ConfigError(f"{key}: {message}.") from exc
