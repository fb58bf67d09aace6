"""``[channels.matrix]``: validated once, when the gateway builds the adapter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from postroom.core.durations import parse_duration
from postroom.core.errors import ConfigError

__all__ = ["MatrixConfig", "parse_config"]

_MXID = re.compile(r"@[^:\s]+:\S+")
_URL = re.compile(r"https?://[^\s/]+(/\S*)?")

Duration = Annotated[float, BeforeValidator(parse_duration)]


class MatrixConfig(BaseModel):
    """The keys of ``[channels.matrix]`` (``enabled`` is read by the gateway)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    #: The client-server API base URL, e.g. ``https://matrix.example.org``.
    homeserver: str
    #: The bot's full Matrix id, ``@bot:example.org`` (required with ``password``).
    user_id: str | None = None
    password: str | None = None
    access_token: str | None = None
    #: Reuse one device across restarts (a password login makes a new device without it).
    device_id: str | None = None
    device_name: str = "postroom"
    #: Invites from these users are accepted (joined); ``"*"`` accepts anyone. Empty: none.
    allowed_inviters: tuple[str, ...] = ()
    #: How long one sync request waits on the server for new events.
    sync_timeout_s: Duration = Field(30.0, alias="sync_timeout", ge=0, le=300)

    @model_validator(mode="after")
    def _check(self) -> MatrixConfig:
        if not _URL.fullmatch(self.homeserver):
            raise ValueError("homeserver must be an http:// or https:// URL")
        if self.user_id is not None and not _MXID.fullmatch(self.user_id):
            raise ValueError(f"user_id {self.user_id!r} is not a Matrix id like @bot:example.org")
        if not self.password and not self.access_token:
            raise ValueError("set password (with user_id) or access_token")
        if self.password and self.access_token:
            raise ValueError("set either password or access_token, not both")
        if self.password and not self.user_id:
            raise ValueError("user_id is required to log in with a password")
        for inviter in self.allowed_inviters:
            if inviter != "*" and not _MXID.fullmatch(inviter):
                raise ValueError(
                    f"allowed_inviters: {inviter!r} is not a Matrix id like @alice:example.org"
                )
        return self

    @property
    def base_url(self) -> str:
        return self.homeserver.rstrip("/")

    def accepts_invite_from(self, inviter: str | None) -> bool:
        return "*" in self.allowed_inviters or (
            inviter is not None and inviter in self.allowed_inviters
        )


def parse_config(section: Mapping[str, Any]) -> MatrixConfig:
    """The section as a :class:`MatrixConfig`; a :class:`ConfigError` naming the key if not."""
    try:
        return MatrixConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required (the Matrix homeserver's URL).") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"Unknown key {key!r} in [channels.matrix].") from exc
        message = str(error["msg"]).removeprefix("Value error, ")
        where = f"{key}: " if key else ""
        raise ConfigError(f"{where}{message}.") from exc
