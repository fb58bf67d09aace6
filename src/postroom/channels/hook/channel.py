"""Generic inbound webhooks (ROUTING §1, INTERFACES §4).

``POST /hooks/<path>/<source>`` signed ``X-Postroom-Signature: t=<unix seconds>,v1=<hex
HMAC-SHA256 of "<t>.<request path>.<body>">`` (``[channels.hook] secret``) becomes a message in
chat ``hook:<path>/<source>`` from ``hook:<source>`` — ``hook:acme/eng/github`` for
``/hooks/acme/eng/github``. A missing, malformed, wrong or stale (more than 5 minutes from our
clock) signature is 401 and nothing is stored; the answer (2xx) comes only after the message is
committed. A redelivery with the same ``Idempotency-Key`` (or ``X-GitHub-Delivery``, or the same
signature: a replay inside the window) is a no-op. Without a secret, ``/hooks/…`` answers 403
(:func:`disabled_routes`). Replies to hook chats leave through the event stream or
``[channels.http.hook] outbound_url``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from postroom.channels.base import BaseChannel
from postroom.core.errors import ConfigError, InvalidInput, TooLarge
from postroom.core.messages import InboundMessage
from postroom.core.signing import verify_request

__all__ = ["DISABLED", "HookChannel", "HookConfig", "build", "disabled_routes", "render_payload"]

#: INTERFACES §4: what ``/hooks/…`` answers when no secret is configured.
DISABLED = "webhooks are disabled: set [channels.hook] secret"

_SEGMENT = re.compile(r"[a-z0-9_-]{1,64}")
MAX_BODY = 1024 * 1024
TEXT_KEYS = ("text", "message", "content", "body", "summary")


class HookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    secret: str = Field(min_length=8)
    max_body_bytes: int = Field(MAX_BODY, ge=1024)


def build(section: Mapping[str, Any]) -> HookChannel:
    try:
        config = HookConfig.model_validate(dict(section))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        if error["type"] == "missing":
            raise ConfigError(f"{key} is required (signatures are checked on every hook)") from exc
        if error["type"] == "extra_forbidden":
            raise ConfigError(f"unknown key {key!r}") from exc
        raise ConfigError(f"{key}: {error['msg']}") from exc
    return HookChannel(config)


def render_payload(source: str, body: bytes, content_type: str) -> str:
    """The text a hook's payload becomes: its text field if it has one, else the JSON itself."""
    text = body.decode("utf-8", errors="replace")
    if "json" not in content_type and not text.lstrip().startswith(("{", "[")):
        return text
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return text
    if isinstance(payload, dict):
        for key in TEXT_KEYS:
            value = payload.get(key)
            if isinstance(value, str) and value.strip():
                return value
    pretty = json.dumps(payload, ensure_ascii=False, indent=2)
    return f"{source} event:\n```json\n{pretty}\n```"


class HookChannel(BaseChannel):
    name = "hook"
    platforms = ()

    def __init__(self, config: HookConfig) -> None:
        super().__init__()
        self._config = config

    def routes(self) -> list[BaseRoute]:
        return [Route("/hooks/{rest:path}", self._handle, methods=["POST"])]

    async def do_check(self) -> str:
        return "inbound webhooks at /hooks/<path>/<source> (signed)"

    async def _handle(self, request: Request) -> Response:
        parts = request.path_params["rest"].strip("/").split("/")
        if len(parts) < 2 or not all(_SEGMENT.fullmatch(p) for p in parts):
            return _error(404, "Hooks live at /hooks/<path>/<source> (segments a-z, 0-9, _, -).")
        body = await request.body()
        if len(body) > self._config.max_body_bytes:
            return _error(413, f"The body is over {self._config.max_body_bytes} bytes.")
        signature = verify_request(
            self._config.secret,
            request.headers.get("x-postroom-signature"),
            request.url.path,
            body,
            now=self.context.clock().timestamp(),
        )
        if signature is None:
            return _error(401, "Missing, malformed, stale or wrong X-Postroom-Signature.")
        source = parts[-1]
        path = "/".join(parts[:-1])
        message_id = (
            request.headers.get("idempotency-key")
            or request.headers.get("x-github-delivery")
            or signature[:32]
        )
        content = render_payload(source, body, request.headers.get("content-type", ""))
        message = InboundMessage(
            id=message_id[:255],
            chat_jid=f"hook:{path}/{source}",
            sender=f"hook:{source}",
            content=content,
            timestamp=self.context.clock(),
            sender_name=source,
            metadata={"hook": {"event": request.headers.get("x-github-event")}}
            if request.headers.get("x-github-event")
            else {},
        )
        try:
            result = await self.receive(message)
        except TooLarge as exc:
            return _error(413, str(exc))
        except InvalidInput as exc:
            return _error(400, str(exc))
        assert result is not None
        return JSONResponse(result.to_dict())


def disabled_routes() -> list[BaseRoute]:
    """``/hooks/…`` when the hook channel is not configured: 403 with INTERFACES §4's sentence
    (an unsigned hook is never accepted)."""

    async def refuse(_: Request) -> Response:
        return _error(403, DISABLED)

    return [Route("/hooks/{rest:path}", refuse, methods=["POST"])]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
