"""Structured logging set-up, done once by an entry point (the CLI or ``postroom serve``).

Logs go to stderr so that stdout stays clean for ``--json`` output. Components log through
``structlog.get_logger(__name__)`` with ids as fields (``message_id=``, ``job_id=``); nothing
logs a secret.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ["configure_logging"]


def configure_logging(
    *, level: str = "warning", json: bool = False, stream: TextIO | None = None
) -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
