"""``postroom serve``."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

import typer

from postroom.cli.common import context, user_errors
from postroom.logs import configure_logging

__all__ = ["serve"]


def _runner() -> asyncio.Runner:
    try:
        import uvloop  # optional speed-up; a heavy optional import, done only when serving
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Listen address (server.host).")] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Listen port (server.port); 0 picks one."),
    ] = None,
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines.")] = False,
) -> None:
    """Run the gateway: HTTP API, web chat, workers, delivery and scheduler. Ctrl-C stops it
    gracefully."""
    # The gateway and its web stack are imported only by this command: the others start fast.
    from postroom.app.gateway import serve as serve_gateway

    cli = context(ctx)
    root = ctx.find_root().params
    level = str(root.get("log_level") or "info")
    configure_logging(level=level, json=log_json)
    overrides: dict[str, dict[str, object]] = {"server": {}}
    if host is not None:
        overrides["server"]["host"] = host
    if port is not None:
        overrides["server"]["port"] = port

    def ready(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(
            f"postroom serving on http://{shown}:{bound_port}  (pid {os.getpid()}; web chat at /)",
            file=sys.stderr,
            flush=True,
        )

    with user_errors():
        cli.require_initialized()
        config = cli.config_with(overrides)
        # From here on the configured secrets are known: no log line may carry one.
        configure_logging(level=level, json=log_json, secrets=config.secret_values())
        with _runner() as runner:
            runner.run(
                serve_gateway(
                    cli.data_dir,
                    config,
                    host=config.server.host,
                    port=config.server.port,
                    on_ready=ready,
                )
            )
