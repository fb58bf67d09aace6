"""``postroom channels``: each enabled adapter's state, last event and last error.

The states live in the running server, so the command asks it (``GET /api/v1/channels``);
without a server it lists the enabled adapters as not running.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.app.server_client import ServerUnavailable, get_json, running_server, server_base
from postroom.cli.common import context, print_json, stdout, table, user_errors

__all__ = ["channels"]


def channels(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Each channel adapter's state (connected, last event, last error)."""
    from postroom.app.channels import enabled_channels  # it imports the web stack's routing

    cli = context(ctx)
    with user_errors():
        config = cli.config()
    base = server_base(cli.data_dir, config)
    running = running_server(cli.data_dir) is not None
    try:
        if not running:
            raise ServerUnavailable(base)
        rows: list[dict[str, Any]] = list(
            get_json(base, config.api.token, "/api/v1/channels")["channels"]
        )
    except (ServerUnavailable, KeyError, TypeError):
        running = False
        rows = [
            {
                "name": name,
                "state": "not running",
                "detail": "",
                "last_event_at": None,
                "last_error": None,
                "last_error_at": None,
            }
            for name in enabled_channels(config)
        ]
    if as_json:
        print_json({"server": base, "running": running, "channels": rows})
        return
    if not running:
        stdout.print(f"postroom serve is not running on {cli.data_dir}.", style="yellow")
    if not rows:
        stdout.print(
            "No channel adapter is enabled: add a [channels.<name>] section with enabled = true "
            "(see the README). The web chat and the HTTP API are always on.",
            markup=False,
        )
        return
    lines = table(
        "channel",
        "state",
        "last event",
        "last error",
        keep=("channel",),
    )
    styles = {"connected": "green", "error": "red", "not running": "dim"}
    for row in rows:
        error = row.get("last_error") or ""
        if error and row.get("last_error_at"):
            error = f"{error} ({row['last_error_at']})"
        state = row.get("state", "?")
        detail = f" — {row['detail']}" if row.get("detail") else ""
        # Platform error texts are data: Text, never markup.
        lines.add_row(
            Text(str(row.get("name"))),
            Text(state, style=styles.get(state, "yellow")) + Text(detail),
            Text(str(row.get("last_event_at") or "·")),
            Text(error or "·"),
        )
    stdout.print(lines)
