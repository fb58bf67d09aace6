"""``postroom folders add|list|rm``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from postroom.cli.common import actor, context, print_json, run, services_for, stdout
from postroom.core.folders import Folder
from postroom.engine.folders import FolderSpec, folder_to_dict

__all__ = ["app"]

app = typer.Typer(help="Manage folders (agents).", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("add")
def add(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Folder path, e.g. atlas/content.")],
    persona: Annotated[str | None, typer.Option(help="The agent's persona (AGENT.md).")] = None,
    provider: Annotated[str | None, typer.Option(help="LLM provider.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name.")] = None,
    engagement_ttl: Annotated[
        str | None, typer.Option("--engagement-ttl", help="e.g. 30m; 0 disables.")
    ] = None,
    session: Annotated[str | None, typer.Option(help="per-chat or shared.")] = None,
    busy_policy: Annotated[
        str | None, typer.Option("--busy-policy", help="followup, interrupt or steer.")
    ] = None,
    role: Annotated[str | None, typer.Option(help="agent, conductor or admin.")] = None,
    mirror: Annotated[
        list[str] | None, typer.Option(help="A chat that mirrors this folder (repeatable).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a folder (and its missing parents)."""
    cli = context(ctx)
    spec = FolderSpec(
        persona=persona,
        provider=provider,
        model=model,
        engagement_ttl=engagement_ttl,
        busy_policy=busy_policy,
        session=session,
        role=role,
        mirror=tuple(mirror) if mirror else None,
    )

    async def body() -> Folder:
        async with services_for(cli) as services:
            return await services.folders.add_folder(path, spec, actor=actor())

    folder = run(body)
    if as_json:
        print_json(folder_to_dict(folder))
    else:
        stdout.print(f"Added folder {folder.path}")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List folders with the settings set on each."""
    cli = context(ctx)

    async def body() -> list[Folder]:
        async with services_for(cli) as services:
            return await services.folders.list_folders()

    found = run(body)
    if as_json:
        print_json([folder_to_dict(f) for f in found])
        return
    table = Table("path", "provider", "model", "engagement", "session", "role", "persona")
    for folder in found:
        ttl = folder.engagement_ttl_s
        persona = (folder.persona or "").replace("\n", " ")
        table.add_row(
            folder.path + (" (from {sender})" if folder.inherits else ""),
            folder.provider or "·",
            folder.model or "·",
            "·" if ttl is None else f"{ttl}s",
            folder.session.value if folder.session else "·",
            folder.role.value if folder.role else "·",
            persona[:40] + ("…" if len(persona) > 40 else ""),
        )
    stdout.print(table)


@app.command("rm")
def rm(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="Folder path.")],
    as_json: JsonOption = False,
) -> None:
    """Remove a folder no route and no sub-folder uses (its files move to DIR/removed/)."""
    cli = context(ctx)

    async def body() -> Folder:
        async with services_for(cli) as services:
            return await services.folders.remove_folder(path, actor=actor())

    folder = run(body)
    if as_json:
        print_json(folder_to_dict(folder))
    else:
        stdout.print(f"Removed folder {folder.path}")
