"""Resolution of one message: ``(message, route table, chat state, folders) → Decision``.

The order of ROUTING §3: a message the gateway wrote is never routed; the home folder ``H``
comes from the operator chat or the route table (a miss drops the message); the topic is chosen;
then the first layer that applies decides — engagement, reply chain, ``#observe`` (which stops
here: no steering for a message that would only be observed), sticky group, the route itself —
each layer's folder subject to the ``H`` check; then a whole-message command is carried out, or
an inline prefix applied.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from postroom.core.decision import (
    Action,
    ChatState,
    Command,
    CommandKind,
    Decision,
    DropReason,
    Engagement,
    Layer,
    RoutingMessage,
)
from postroom.core.folders import is_within
from postroom.core.messages import MessageType, is_from_gateway
from postroom.core.route_index import RouteIndex
from postroom.core.steering import (
    NO_STEERING,
    Steering,
    SteeringKind,
    normalize_topic,
    parse_steering,
)
from postroom.core.target import Mode
from postroom.core.trigger import Trigger, effective_verb

__all__ = ["ACK_RESET", "ACK_TOPIC_RESET", "resolve"]

ACK_RESET = "routing reset to default"
ACK_TOPIC_RESET = "topic reset to default"
_OPERATOR_PLATFORM = "tui"


def resolve(
    message: RoutingMessage,
    table: RouteIndex,
    chat: ChatState,
    folders: Set[str],
    *,
    now: datetime,
    trigger: Trigger,
) -> Decision:
    """Decide where *message* goes. Pure: reads only its arguments, never raises on content.

    *folders* is the set of existing folder paths. *now* is compared with engagement expiry.
    """
    if message.is_from_me or message.message_type is not MessageType.USER:
        why = (
            "the bot's own message (is_from_me)"
            if message.message_type is MessageType.USER
            else "written by the gateway itself"
        )
        return Decision(
            Action.IGNORE,
            Layer.OWN,
            trail=(f"{why}: stored, never routed or steered",),
            verb=message.verb or "message",
        )
    content = message.content
    reply = message.reply
    steering = parse_steering(content, trigger)
    verb = message.verb or "message"
    # Only these can make a mention; most messages skip the call.
    if steering.calls_us or message.mentioned or reply is not None:
        verb = effective_verb(
            verb,
            content,
            trigger,
            message.mentioned,
            reply is not None and is_from_gateway(reply.message_type, reply.is_from_me),
            steering.calls_us,
        )
    platform, _, room = message.chat_jid.partition(":")
    trail: list[str] = []

    # Step 0/1: the home folder H.
    route_id: int | None
    if platform == _OPERATOR_PLATFORM:
        home = room
        if home not in folders:
            return _drop(
                DropReason.FOLDER_MISSING,
                f"operator chat {message.chat_jid} names no existing folder",
                verb,
            )
        home_mode, pinned, route_id, template_parent = Mode.FIRE, "", None, None
        home_layer = Layer.OPERATOR
        trail.append(f"operator chat addressed to {home}")
    else:
        fields = (platform, room, message.chat_jid, message.sender, verb)
        rank, home, skipped_ids = table.lookup(fields)
        if skipped_ids:
            for skipped in skipped_ids:
                trail.append(f"row {skipped} skipped: {{sender}} of {message.sender!r} is empty")
        if rank < 0:
            return _miss(message, steering, verb, trail)
        route = table.routes[rank]
        target = route.target
        route_id = route.id
        home_mode, pinned = target.mode, target.topic
        home_layer = Layer.ROUTE
        template_parent = target.template_parent
        if template_parent is not None:
            trail.append(f"{table.descriptions[rank]} = {home}")
        else:
            trail.append(table.descriptions[rank])
        if home not in folders and (
            template_parent is None or not _parent_exists(template_parent, folders)
        ):
            missing = home if template_parent is None else (template_parent or home)
            return _drop(
                DropReason.FOLDER_MISSING,
                f"{'; '.join(trail)}; folder {missing} does not exist",
                verb,
                route_id,
            )

    # Step 2: the topic. The inline #topic only counts if the message fires (checked below).
    plain = steering is NO_STEERING  # most messages: no command, no prefix
    inline_topic = (
        steering.arg if not plain and steering.kind is SteeringKind.INLINE_TOPIC else None
    )
    native = normalize_topic(message.native_topic) if message.native_topic else ""
    topic = inline_topic or chat.sticky_topic or pinned or native

    # Step 3: layers.
    folder: str | None = None
    layer = home_layer
    engaged = _engagement(chat, topic, now) if chat.engagements else None
    if engaged is not None:
        if _usable(engaged.folder, home, folders):
            folder, layer = engaged.folder, Layer.ENGAGEMENT
            trail.append(f"engaged to {engaged.folder} until {_clock(engaged.until)}")
        else:
            trail.append(
                f"engagement to {engaged.folder} skipped: {_why_not(engaged.folder, home, folders)}"
            )
    if folder is None and reply is not None and reply.message_type is MessageType.ASSISTANT:
        origin = reply.routed_to
        if origin:
            if _usable(origin, home, folders):
                folder, layer = origin, Layer.REPLY_CHAIN
                if inline_topic is None:
                    topic = reply.topic
                trail.append(f"reply to a message from {origin}")
            else:
                trail.append(f"reply chain to {origin} skipped: {_why_not(origin, home, folders)}")
    if folder is None and home_mode is Mode.OBSERVE:
        observed_topic = pinned or native
        trail.append("observed: stored for context, no turn")
        # Positional, as for the fire below: observing is the other hot path.
        return Decision(
            Action.OBSERVE,
            home_layer,
            home,
            observed_topic,
            content,
            None,
            route_id,
            None,
            None,
            tuple(trail),
            verb,
        )
    if folder is None:
        sticky = chat.sticky_group
        if sticky:
            if _usable(sticky, home, folders):
                folder, layer = sticky, Layer.STICKY
                trail.append(f"sticky group {sticky}")
            else:
                trail.append(f"sticky group {sticky} skipped: {_why_not(sticky, home, folders)}")
    if folder is None:
        folder = home

    inline: str | None = None
    if not plain:
        # Whole-message commands (the message would fire).
        if steering.is_command:
            decision = _command(message, steering, home, folder, topic, folders, route_id, verb)
            if decision is not None:
                return decision
        # Step 4: the inline prefix.
        if steering.kind is SteeringKind.INLINE_FOLDER:
            child = f"{folder}/{steering.arg}"
            if child in folders:
                trail.append(f"inline @{steering.arg} → {child}")
                folder, inline, content = child, f"@{steering.arg}", steering.rest
        elif inline_topic is not None:
            trail.append(f"inline #{inline_topic}")
            inline, content = f"#{inline_topic}", steering.rest
    create = template_parent is not None and folder == home and home not in folders
    if topic and inline_topic is None:
        trail.append(f"topic {topic}")
    # Positional: this is the hot path, and keyword arguments cost twice as much here.
    return Decision(
        Action.FIRE,
        layer,
        folder,
        topic,
        content,
        inline,
        route_id,
        None,  # ack
        None,  # job_id
        tuple(trail),
        verb,
        None,  # command
        None,  # drop
        template_parent if create else None,
    )


def _parent_exists(parent: str, folders: Set[str]) -> bool:
    return parent == "" or parent in folders


def _engagement(chat: ChatState, topic: str, now: datetime) -> Engagement | None:
    engagements = chat.engagements
    if not engagements:
        return None
    found = engagements.get(topic)
    if (found is None or found.until <= now) and topic:
        found = engagements.get("")
    if found is None or found.until <= now:
        return None
    return found


def _usable(folder: str, home: str, folders: Set[str]) -> bool:
    return folder in folders and is_within(folder, home)


def _why_not(folder: str, home: str, folders: Set[str]) -> str:
    if folder not in folders:
        return "folder no longer exists"
    return f"not under {home}"


def _clock(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _drop(reason: DropReason, why: str, verb: str, route_id: int | None = None) -> Decision:
    return Decision(
        Action.IGNORE, Layer.MISS, route_id=route_id, trail=(why,), verb=verb, drop=reason
    )


def _miss(message: RoutingMessage, steering: Steering, verb: str, trail: list[str]) -> Decision:
    trail.append(f"no route matched {message.chat_jid}")
    if steering.kind is SteeringKind.SLASH and steering.arg == "chatid":
        trail.append("/chatid answered anyway")
        return Decision(
            Action.COMMAND,
            Layer.MISS,
            ack=f"chat id: {message.chat_jid}",
            trail=tuple(trail),
            verb=verb,
            command=Command(CommandKind.CHATID),
            drop=DropReason.NO_ROUTE,
        )
    return Decision(
        Action.IGNORE, Layer.MISS, trail=tuple(trail), verb=verb, drop=DropReason.NO_ROUTE
    )


def _command(
    message: RoutingMessage,
    steering: Steering,
    home: str,
    folder: str,
    topic: str,
    folders: Set[str],
    route_id: int | None,
    verb: str,
) -> Decision | None:
    """Carry out a whole-message command; ``None`` when ``@path`` names no folder (plain text)."""
    kind = steering.kind
    arg = steering.arg
    command: Command
    if kind is SteeringKind.STICKY_CLEAR:
        command, ack, why = Command(CommandKind.CLEAR_STICKY), ACK_RESET, "sticky group cleared"
    elif kind is SteeringKind.STICKY_SET:
        relative = f"{home}/{arg}"
        if relative in folders:
            named = relative
        elif arg in folders:
            named = arg
        else:
            return None
        if is_within(named, home):
            command = Command(CommandKind.SET_STICKY, named)
            ack, why = f"routing → {named}", f"sticky group set to {named} (under {home})"
        else:
            command = Command(CommandKind.REFUSE_STICKY, named)
            ack = f"routing → {arg} refused: not under {home}"
            why = f"sticky group {named} refused: not under {home}"
    elif kind is SteeringKind.TOPIC_CLEAR:
        command, ack, why = (
            Command(CommandKind.CLEAR_TOPIC),
            ACK_TOPIC_RESET,
            "sticky topic cleared",
        )
    elif kind is SteeringKind.TOPIC_SET:
        command = Command(CommandKind.SET_TOPIC, topic=arg)
        ack, why = f"topic → {arg}", f"sticky topic set to {arg}"
    else:
        name = arg
        if name == "chatid":
            command, ack = Command(CommandKind.CHATID), f"chat id: {message.chat_jid}"
        elif name == "new":
            command = Command(CommandKind.NEW, folder, topic)
            suffix = f" (topic {topic})" if topic else ""
            ack = f"new conversation with {folder}{suffix}"
        elif name == "stop":
            command, ack = Command(CommandKind.STOP, folder, topic), None
        else:
            command, ack = Command(CommandKind.STATUS, folder, topic), None
        why = f"/{name} for {folder}"
    return Decision(
        Action.COMMAND,
        Layer.COMMAND,
        route_id=route_id,
        ack=ack,
        trail=(why,),
        verb=verb,
        command=command,
    )
