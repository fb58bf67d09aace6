"""``[channels.email]``: the IMAP mailbox the bot reads and the SMTP server it answers through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from postroom.core.durations import parse_duration
from postroom.core.errors import ConfigError

__all__ = ["EmailConfig", "parse_config"]

Duration = Annotated[float, BeforeValidator(parse_duration)]


class EmailConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    imap_host: str = Field(min_length=1)
    imap_port: int = Field(993, ge=1, le=65535)
    imap_ssl: bool = True
    #: Wait with IMAP IDLE between polls when the server offers it (else sleep).
    imap_idle: bool = True
    smtp_host: str = Field(min_length=1)
    smtp_port: int = Field(587, ge=1, le=65535)
    #: STARTTLS on a plain connection; port 465 always speaks TLS from the first byte.
    smtp_starttls: bool = True
    username: str = Field(min_length=1)
    password: str = Field(min_length=1)
    #: The bot's own address (From of its answers); defaults to ``username`` when that is one.
    address: str = ""
    folder: str = Field("INBOX", min_length=1)
    poll_interval_s: Duration = Field(30.0, alias="poll_interval", gt=0)
    #: Addresses (``bob@example.org``) or domains (``example.org``) whose mail is trusted;
    #: empty trusts every sender.
    allowed_senders: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _address(self) -> EmailConfig:
        if self.address and "@" not in self.address:
            raise ValueError(f"address must be an e-mail address, not {self.address!r}")
        address = (self.address or (self.username if "@" in self.username else "")).strip()
        if "@" not in address:
            raise ValueError(
                "address is required for the email channel when username is not an e-mail "
                "address (the bot's own address)"
            )
        object.__setattr__(self, "address", address.lower())
        object.__setattr__(
            self,
            "allowed_senders",
            tuple(entry.strip().lower().lstrip("@") for entry in self.allowed_senders),
        )
        return self

    @property
    def smtp_implicit_tls(self) -> bool:
        return self.smtp_port == 465


def parse_config(section: Mapping[str, Any]) -> EmailConfig:
    """Validate ``[channels.email]``; a problem is a :class:`ConfigError` naming the key."""
    try:
        return EmailConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if not key:
            # Model-level checks start with the key they are about; it keeps its spelling.
            raise ConfigError(f"{message}.") from exc
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required for the email channel.") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"Unknown key {key!r} in the email channel's settings.") from exc
        raise ConfigError(f"{key}: {message}.") from exc
