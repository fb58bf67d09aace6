"""``postroom routes add|list|rm|set|preview|explain|history``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from postroom.cli.common import (
    CliContext,
    actor,
    context,
    fail,
    print_json,
    run,
    services_for,
    stderr,
    stdout,
    table,
)
from postroom.cli.render import print_decision, print_preview
from postroom.core.decision import Decision
from postroom.engine.inbound import build_inbound
from postroom.engine.preview import DEFAULT_PREVIEW, MAX_PREVIEW, RoutePreview
from postroom.engine.routes import RouteView, route_warnings
from postroom.engine.views import route_change_to_dict
from postroom.store.records import RouteAuditRecord, RouteRecord

__all__ = ["app"]

app = typer.Typer(help="Manage the route table.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Change nothing; show what the change would do to recent messages."
    ),
]
LimitOption = Annotated[
    int,
    typer.Option(
        "--limit", min=1, max=MAX_PREVIEW, help="How many recent messages a preview examines."
    ),
]


def _show_preview(preview: RoutePreview, as_json: bool) -> None:
    if as_json:
        print_json(preview.to_dict())
    else:
        print_preview(preview)


@app.command("add")
def add(
    ctx: typer.Context,
    seq: Annotated[str, typer.Option("--seq", help="Order: lower first, negative allowed.")],
    target: Annotated[str, typer.Option("--target", help="folder, folder#observe, folder#topic")],
    match: Annotated[
        str, typer.Option("--match", help='key=pattern tests, e.g. "platform=telegram"')
    ] = "",
    dry_run: DryRunOption = False,
    limit: LimitOption = DEFAULT_PREVIEW,
    as_json: JsonOption = False,
) -> None:
    """Add a route; prints its id."""
    cli = context(ctx)
    if dry_run:

        async def preview() -> RoutePreview:
            async with services_for(cli) as services:
                return await services.routes.preview_add(seq, match, target, limit=limit)

        _show_preview(run(preview), as_json)
        return

    async def body() -> tuple[int, list[str]]:
        async with services_for(cli) as services:
            route_id = await services.routes.add_route(seq, match, target, actor=actor())
            return route_id, route_warnings(await services.routes.list_routes(), route_id)

    route_id, warnings = run(body)
    for warning in warnings:  # the row is added all the same: the operator may mean it
        stderr.print(Text("warning: ", style="bold yellow") + Text(warning + "."))
    if as_json:
        print_json({"id": route_id, "warnings": warnings})
    else:
        stdout.print(str(route_id))


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The route table in evaluation order, with each row's mode, what it fires on, and the
    earlier row that shadows it."""
    cli = context(ctx)

    async def body() -> list[RouteView]:
        async with services_for(cli) as services:
            return await services.routes.list_routes()

    views = run(body)
    if as_json:
        print_json([v.to_dict() for v in views])
        return
    rows = table(
        "id",
        "seq",
        "match",
        "target",
        "mode",
        "fires on",
        "shadowed by",
        keep=("id", "seq", "mode", "shadowed by"),
    )
    for view in views:
        rows.add_row(
            str(view.id),
            str(view.seq),
            view.match or "(every message)",
            view.target,
            view.mode,
            view.fires_on,
            "·" if view.shadowed_by is None else f"row {view.shadowed_by}",
        )
    stdout.print(rows)


@app.command("rm")
def rm(
    ctx: typer.Context,
    route_id: Annotated[int, typer.Argument(help="The route's id.")],
    dry_run: DryRunOption = False,
    limit: LimitOption = DEFAULT_PREVIEW,
    as_json: JsonOption = False,
) -> None:
    """Remove a route."""
    cli = context(ctx)
    if dry_run:

        async def preview() -> RoutePreview:
            async with services_for(cli) as services:
                return await services.routes.preview_delete(route_id, limit=limit)

        _show_preview(run(preview), as_json)
        return

    async def body() -> RouteRecord:
        async with services_for(cli) as services:
            return await services.routes.delete_route(route_id, actor=actor())

    record = run(body)
    if as_json:
        print_json(
            {"id": record.id, "seq": record.seq, "match": record.match, "target": record.target}
        )
    else:
        stdout.print(f"Removed route {record.id}")


@app.command("set")
def set_(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A JSON array of {seq, match, target}; - for stdin.")],
    scope: Annotated[
        str | None, typer.Option(help="Replace only the rows targeting inside this folder.")
    ] = None,
    dry_run: DryRunOption = False,
    limit: LimitOption = DEFAULT_PREVIEW,
    as_json: JsonOption = False,
) -> None:
    """Replace the whole route table atomically (or only the rows under --scope)."""
    cli = context(ctx)
    rows = _read_rows(file)
    if dry_run:
        _preview_rows(cli, rows, scope, limit, as_json)
        return

    async def body() -> list[RouteView]:
        async with services_for(cli) as services:
            return await services.routes.set_routes(rows, actor=actor(), within=scope)

    views = run(body)
    if as_json:
        print_json([v.to_dict() for v in views])
    else:
        stdout.print(f"The route table now has {len(views)} row(s).")


@app.command("preview")
def preview(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Argument(help="A proposed table: a JSON array of {seq, match, target}; - for stdin."),
    ],
    scope: Annotated[
        str | None, typer.Option(help="The rows are only those targeting inside this folder.")
    ] = None,
    limit: LimitOption = DEFAULT_PREVIEW,
    as_json: JsonOption = False,
) -> None:
    """What a proposed table would do to the last --limit real messages: those whose action,
    folder or topic would change. Changes nothing."""
    _preview_rows(context(ctx), _read_rows(file), scope, limit, as_json)


def _preview_rows(cli: CliContext, rows: Any, scope: str | None, limit: int, as_json: bool) -> None:
    async def body() -> RoutePreview:
        async with services_for(cli) as services:
            return await services.routes.preview_routes(rows, within=scope, limit=limit)

    _show_preview(run(body), as_json)


@app.command("explain")
def explain(
    ctx: typer.Context,
    chat_jid: Annotated[str, typer.Option("--chat-jid", help="e.g. telegram:group/5")],
    sender: Annotated[str, typer.Option("--sender", help="e.g. telegram:user/42")],
    text: Annotated[str, typer.Option("--text", help="The message text.")] = "",
    verb: Annotated[str, typer.Option("--verb", help="message, post, reply...")] = "message",
    topic: Annotated[str, typer.Option("--topic", help="The platform's native thread.")] = "",
    reply_to: Annotated[
        str | None, typer.Option("--reply-to", help="Id of the message it replies to.")
    ] = None,
    mentioned: Annotated[
        bool, typer.Option("--mentioned", help="The platform says the bot was mentioned.")
    ] = False,
    is_dm: Annotated[
        bool, typer.Option("--dm", help="A direct message (admitted by [access] dm_policy).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The decision for a hypothetical message, with the reason trail. Changes nothing."""
    cli = context(ctx)

    async def body() -> Decision:
        message = build_inbound(
            chat_jid=chat_jid,
            sender=sender,
            text=text,
            verb=verb,
            topic=topic,
            reply_to=reply_to,
            mentioned=mentioned,
            is_dm=is_dm,
        )
        async with services_for(cli) as services:
            services.ingest.validate(message, operator=True)
            return await services.router.explain(message)

    decision = run(body)
    if as_json:
        print_json(decision.to_dict())
    else:
        print_decision(decision)


@app.command("history")
def history(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 20,
    as_json: JsonOption = False,
) -> None:
    """Who changed the route table, when, and how (newest first)."""
    cli = context(ctx)

    async def body() -> list[RouteAuditRecord]:
        async with services_for(cli) as services:
            return await services.history.route_changes(limit=limit)

    entries = run(body)
    if as_json:
        print_json([route_change_to_dict(e) for e in entries])
        return
    rows = table("time", "actor", "action", "route", "change", keep=("time", "route"))
    for e in entries:
        rows.add_row(
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.actor,
            e.action,
            "·" if e.route_id is None else str(e.route_id),
            _change(e),
        )
    stdout.print(rows)


def _change(entry: RouteAuditRecord) -> str:
    def show(row: Any) -> str:
        return f"{row.get('seq')} {row.get('match') or '(every message)'} → {row.get('target')}"

    if entry.action == "add" and isinstance(entry.after, dict):
        return "+ " + show(entry.after)
    if entry.action == "delete" and isinstance(entry.before, dict):
        return "- " + show(entry.before)
    before = len(entry.before) if isinstance(entry.before, list) else 0
    after = len(entry.after) if isinstance(entry.after, list) else 0
    return f"{before} row(s) → {after} row(s)"


def _read_rows(file: str) -> Any:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"Cannot read {file}: {exc}.")
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{file} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.")
    if not isinstance(rows, list):
        fail(f"{file} must hold a JSON array of {{seq, match, target}} objects.")
    return rows
