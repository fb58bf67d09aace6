"""How the CLI shows decisions and messages to a person (MESSAGES §5: every type distinct)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from postroom.cli.common import stdout
from postroom.core.decision import Action, Decision
from postroom.core.messages import MessageType, StoredMessage
from postroom.engine.preview import RoutePreview
from postroom.store.records import DropRecord

__all__ = ["message_line", "print_decision", "print_drops", "print_messages", "print_preview"]

_ACTION_STYLE = {
    Action.FIRE: "bold green",
    Action.OBSERVE: "cyan",
    Action.COMMAND: "magenta",
    Action.IGNORE: "yellow",
}


def print_decision(decision: Decision) -> None:
    head = Text()
    head.append(decision.action.value, style=_ACTION_STYLE[decision.action])
    if decision.folder:
        head.append(f" → {decision.folder}")
    head.append(f"   (layer {decision.layer.value}", style="dim")
    if decision.route_id is not None:
        head.append(f", row {decision.route_id}", style="dim")
    head.append(")", style="dim")
    stdout.print(head)
    if decision.topic:
        stdout.print(f"topic:   {decision.topic}")
    if decision.inline:
        stdout.print(f"inline:  {decision.inline}")
    if decision.content is not None:
        stdout.print(Text(f"content: {decision.content!r}"))
    if decision.ack:
        stdout.print(Text(f"ack:     🏠 {decision.ack}"))
    if decision.job_id is not None:
        stdout.print(f"job:     {decision.job_id}")
    stdout.print(Text(f"reason:  {decision.reason}", style="dim"))


def print_preview(preview: RoutePreview) -> None:
    """What a route change would do: the messages whose decision would change."""
    count = len(preview.messages)
    stdout.print(
        f"Examined {preview.examined} recent message(s); "
        + (f"{count} would be routed differently:" if count else "none would change.")
    )
    if not count:
        return
    table = Table("message", "chat", "text", "now", "after the change")
    for item in preview.messages:
        text = "(dropped: not stored)" if item.content is None else item.content
        table.add_row(item.id, item.chat_jid, text, _decided(item.before), _decided(item.after))
    stdout.print(table)


def _decided(decision: Decision) -> str:
    where = f" → {decision.folder}" if decision.folder else ""
    topic = f" #{decision.topic}" if decision.topic else ""
    return f"{decision.action.value}{where}{topic}"


def message_line(message: StoredMessage) -> Text:
    """One message as a line: seq, time, a marker per type, who, and the text."""
    line = Text()
    line.append(f"{message.seq:>6} ", style="dim")
    line.append(message.timestamp.strftime("%Y-%m-%d %H:%M:%S "), style="dim")
    kind = message.message_type
    content = message.content
    if kind is MessageType.USER:
        who = message.sender_name or message.sender
        line.append(f"{who}", style="bold")
        line.append(f" <{message.sender}>", style="dim")
        flags = []
        if message.metadata.get("command"):
            flags.append("command")
        if message.observed:
            flags.append("observed")
        if message.routed_to:
            flags.append(f"→ {message.routed_to}")
        if message.topic:
            flags.append(f"#{message.topic}")
        if flags:
            line.append(f" [{', '.join(flags)}]", style="cyan")
        line.append(f": {content}")
    elif kind is MessageType.ASSISTANT:
        line.append(f"🤖 {message.routed_to or 'assistant'}", style="bold green")
        line.append(f": {content}")
    elif kind is MessageType.SYSTEM:
        line.append(f"⚙️  system: {content}", style="blue")
    elif kind is MessageType.TOOL_RESULT:
        ok = message.metadata.get("exit_code", 0) == 0
        line.append(f"🔧 {'✅' if ok else '❌'} {content}", style="yellow")
    elif kind is MessageType.HOST:
        line.append(f"🏠 {content}", style="magenta")
    else:
        first = content.splitlines()[0] if content else ""
        line.append(f"· trace ({message.sender}): {first[:80]}", style="dim italic")
    return line


def print_messages(messages: Iterable[StoredMessage]) -> None:
    count = 0
    for message in messages:
        stdout.print(message_line(message))
        count += 1
    if count == 0:
        stdout.print("No messages.", style="dim")


def print_drops(drops: Iterable[DropRecord]) -> None:
    count = 0
    for drop in drops:
        stdout.print(
            Text(
                f"{drop.time.strftime('%Y-%m-%d %H:%M:%S')}  {drop.reason:<15} "
                f"{drop.chat_jid}  from {drop.sender} ({drop.verb})  id {drop.id}"
            )
        )
        count += 1
    if count == 0:
        stdout.print("No dropped messages.", style="dim")
