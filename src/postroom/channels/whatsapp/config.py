"""``[channels.whatsapp]``: the Cloud API credentials, the webhook's secrets, where Graph lives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from postroom.core.errors import ConfigError

__all__ = [
    "DEFAULT_API_VERSION",
    "DEFAULT_BASE_URL",
    "WEBHOOK_PATH",
    "WhatsAppConfig",
    "parse_config",
]

DEFAULT_BASE_URL = "https://graph.facebook.com"
DEFAULT_API_VERSION = "v21.0"
WEBHOOK_PATH = "/channels/whatsapp/webhook"

#: What each required key is, for the sentence that says it is missing.
_REQUIRED = {
    "access_token": "the system-user or app token that may send for the number",
    "phone_number_id": "the id of the business phone number, not the number itself",
    "app_secret": "it checks X-Hub-Signature-256 on every webhook",
    "verify_token": "Meta sends it back when the webhook is subscribed",
}


class WhatsAppConfig(BaseModel):
    """One WhatsApp Business phone number on the Cloud API."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_token: str = Field(min_length=8)
    #: Graph's id of the business phone number (digits), the ``{phone_number_id}`` of the URLs.
    phone_number_id: str = Field(pattern=r"^\d{1,32}$")
    #: The Meta app's secret: webhooks are signed ``sha256=HMAC-SHA256(app_secret, body)``.
    app_secret: str = Field(min_length=8)
    #: Chosen by the operator in the app dashboard; the subscription handshake echoes it.
    verify_token: str = Field(min_length=1)
    api_version: str = Field(DEFAULT_API_VERSION, pattern=r"^v\d+\.\d+$")
    base_url: str = DEFAULT_BASE_URL
    webhook_path: str = WEBHOOK_PATH
    max_body_bytes: int = Field(1024 * 1024, ge=1024)
    send_timeout_s: float = Field(10.0, gt=0)
    #: Media downloads share the webhook's time budget (Meta resends a slow webhook).
    media_timeout_s: float = Field(5.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("webhook_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or " " in value:
            raise ValueError("must be a path such as /channels/whatsapp/webhook")
        return value

    @property
    def api_url(self) -> str:
        """The versioned Graph root every call is made under, with a trailing slash."""
        return f"{self.base_url}/{self.api_version}/"


def parse_config(section: Mapping[str, Any]) -> WhatsAppConfig:
    """Validate ``[channels.whatsapp]``; a :class:`ConfigError` names the key at fault."""
    try:
        return WhatsAppConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required ({_REQUIRED.get(key, 'no default')}).") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"Unknown key {key!r}.") from exc
        if error["type"] == "string_pattern_mismatch":
            raise ConfigError(f"{key} has an invalid value {error['input']!r}.") from exc
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{key}: {message}.") from exc
