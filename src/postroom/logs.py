"""Structured logging set-up, done once by an entry point (the CLI or ``postroom serve``).

Logs go to stderr so that stdout stays clean for ``--json`` output. Components log through
``structlog.get_logger(__name__)`` with ids as fields (``message_id=``, ``job_id=``); nothing
logs a secret. Libraries that use the standard ``logging`` module (uvicorn) are rendered the
same way.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ["configure_logging"]


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written (it is swapped under test runners and
    by tools that capture output), instead of the object it was at configuration time."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    *, level: str = "warning", json: bool = False, stream: TextIO | None = None
) -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    output: TextIO = stream or _Stderr()  # type: ignore[assignment]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # uvicorn's own chatter (one line per connection problem) only at warning and above.
    root.setLevel(max(numeric, logging.WARNING))
