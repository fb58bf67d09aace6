"""``postroom jobs list|retry|cancel`` and ``postroom runs list|show``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.cli.common import context, print_json, run, services_for, stdout, table
from postroom.engine.turns import job_to_dict
from postroom.engine.views import run_summary_to_dict, run_to_dict
from postroom.store.records import JobRecord, JobStatus, RunRecord, RunSummary

__all__ = ["app", "runs_app"]

app = typer.Typer(help="The turn queue.", no_args_is_help=True)
runs_app = typer.Typer(help="Run records: what a model saw and said.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("list")
def list_(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option(help="queued, running, done, failed or cancelled.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Turns, newest first, with the runs each made."""
    cli = context(ctx)

    async def body() -> tuple[list[JobRecord], dict[int, list[int]]]:
        async with services_for(cli) as services:
            jobs = await services.turns.list_jobs(status=status, limit=limit)
            return jobs, await services.history.run_ids([j.id for j in jobs])

    jobs, runs = run(body)
    if as_json:
        print_json([job_to_dict(j, run_ids=runs.get(j.id, [])) for j in jobs])
        return
    if not jobs:
        stdout.print("No jobs.", style="dim")
        return
    rows = table(
        "id",
        "status",
        "folder",
        "chat",
        "prio",
        "attempts",
        "runs",
        "messages",
        "error",
        keep=("id", "status", "prio", "attempts", "messages"),
    )
    for job in jobs:
        rows.add_row(
            str(job.id),
            job.status.value,
            job.folder,
            job.chat_jid + (f" #{job.topic}" if job.topic else ""),
            str(job.priority),
            _attempts(job),
            ", ".join(str(r) for r in runs.get(job.id, [])) or "·",
            str(len(job.messages)),
            Text(job.last_error or ""),
        )
    stdout.print(rows)


def _attempts(job: JobRecord) -> str:
    """Failed attempts so far: ``1/3`` while a turn may still be tried; a finished turn
    shows how many tries failed before it ended (nothing when none did)."""
    if job.status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED):
        return f"{job.attempts}/{job.max_attempts}"
    return str(job.attempts) if job.attempts else "·"


@runs_app.command("list")
def list_runs(
    ctx: typer.Context,
    folder: Annotated[str | None, typer.Option(help="Only this folder's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Runs, newest first: job, folder, model, tokens, cost and outcome."""
    cli = context(ctx)

    async def body() -> list[RunSummary]:
        async with services_for(cli) as services:
            return await services.history.runs(folder=folder, limit=limit)

    found = run(body)
    if as_json:
        print_json([run_summary_to_dict(r) for r in found])
        return
    if not found:
        stdout.print("No runs.", style="dim")
        return
    rows = table(
        "id",
        "job",
        "when",
        "folder",
        "model",
        "in",
        "out",
        "cost (USD)",
        "ms",
        "outcome",
        keep=("id", "job", "when", "in", "out", "cost (USD)", "ms"),
    )
    for summary in found:
        usage = summary.usage or {}
        rows.add_row(
            str(summary.id),
            str(summary.job_id),
            summary.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            summary.folder,
            summary.model or summary.provider,
            f"{int(usage.get('input_tokens', 0)):,}",
            f"{int(usage.get('output_tokens', 0)):,}",
            "unpriced" if summary.cost is None else f"{summary.cost:.4f}",
            "·" if summary.duration_ms is None else str(summary.duration_ms),
            Text(summary.outcome + (f": {summary.error}" if summary.error else "")),
        )
    stdout.print(rows)


@app.command("retry")
def retry(
    ctx: typer.Context,
    job_id: Annotated[int, typer.Argument(help="A failed or cancelled job.")],
    as_json: JsonOption = False,
) -> None:
    """Queue a failed or cancelled job again."""
    cli = context(ctx)

    async def body() -> JobRecord:
        async with services_for(cli) as services:
            return await services.turns.retry(job_id)

    job = run(body)
    if as_json:
        print_json(job_to_dict(job))
    else:
        stdout.print(f"Job {job.id} is queued again.")


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    job_id: Annotated[int, typer.Argument(help="A queued or running job.")],
    as_json: JsonOption = False,
) -> None:
    """Cancel a queued or running job (a running one stops at its next step)."""
    cli = context(ctx)

    async def body() -> JobRecord:
        async with services_for(cli) as services:
            return await services.turns.cancel(job_id)

    job = run(body)
    if as_json:
        print_json(job_to_dict(job))
    else:
        stdout.print(f"Job {job.id} is cancelled.")


def _sent_attachments(message: Mapping[str, Any]) -> list[str]:
    """What a run sent of a message's files: ``image screen.png (sha256 ab12…)``."""
    found = message.get("attachments")
    if not isinstance(found, list):
        return []
    return [
        f"{item.get('sent_as', 'file')} {item.get('name') or '(unnamed)'} "
        f"({item.get('mime', '')}, sha256 {str(item.get('sha256', ''))[:12]})"
        for item in found
        if isinstance(item, dict)
    ]


@runs_app.command("show")
def show(
    ctx: typer.Context,
    run_id: Annotated[int, typer.Argument(help="The run's id (see messages: run_id).")],
    as_json: JsonOption = False,
) -> None:
    """The exact context and outcome of one run."""
    cli = context(ctx)

    async def body() -> RunRecord:
        async with services_for(cli) as services:
            return await services.history.run(run_id)

    record = run(body)
    data = run_to_dict(record)
    if as_json:
        print_json(data)
        return
    stdout.print(
        Text(f"run {record.id} · job {record.job_id} · folder {record.folder}", style="bold")
    )
    stdout.print(
        f"provider {record.provider} · model {record.model or '-'} · outcome {record.outcome}"
        f" · {record.duration_ms if record.duration_ms is not None else '-'} ms"
    )
    if record.error:
        stdout.print(Text(f"error: {record.error}", style="red"))
    if record.skills:
        used = ", ".join(
            f"{s.get('name')} ({s.get('score')}"
            + (f", from {s['inherited_from']}" if s.get("inherited_from") else "")
            + ")"
            for s in record.skills
        )
        stdout.print(Text(f"skills: {used}"))
    stdout.print(Text("── system prompt ──", style="dim"))
    stdout.print(Text(record.system))
    stdout.print(Text(f"── messages ({len(record.messages)}) ──", style="dim"))
    for message in record.messages:
        role = message.get("role", "?")
        stdout.print(Text(f"[{role}] ", style="bold cyan") + Text(str(message.get("content", ""))))
        for sent in _sent_attachments(message):
            stdout.print(Text(f"  sent {sent}", style="magenta"))
    if record.tools:
        stdout.print(Text("── tools ──", style="dim"))
        stdout.print(Text(json.dumps(record.tools, ensure_ascii=False)))
    stdout.print(Text("── output ──", style="dim"))
    stdout.print(Text(record.output or "(none)"))
    if record.output_raw is not None and record.output_raw != record.output:
        stdout.print(Text("── raw output ──", style="dim"))
        stdout.print(Text(record.output_raw))
    if record.usage:
        stdout.print(Text(f"usage: {json.dumps(record.usage)}", style="dim"))
