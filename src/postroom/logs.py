"""Structured logging set-up, done once by an entry point (the CLI or ``postroom serve``).

Logs go to stderr so that stdout stays clean for ``--json`` output. Components log through
``structlog.get_logger(__name__)`` with ids as fields (``message_id=``, ``job_id=``). Libraries
that use the standard ``logging`` module (uvicorn) are rendered the same way.

Nothing logs a secret, and in case something tries, every line passes :class:`Redactor`: query
parameters and headers that carry secrets (``token=``, ``Authorization``, cookies, signatures,
the WebSocket subprotocol that carries the token), fields named like secrets, and the configured
secret values themselves are replaced by ``[redacted]`` — in exceptions too, which are rendered
as plain tracebacks (never with local variables, where a request's scope would show).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = ["REDACTED", "Redactor", "configure_logging"]

REDACTED = "[redacted]"
#: A cheap first look: most log values contain none of these and are left alone at once.
_SUSPECT = re.compile(
    r"(?i)=|bearer|authoriz|cookie|signature|websocket-protocol|api-key|postroom\.token"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",;)\]}]+"), rf"\1 {REDACTED}"),
    (
        re.compile(
            r"(?i)\b((?:access_|api_|verify_|hub\.verify_)?token|api_?key|secret|password"
            r"|signature)=[^&\s'\",;)\]}]+"
        ),
        rf"\1={REDACTED}",
    ),
    (
        re.compile(
            r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-postroom-signature"
            r"|x-hub-signature-256|x-slack-signature|sec-websocket-protocol|x-api-key)"
            r"(['\"]?\s*[:=,]\s*(?-i:b)?['\"]?)[^'\"\r\n]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"postroom\.token\.[0-9A-Za-z_-]+"), f"postroom.token.{REDACTED}"),
)
_SECRET_KEYS = frozenset(
    {"token", "secret", "password", "authorization", "cookie", "api_key", "api_keys"}
)
_PLAIN = (int, float, bool, type(None))


class Redactor:
    """A structlog processor that takes secrets out of every value of a log line."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Short values would blot out ordinary words; real secrets are long.
        self._secrets = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if _SUSPECT.search(text) is None:
            return text
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def __call__(
        self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in list(event_dict.items()):
            if isinstance(value, _PLAIN):
                continue
            if key.lower() in _SECRET_KEYS:
                event_dict[key] = REDACTED
                continue
            text = value if isinstance(value, str) else repr(value)
            redacted = self.redact(text)
            if redacted is not text and redacted != text:
                event_dict[key] = redacted
        return event_dict


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written (it is swapped under test runners and
    by tools that capture output), instead of the object it was at configuration time."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    *,
    level: str = "warning",
    json: bool = False,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
) -> None:
    """Set up structlog and the standard ``logging`` module; *secrets* (the API token, channel
    tokens…) are taken out of every line wherever they appear."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    output: TextIO = stream or _Stderr()  # type: ignore[assignment]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # Plain text tracebacks (no local variables), redacted like any other value.
        structlog.processors.format_exc_info,
        Redactor(secrets),
    ]
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(output)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # uvicorn's own chatter (one line per connection problem) only at warning and above.
    root.setLevel(max(numeric, logging.WARNING))
    # Every uvicorn line goes through the handler above (redacted), even where uvicorn's own
    # logging configuration gave its loggers handlers of their own and cut them off from it.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        server_log = logging.getLogger(name)
        server_log.handlers.clear()
        server_log.propagate = True
        server_log.setLevel(logging.NOTSET)
