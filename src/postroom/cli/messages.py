"""``postroom send``, ``postroom messages`` and ``postroom drops``."""

from __future__ import annotations

from typing import Annotated

import typer

from postroom.cli.common import context, fail, print_json, run, services_for
from postroom.cli.render import print_decision, print_drops, print_messages
from postroom.core.messages import StoredMessage
from postroom.engine.inbound import build_inbound
from postroom.engine.ingest import IngestResult
from postroom.engine.views import drop_to_dict, message_to_dict
from postroom.store.records import DropRecord

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
    as_json: JsonOption = False,
) -> None:
    """Inject a message as if it arrived: it is stored and routed now. Prints the decision."""
    cli = context(ctx)

    async def body() -> IngestResult:
        message = build_inbound(
            chat_jid=chat_jid,
            sender=sender,
            text=text,
            verb=verb,
            topic=topic,
            reply_to=reply_to,
            mentioned=mentioned,
            message_id=message_id,
            sender_name=sender_name,
        )
        async with services_for(cli) as services:
            return await services.ingest.ingest(message, operator=True)

    result = run(body)
    if as_json:
        print_json(result.decision.to_dict())
        return
    print_decision(result.decision)
    if result.duplicate:
        typer.echo(f"(duplicate of message {result.id}: nothing new happened)")
    elif result.seq is None:
        typer.echo("(not stored: recorded in postroom drops)")


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
