"""``postroom send``, ``postroom messages`` and ``postroom drops``."""

from __future__ import annotations

from typing import Annotated

import typer

from postroom.app.server_client import SERVE_FILE, running_server
from postroom.cli.common import (
    CliContext,
    context,
    fail,
    print_json,
    run,
    services_for,
    user_errors,
)
from postroom.cli.render import print_decision, print_drops, print_messages
from postroom.core.errors import PostroomError
from postroom.core.messages import StoredMessage
from postroom.engine.inbound import build_inbound
from postroom.engine.ingest import IngestResult
from postroom.engine.views import drop_to_dict, message_to_dict
from postroom.store.records import DropRecord, JobRecord, JobStatus

__all__ = ["register"]

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def send(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The message text.")],
    chat_jid: Annotated[str, typer.Option("--chat-jid", help="e.g. telegram:group/5")],
    sender: Annotated[str, typer.Option("--sender", help="e.g. telegram:user/42")],
    sender_name: Annotated[str, typer.Option("--sender-name")] = "",
    message_id: Annotated[
        str | None, typer.Option("--id", help="The platform's message id (for dedupe).")
    ] = None,
    verb: Annotated[str, typer.Option("--verb")] = "message",
    topic: Annotated[str, typer.Option("--topic", help="The platform's native thread.")] = "",
    reply_to: Annotated[str | None, typer.Option("--reply-to")] = None,
    mentioned: Annotated[bool, typer.Option("--mentioned")] = False,
    is_dm: Annotated[
        bool, typer.Option("--dm", help="A direct message (admitted by [access] dm_policy).")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Also wait for the answer(s) of the running server; print them."
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, max=86_400, help="How long --wait waits (seconds).")
    ] = 120.0,
    as_json: JsonOption = False,
) -> None:
    """Inject a message as if it arrived: it is stored and routed now. Prints the decision
    (with --wait, also the answers; --json: {"decision": …, "answers": […]})."""
    cli = context(ctx)
    if wait:
        with user_errors():
            _require_server(cli)

    async def body() -> IngestResult:
        message = build_inbound(
            chat_jid=chat_jid,
            sender=sender,
            text=text,
            verb=verb,
            topic=topic,
            reply_to=reply_to,
            mentioned=mentioned,
            is_dm=is_dm,
            message_id=message_id,
            sender_name=sender_name,
        )
        async with services_for(cli) as services:
            return await services.ingest.ingest(message, operator=True)

    result = run(body)
    if wait:
        _wait_for_answers(cli, result, timeout_s=timeout, as_json=as_json)
        return
    if as_json:
        print_json(result.decision.to_dict())
        return
    _print_sent(result)


def _print_sent(result: IngestResult) -> None:
    print_decision(result.decision)
    if result.duplicate:
        typer.echo(f"(duplicate of message {result.id}: nothing new happened)")
    elif result.seq is None:
        typer.echo("(not stored: recorded in postroom drops)")


def _require_server(cli: CliContext) -> None:
    if running_server(cli.data_dir) is None:
        raise PostroomError(
            f"--wait needs a running server, and none runs on {cli.data_dir} (no live server in "
            f"{SERVE_FILE}): start postroom serve, or leave out --wait."
        )


def _wait_for_answers(
    cli: CliContext, result: IngestResult, *, timeout_s: float, as_json: bool
) -> None:
    """The server runs the turn; its row is watched until it ends, then its answers print."""
    job_id = result.decision.job_id

    async def body() -> tuple[JobRecord | None, list[StoredMessage]]:
        if job_id is None:
            return None, []  # nothing fired: the decision is the whole answer
        async with services_for(cli) as services:
            try:
                job = await services.turns.finished(job_id, timeout_s=timeout_s)
            except TimeoutError:
                current = await services.turns.get_job(job_id)
                raise PostroomError(
                    f"No answer within {timeout_s:g} s: job {job_id} is still "
                    f"{current.status.value}."
                ) from None
            answers = await services.history.answers(
                job_id, chat_jid=result.chat_jid, after_seq=result.seq or 0
            )
        return job, answers

    job, answers = run(body)
    if as_json:
        print_json(
            {
                "decision": result.decision.to_dict(),
                "answers": [message_to_dict(m) for m in answers],
            }
        )
    else:
        _print_sent(result)
        if job is not None:
            print_messages(answers)
    if job is not None and job.status is not JobStatus.DONE:
        fail(f"Job {job.id} {job.status.value}: {job.last_error or 'no reason recorded'}.")


def messages(
    ctx: typer.Context,
    chat_jid: Annotated[str | None, typer.Option("--chat-jid")] = None,
    folder: Annotated[str | None, typer.Option("--folder")] = None,
    after_seq: Annotated[int | None, typer.Option("--after-seq")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
    as_json: JsonOption = False,
) -> None:
    """Read the stored history, every message type, oldest first."""
    if chat_jid is None and folder is None:
        fail("Give --chat-jid or --folder (or both).")
    cli = context(ctx)

    async def body() -> list[StoredMessage]:
        async with services_for(cli) as services:
            return await services.history.messages(
                chat_jid=chat_jid, folder=folder, after_seq=after_seq, limit=limit
            )

    found = run(body)
    if as_json:
        print_json([message_to_dict(m) for m in found])
    else:
        print_messages(found)


def drops(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
    as_json: JsonOption = False,
) -> None:
    """Messages nobody handled, with the reason (their content was not stored)."""
    cli = context(ctx)

    async def body() -> list[DropRecord]:
        async with services_for(cli) as services:
            return await services.history.drops(limit=limit)

    found = run(body)
    if as_json:
        print_json([drop_to_dict(d) for d in found])
    else:
        print_drops(found)


def register(app: typer.Typer) -> None:
    app.command("send")(send)
    app.command("messages")(messages)
    app.command("drops")(drops)
