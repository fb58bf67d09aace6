"""``postroom folders add|set|show|list|rm``."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.cli.common import (
    actor,
    context,
    print_json,
    run,
    services_for,
    shorten,
    stderr,
    stdout,
    table,
)
from postroom.core.folder_settings import SETTING_KEYS, settings_of
from postroom.core.folders import Folder, FolderSettings, ancestors, effective_settings
from postroom.engine.budgets import with_budget_warning
from postroom.engine.folders import FolderSpec, folder_to_dict

__all__ = ["app"]

app = typer.Typer(help="Manage folders (agents).", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
PathArgument = Annotated[str, typer.Argument(help="Folder path, e.g. atlas/content.")]
PersonaOption = Annotated[str | None, typer.Option(help="The agent's persona (AGENT.md).")]
ProviderOption = Annotated[
    str | None, typer.Option(help="LLM provider: a built-in one or a [providers.<name>].")
]
ModelOption = Annotated[str | None, typer.Option(help="Model name.")]
TtlOption = Annotated[
    str | None, typer.Option("--engagement-ttl", help="e.g. 30m; 0 disables; at most 30d.")
]
SessionOption = Annotated[str | None, typer.Option(help="per-chat or shared.")]
BusyOption = Annotated[
    str | None, typer.Option("--busy-policy", help="followup, interrupt or steer.")
]
RoleOption = Annotated[str | None, typer.Option(help="agent, conductor or admin.")]
BudgetOption = Annotated[
    str | None, typer.Option("--budget-per-day", help="USD a day, e.g. 5 or 2.50.")
]
MirrorOption = Annotated[
    list[str] | None, typer.Option(help="A chat that mirrors this folder (repeatable).")
]


@app.command("add")
def add(
    ctx: typer.Context,
    path: PathArgument,
    persona: PersonaOption = None,
    provider: ProviderOption = None,
    model: ModelOption = None,
    engagement_ttl: TtlOption = None,
    session: SessionOption = None,
    busy_policy: BusyOption = None,
    role: RoleOption = None,
    budget_per_day: BudgetOption = None,
    mirror: MirrorOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a folder (and its missing parents, saying so)."""
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
        budget_per_day=budget_per_day,
    )

    async def body() -> tuple[dict[str, Any], list[str]]:
        async with services_for(cli) as services:
            existing = {f.path for f in await services.folders.list_folders()}
            folder = await services.folders.add_folder(path, spec, actor=actor())
            answer = await with_budget_warning(services.budgets, folder)
        return answer, [p for p in ancestors(path) if p not in existing]

    answer, parents = run(body)
    if as_json:
        print_json(answer)
        return
    for parent in parents:
        stdout.print(f"Added folder {parent} (the parent of {answer['path']}, which was missing)")
    stdout.print(f"Added folder {answer['path']}")
    _warn(answer)


def _warn(answer: dict[str, Any]) -> None:
    for warning in answer.get("warnings", ()):
        stderr.print(Text("warning: ", style="bold yellow") + Text(warning))


@app.command("set")
def set_(
    ctx: typer.Context,
    path: PathArgument,
    persona: PersonaOption = None,
    provider: ProviderOption = None,
    model: ModelOption = None,
    engagement_ttl: TtlOption = None,
    session: SessionOption = None,
    busy_policy: BusyOption = None,
    role: RoleOption = None,
    budget_per_day: BudgetOption = None,
    mirror: MirrorOption = None,
    unset: Annotated[
        list[str] | None,
        typer.Option(
            help="A setting to clear, so the default (or the parent's) applies (repeatable)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Change a folder's settings (only the options given); the next turn uses them, and
    AGENT.md is rewritten to match."""
    cli = context(ctx)
    given: dict[str, Any] = {
        "persona": persona,
        "provider": provider,
        "model": model,
        "engagement_ttl": engagement_ttl,
        "session": session,
        "busy_policy": busy_policy,
        "role": role,
        "budget_per_day": budget_per_day,
        "mirror": list(mirror) if mirror else None,
    }
    changes = {key: value for key, value in given.items() if value is not None}
    for key in unset or ():
        changes[key.replace("-", "_")] = None

    async def body() -> dict[str, Any]:
        async with services_for(cli) as services:
            folder = await services.folders.update(path, changes, actor=actor())
            return await with_budget_warning(services.budgets, folder)

    answer = run(body)
    if as_json:
        print_json(answer)
        return
    stdout.print(f"Changed folder {answer['path']}: {', '.join(sorted(changes))}")
    _warn(answer)


@app.command("show")
def show(ctx: typer.Context, path: PathArgument, as_json: JsonOption = False) -> None:
    """One folder: its persona and every setting, with what applies where it sets none."""
    cli = context(ctx)

    async def body() -> tuple[Folder, FolderSettings]:
        async with services_for(cli) as services:
            folder = await services.folders.show(path)
            folders = {f.path: f for f in await services.folders.list_folders()}
        return folder, effective_settings(path, folders, cli.config().folder_defaults())

    folder, effective = run(body)
    if as_json:
        print_json(folder_to_dict(folder))
        return
    _print_folder(folder, effective)


def _print_folder(folder: Folder, effective: FolderSettings) -> None:
    own = settings_of(folder)
    applied = _effective_public(effective)
    head = Text(folder.path, style="bold")
    if folder.inherits:
        head.append(f"  (from a {{sender}} route: unset settings come from {folder.parent})")
    stdout.print(head)
    width = max(len(key) for key in SETTING_KEYS)
    for key in SETTING_KEYS:
        if key == "persona":
            continue
        line = Text(f"  {key:<{width}}  ")
        value = own[key]
        if value is not None:
            line.append(_shown(value))
        else:
            fallback = applied.get(key)
            line.append("· ", style="dim")
            line.append(
                f"(not set: {_shown(fallback)})" if fallback not in (None, [], "") else "(not set)",
                style="dim",
            )
        stdout.print(line)
    stamp = Text("  ")
    if folder.created_at:
        stamp.append(f"created {folder.created_at:%Y-%m-%d %H:%M:%S} by {folder.created_by}")
    if folder.updated_at and folder.updated_at != folder.created_at:
        stamp.append(f" · changed {folder.updated_at:%Y-%m-%d %H:%M:%S}")
    stdout.print(stamp, style="dim")
    stdout.print(Text("persona:", style="bold"))
    persona = folder.persona or (effective.persona if folder.inherits else "")
    stdout.print(Text(persona) if persona else Text("(none)", style="dim"))


def _effective_public(effective: FolderSettings) -> dict[str, Any]:
    return settings_of(
        Folder(
            effective.path,
            provider=effective.provider,
            model=effective.model,
            engagement_ttl_s=effective.engagement_ttl_s,
            busy_policy=effective.busy_policy,
            session=effective.session,
            role=effective.role,
            tools=effective.tools,
            mirror=effective.mirror,
            budget_per_day=effective.budget_per_day,
        )
    )


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "(none)"
    if isinstance(value, float):
        return f"{value:g} USD"
    return str(value)


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
    rows = table(
        "path", "provider", "model", "engagement", "session", "role", "persona", keep=("path",)
    )
    for folder in found:
        own = settings_of(folder)
        rows.add_row(
            folder.path + (" (from {sender})" if folder.inherits else ""),
            *(
                own[key] or "·"
                for key in ("provider", "model", "engagement_ttl", "session", "role")
            ),
            shorten(folder.persona or "", 60),
        )
    stdout.print(rows)


@app.command("rm")
def rm(ctx: typer.Context, path: PathArgument, as_json: JsonOption = False) -> None:
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
