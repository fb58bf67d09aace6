"""The ``postroom`` command (INTERFACES §2)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated

import typer

from postroom import __version__
from postroom.app.detect import ECHO_HINT, detect_provider
from postroom.cli import access, folders, jobs, messages, routes, skills, tasks, tokens
from postroom.cli.channels import channels
from postroom.cli.chat import chat
from postroom.cli.common import (
    CliContext,
    actor,
    config_path,
    context,
    print_json,
    run,
    services_for,
    stdout,
)
from postroom.cli.mcp import mcp
from postroom.cli.nodes import nodes
from postroom.cli.ops import doctor, usage
from postroom.cli.serve import serve
from postroom.cli.usage import PostroomGroup
from postroom.config import (
    DATABASE_FILE,
    add_database_url,
    initial_config_text,
    is_database_url,
)
from postroom.core.errors import PostroomError
from postroom.engine.bootstrap import bootstrap
from postroom.engine.files import create_file, make_private_dir
from postroom.logs import configure_logging

__all__ = ["app", "main"]

app = typer.Typer(
    cls=PostroomGroup,
    name="postroom",
    help="postroom — a self-hosted message router for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(folders.app, name="folders")
app.add_typer(routes.app, name="routes")
app.add_typer(jobs.app, name="jobs")
app.add_typer(jobs.runs_app, name="runs")
app.add_typer(tasks.app, name="tasks")
app.add_typer(tokens.app, name="tokens")
app.add_typer(access.app, name="access")
app.add_typer(skills.app, name="skills")
messages.register(app)
app.command("serve")(serve)
app.command("usage")(usage)
app.command("doctor")(doctor)
app.command("chat")(chat)
app.command("channels")(channels)
app.command("mcp")(mcp)
app.command("nodes")(nodes)


def _version(value: bool) -> None:
    if value:
        stdout.print(f"postroom {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            envvar="POSTROOM_DATA",
            help="The data directory (postroom.toml, the database, the folders).",
            show_default=True,
        ),
    ] = Path("postroom-data"),
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level", help="debug, info, warning, error (default: warning; serve: info)."
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    configure_logging(level=log_level or "warning")
    ctx.obj = CliContext(data_dir=data)


@app.command()
def init(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            help="A postgresql:// URL: keep everything in that database, shared by every node.",
        ),
    ] = None,
) -> None:
    """Create the data directory: postroom.toml with an API token, the database, the folder
    main and the catch-all route. Running it again never overwrites anything."""
    cli = context(ctx)

    async def body() -> dict[str, object]:
        if database is not None and not is_database_url(database):
            raise PostroomError("--database must be a postgresql:// URL.")
        make_private_dir(cli.data_dir)
        path = config_path(cli)
        token: str | None = None
        wrote_config = False
        detected = None
        if not path.exists():
            detected = detect_provider(os.environ)
            token = secrets.token_urlsafe(32)
            wrote_config = create_file(
                path,
                initial_config_text(
                    token=token,
                    provider=detected.provider,
                    provider_model=detected.model,
                    database_url=database,
                ),
            )
            token = token if wrote_config else None
        elif database is not None:
            add_database_url(path, cli.config().database.url, database)
        configured = cli.config().database.url
        existed = (cli.data_dir / DATABASE_FILE).exists()
        async with services_for(cli, require=False) as services:
            report = await bootstrap(services, actor=actor())
        return {
            "data_dir": str(cli.data_dir),
            "config": str(path),
            "config_created": wrote_config,
            "database_created": report.created_folder if configured else not existed,
            "database": "postgresql" if configured else "sqlite",
            "folder_created": "main" if report.created_folder else None,
            "route_created": report.route_id,
            "token": token,
            "provider": detected.provider if detected else None,
            "provider_reason": detected.reason if detected else None,
        }

    result = run(body)
    if as_json:
        print_json(result)
        return
    if result["config_created"]:
        stdout.print(f"Wrote {result['config']}")
        stdout.print(f"API token: {result['token']}")
        stdout.print(f"Provider: {result['provider']} ({result['provider_reason']})")
        if result["provider"] == "echo":
            stdout.print(ECHO_HINT, markup=False, highlight=False)
    else:
        stdout.print(f"Kept the existing {result['config']}")
    if result["database_created"] and result["database"] == "postgresql":
        stdout.print("Created the schema in the PostgreSQL database")
    elif result["database_created"]:
        stdout.print(f"Created the database in {result['data_dir']}")
    if result["folder_created"]:
        stdout.print(f'Created folder main and route {result["route_created"]}: 9999 "" → main')
    else:
        stdout.print("The folders and routes were already set up; nothing changed.")
    stdout.print(
        "Next: postroom serve, then open http://127.0.0.1:8484 (operator view: add #token=<token>)."
    )


def main() -> None:
    app()
