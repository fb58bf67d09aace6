"""``postroom tasks add|list|pause|resume|rm``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from postroom.cli.common import (
    actor,
    context,
    print_json,
    run,
    services_for,
    shorten,
    stdout,
    table,
)
from postroom.core.schedule import parse_schedule
from postroom.engine.tasks import task_to_dict
from postroom.store.records import TaskRecord

__all__ = ["app"]

app = typer.Typer(help="Scheduled tasks.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("add")
def add(
    ctx: typer.Context,
    folder: Annotated[str, typer.Option(help="The folder (agent) that runs it.")],
    chat_jid: Annotated[str, typer.Option("--chat-jid", help="Where the answer goes.")],
    schedule: Annotated[
        str, typer.Option(help='"0 9 * * 1-5", "every 30m", or "2026-12-01T09:00"')
    ],
    prompt: Annotated[str, typer.Option(help="What to do each time.")],
    tz: Annotated[str | None, typer.Option(help="IANA time zone for cron and local times.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a scheduled task."""
    cli = context(ctx)

    async def body() -> TaskRecord:
        async with services_for(cli) as services:
            return await services.tasks.add(
                folder=folder,
                chat_jid=chat_jid,
                schedule=schedule,
                prompt=prompt,
                tz=tz,
                actor=actor(),
            )

    task = run(body)
    if as_json:
        print_json(task_to_dict(task))
    else:
        when = task.next_run.strftime("%Y-%m-%d %H:%M UTC") if task.next_run else "never"
        stdout.print(f"Added task {task.id}; first run {when}.")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every task with its schedule and its next and last run."""
    cli = context(ctx)

    async def body() -> list[TaskRecord]:
        async with services_for(cli) as services:
            return await services.tasks.list()

    tasks = run(body)
    if as_json:
        print_json([task_to_dict(t) for t in tasks])
        return
    if not tasks:
        stdout.print("No tasks.", style="dim")
        return
    rows = table(
        "id",
        "folder",
        "chat",
        "schedule",
        "next run",
        "last",
        "prompt",
        keep=("id", "next run"),
    )
    for task in tasks:
        rows.add_row(
            str(task.id) + ("" if task.enabled else " (paused)"),
            task.folder,
            task.chat_jid,
            parse_schedule(task.schedule, task.tz).describe(),
            task.next_run.strftime("%Y-%m-%d %H:%M") if task.next_run else "·",
            Text(task.last_status or "·"),
            shorten(task.prompt, 60),
        )
    stdout.print(rows)


def _change(verb: str, help_text: str) -> None:
    def command(
        ctx: typer.Context,
        task_id: Annotated[int, typer.Argument(help="The task's id.")],
        as_json: JsonOption = False,
    ) -> None:
        cli = context(ctx)

        async def body() -> TaskRecord:
            async with services_for(cli) as services:
                service = services.tasks
                action = {"pause": service.pause, "resume": service.resume, "rm": service.remove}
                return await action[verb](task_id)

        task = run(body)
        if as_json:
            print_json(task_to_dict(task))
        else:
            done = {"pause": "paused", "resume": "resumed", "rm": "removed"}[verb]
            stdout.print(f"Task {task.id} {done}.")

    command.__doc__ = help_text
    app.command(verb)(command)


_change("pause", "Stop running a task until it is resumed.")
_change("resume", "Run a paused task again (missed runs are not replayed).")
_change("rm", "Remove a task.")
