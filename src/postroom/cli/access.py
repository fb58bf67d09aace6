"""``postroom access``: principals and pairing (ROUTING §8)."""

from __future__ import annotations

from typing import Annotated

import typer

from postroom.cli.common import actor, context, fail, print_json, run, services_for, stdout, table
from postroom.core.access import Principal, Role
from postroom.engine.access import Approval, pairing_to_dict, principal_to_dict
from postroom.store.records import PairingRequest

__all__ = ["app"]

app = typer.Typer(
    help="Who may talk to the agents: principals (owner, member, blocked) and pairing codes.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
SenderGlob = Annotated[
    str,
    typer.Argument(help="A sender JID or glob, e.g. telegram:user/42 or telegram:*."),
]
NoteOption = Annotated[str, typer.Option("--note", help="Why, for whoever reads the list.")]


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The principals: stored ones, then [owners] senders from the configuration."""
    cli = context(ctx)

    async def body() -> list[Principal]:
        async with services_for(cli) as services:
            return await services.access.list_principals()

    found = run(body)
    if as_json:
        print_json([principal_to_dict(p) for p in found])
        return
    if not found:
        stdout.print(
            "No principals: direct messages from strangers get a pairing code (or follow "
            "[access] dm_policy), groups are admitted by their routes.",
            style="dim",
        )
        return
    lines = table("id", "pattern", "role", "note", "created", "by", keep=("id", "role", "created"))
    for p in found:
        lines.add_row(
            "config" if p.id is None else str(p.id),
            p.pattern,
            p.role.value,
            p.note or "·",
            p.created_at.strftime("%Y-%m-%d %H:%M") if p.created_at else "·",
            p.created_by or "[owners] senders",
        )
    stdout.print(lines)


@app.command("pending")
def pending(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Pairing codes waiting for a decision (approve or deny them)."""
    cli = context(ctx)

    async def body() -> list[PairingRequest]:
        async with services_for(cli) as services:
            return await services.access.list_pairings()

    found = run(body)
    if as_json:
        print_json([pairing_to_dict(r) for r in found])
        return
    if not found:
        stdout.print("No pending pairing requests.", style="dim")
        return
    lines = table("code", "sender", "name", "chat", "expires", keep=("code", "expires"))
    for r in found:
        lines.add_row(
            r.code,
            r.sender,
            r.sender_name or "·",
            r.chat_jid,
            r.expires_at.strftime("%Y-%m-%d %H:%M UTC"),
        )
    stdout.print(lines)


@app.command("approve")
def approve(
    ctx: typer.Context,
    code: Annotated[str, typer.Argument(help="The code the sender was given, e.g. ABCD-2345.")],
    as_json: JsonOption = False,
) -> None:
    """Approve a pairing code: its sender becomes a member (that sender only)."""
    cli = context(ctx)

    async def body() -> Approval:
        async with services_for(cli) as services:
            return await services.access.approve(code, actor=actor())

    done = run(body)
    if as_json:
        print_json(done.to_dict())
        return
    stdout.print(
        f"Approved {done.request.code}: {done.request.sender} is a member "
        f"(principal {done.principal.id})."
    )


@app.command("deny")
def deny(
    ctx: typer.Context,
    code: Annotated[str, typer.Argument(help="The pending code, e.g. ABCD-2345.")],
    as_json: JsonOption = False,
) -> None:
    """Deny a pairing code: the request goes, and the chat is not offered another code until
    this one would have expired."""
    cli = context(ctx)

    async def body() -> PairingRequest:
        async with services_for(cli) as services:
            return await services.access.deny(code, actor=actor())

    request = run(body)
    if as_json:
        print_json(pairing_to_dict(request))
        return
    stdout.print(f"Denied {request.code} from {request.sender}.")


@app.command("allow")
def allow(
    ctx: typer.Context,
    sender: SenderGlob,
    role: Annotated[str, typer.Option("--role", help="member or owner.")] = "member",
    note: NoteOption = "",
    as_json: JsonOption = False,
) -> None:
    """Let the senders a glob matches talk to the agents (as members, or owners)."""
    if role.strip().lower() not in (Role.MEMBER.value, Role.OWNER.value):
        fail(f"--role must be member or owner, not {role!r}; use `postroom access block` to block.")
    _put(ctx, sender, role, note, as_json)


@app.command("block")
def block(
    ctx: typer.Context,
    sender: SenderGlob,
    note: NoteOption = "",
    as_json: JsonOption = False,
) -> None:
    """Drop every message of the senders a glob matches, in groups too."""
    _put(ctx, sender, Role.BLOCKED.value, note, as_json)


@app.command("rm")
def rm(
    ctx: typer.Context,
    principal_id: Annotated[int, typer.Argument(metavar="ID", help="The principal's id.")],
    as_json: JsonOption = False,
) -> None:
    """Remove a principal: its senders follow the policies again."""
    cli = context(ctx)

    async def body() -> Principal:
        async with services_for(cli) as services:
            return await services.access.remove(principal_id, actor=actor())

    removed = run(body)
    if as_json:
        print_json(principal_to_dict(removed))
        return
    stdout.print(f"Removed principal {removed.id} ({removed.pattern}, {removed.role.value}).")


def _put(ctx: typer.Context, sender: str, role: str, note: str, as_json: bool) -> None:
    cli = context(ctx)

    async def body() -> Principal:
        async with services_for(cli) as services:
            return await services.access.add(sender, role=role, note=note, actor=actor())

    principal = run(body)
    if as_json:
        print_json(principal_to_dict(principal))
        return
    stdout.print(f"Principal {principal.id}: {principal.pattern} is {principal.role.value}.")
