"""``postroom skills list|add|show|set|rm``: a folder's skills (MESSAGES §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.cli.common import (
    actor,
    context,
    fail,
    print_json,
    run,
    services_for,
    shorten,
    stdout,
    table,
)
from postroom.core.errors import InvalidInput
from postroom.core.skills import Skill, parse_skill_file
from postroom.engine.skills import skill_to_dict

__all__ = ["app"]

app = typer.Typer(help="Manage the skills of folders.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
PathArgument = Annotated[str, typer.Argument(help="Folder path, e.g. atlas/content.")]
NameArgument = Annotated[str, typer.Argument(help="The skill's name, e.g. invoices.")]
FileArgument = Annotated[
    Path, typer.Argument(help="A Markdown file with +++ TOML front matter (name, keywords…).")
]
DescriptionOption = Annotated[str | None, typer.Option(help="One line: what the skill is for.")]
KeywordsOption = Annotated[
    str | None, typer.Option(help="Comma-separated words or phrases that call for the skill.")
]


def _read(file: Path) -> str:
    try:
        return file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"Cannot read {file}: {getattr(exc, 'strerror', None) or exc}.")


def _from_file(file: Path, *, name: str | None = None) -> dict[str, Any]:
    """A skill's fields from a file: named by its front matter, else by the file."""
    try:
        text = parse_skill_file(
            _read(file), default_name=name or file.stem, where=str(file), named_by_file=bool(name)
        )
    except InvalidInput as exc:
        fail(str(exc))
    return {
        "name": text.name,
        "description": text.description,
        "keywords": list(text.keywords),
        "body": text.body,
    }


@app.command("list")
def list_(
    ctx: typer.Context,
    folder: Annotated[
        str | None,
        typer.Option(help="The skills this folder's runs can use (its own and inherited)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List skills: every folder's own, or those one folder sees (with where they come from)."""
    cli = context(ctx)

    async def body() -> list[tuple[Skill, str | None]]:
        async with services_for(cli) as services:
            if folder is not None:
                return await services.skills.visible(folder)
            return [(s, None) for s in await services.skills.every()]

    found = run(body)
    if as_json:
        print_json([skill_to_dict(skill, origin) for skill, origin in found])
        return
    rows = table("folder", "name", "keywords", "description", "from", keep=("name",))
    for skill, origin in found:
        rows.add_row(
            skill.folder,
            skill.name,
            shorten(", ".join(skill.keywords), 40),
            shorten(skill.description, 60),
            f"inherited from {origin}" if origin else "·",
        )
    stdout.print(rows)


@app.command("add")
def add(
    ctx: typer.Context, path: PathArgument, file: FileArgument, as_json: JsonOption = False
) -> None:
    """Add a skill to a folder from a Markdown file (skills/<name>.md is written to match)."""
    cli = context(ctx)
    values = _from_file(file)

    async def body() -> Skill:
        async with services_for(cli) as services:
            return await services.skills.add(path, values, actor=actor())

    skill = run(body)
    if as_json:
        print_json(skill_to_dict(skill))
    else:
        stdout.print(f"Added skill {skill.name} to folder {skill.folder}")


@app.command("show")
def show(
    ctx: typer.Context, path: PathArgument, name: NameArgument, as_json: JsonOption = False
) -> None:
    """One skill a folder sees (its own or inherited), in full."""
    cli = context(ctx)

    async def body() -> tuple[Skill, str | None]:
        async with services_for(cli) as services:
            return await services.skills.show(path, name)

    skill, origin = run(body)
    if as_json:
        print_json(skill_to_dict(skill, origin))
        return
    head = Text(f"{skill.folder}: {skill.name}", style="bold")
    if origin:
        head.append(f"  (inherited by {path})", style="dim")
    stdout.print(head)
    stdout.print(Text(f"description: {skill.description or '(none)'}"))
    stdout.print(Text(f"keywords: {', '.join(skill.keywords) or '(none)'}"))
    stdout.print(Text(skill.body) if skill.body else Text("(no body)", style="dim"))


@app.command("set")
def set_(
    ctx: typer.Context,
    path: PathArgument,
    name: NameArgument,
    file: Annotated[
        Path | None, typer.Option(help="Take the description, keywords and body from this file.")
    ] = None,
    description: DescriptionOption = None,
    keywords: KeywordsOption = None,
    body_text: Annotated[str | None, typer.Option("--body", help="The skill's text.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Change one of a folder's own skills (the options given); the next run uses it."""
    cli = context(ctx)
    changes: dict[str, Any] = {}
    if file is not None:
        changes = {k: v for k, v in _from_file(file, name=name).items() if k != "name"}
    for key, value in (("description", description), ("keywords", keywords)):
        if value is not None:
            changes[key] = value
    if body_text is not None:
        changes["body"] = body_text

    async def body() -> Skill:
        async with services_for(cli) as services:
            return await services.skills.update(path, name, changes, actor=actor())

    skill = run(body)
    if as_json:
        print_json(skill_to_dict(skill))
    else:
        stdout.print(f"Changed skill {skill.name} of folder {skill.folder}")


def _remove(ctx: typer.Context, path: str, name: str, as_json: bool) -> None:
    cli = context(ctx)

    async def body() -> Skill:
        async with services_for(cli) as services:
            return await services.skills.remove(path, name, actor=actor())

    skill = run(body)
    if as_json:
        print_json(skill_to_dict(skill))
    else:
        stdout.print(f"Removed skill {skill.name} from folder {skill.folder}")


@app.command("rm")
def rm(
    ctx: typer.Context, path: PathArgument, name: NameArgument, as_json: JsonOption = False
) -> None:
    """Remove one of a folder's own skills (and its skills/<name>.md)."""
    _remove(ctx, path, name, as_json)


@app.command("remove", hidden=True)
def remove(
    ctx: typer.Context, path: PathArgument, name: NameArgument, as_json: JsonOption = False
) -> None:
    """Same as rm."""
    _remove(ctx, path, name, as_json)
