"""What a model sees: the message list and the system prompt of a run (MESSAGES §4).

The history is rendered from stored rows: ``host`` and ``trace`` rows never enter it, commands
never do, a user row contributes the text after its inline prefix (``metadata.routed_content``),
and consecutive observed rows become one user block of ``[sender_name] text`` lines. System
notices are not stored: they are recomputed for each run and appended to the system prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postroom.core.attachments import (
    AttachmentPolicy,
    Blob,
    MediaPart,
    attachment_refs,
    render_attachments,
)
from postroom.core.jid import split_jid
from postroom.core.messages import CONTEXT_TYPES, MessageType, StoredMessage

__all__ = [
    "SUMMARY_BRIDGE",
    "ContextMessage",
    "ToolCall",
    "arrange_history",
    "attachment_hashes",
    "bridge_summary",
    "chat_kind",
    "format_messages_for_sdk",
    "render_system_prompt",
    "system_notices",
]

_GROUP_ROOMS = ("group/", "guild/", "room/")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model asking to run one of its tools."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """One entry of a run's message list, before any provider's own mapping.

    Roles from the stored history: ``user``, ``assistant``, ``system`` (a stored system row)
    and ``tool_result`` (a stored command output, with ``exit_code``). Roles inside one run's
    tool loop: ``assistant`` with ``tool_calls``, then one ``tool`` message per call with its
    ``tool_call_id`` (``is_error`` when the tool failed). Providers map each role to their API's
    convention (a user block labelled ``[system]`` where an API has no such role).
    """

    role: str
    content: str
    exit_code: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    #: Images and documents sent beside the text (user messages only).
    media: tuple[MediaPart, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.media:
            # The run record names each file by its hash; the bytes stay in their blob.
            out["attachments"] = [part.to_record() for part in self.media]
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
            out["tool_name"] = self.tool_name
        if self.is_error:
            out["is_error"] = True
        return out


def chat_kind(chat_jid: str) -> str:
    """``direct``, ``group``, ``operator`` or ``task``, read off the JID (ROUTING §1)."""
    platform, room = split_jid(chat_jid)
    if platform == "tui":
        return "operator"
    if platform == "task":
        return "task"
    if platform == "slack":
        return "direct" if "/dm/" in room else "group"
    if platform in ("hook", "matrix") or room.startswith(_GROUP_ROOMS):
        return "group"
    return "direct"


def arrange_history(
    messages: Sequence[StoredMessage],
    *,
    turn: int,
    answered_by: Mapping[tuple[str, str], int],
    pending: AbstractSet[int],
    stopped: AbstractSet[int] = frozenset(),
) -> list[StoredMessage]:
    """The rows one turn sees, in the order the exchange happened from the model's side.

    User rows another unfinished turn will answer (*pending*) are left out: that turn answers
    them, with its own context. So are the rows of a turn that was *stopped* (``/stop``, or
    cancelled by the operator): the cancellation answered them, and no later turn may take them
    up as questions still open. An answer (``metadata.job_id``) is placed right after the last
    row its turn answered, not where it was stored: while a turn runs, later messages are
    stored before its answer, and the next turn must see the answer before them.
    """
    left_out = pending | stopped if stopped else pending
    kept = [
        m
        for m in messages
        if not (
            m.message_type is MessageType.USER
            and (job := answered_by.get((m.id, m.chat_jid))) is not None
            and job != turn
            and job in left_out
        )
    ]
    last_row_of: dict[int, int] = {}
    for index, message in enumerate(kept):
        job = answered_by.get((message.id, message.chat_jid))
        if job is not None and message.message_type is MessageType.USER:
            last_row_of[job] = index
    answers: dict[int, list[StoredMessage]] = {}
    for message in kept:
        job = _answer_job(message)
        if job is not None and job in last_row_of:
            answers.setdefault(job, []).append(message)
    after: dict[int, list[int]] = {}
    for job, index in last_row_of.items():
        after.setdefault(index, []).append(job)
    arranged: list[StoredMessage] = []
    for index, message in enumerate(kept):
        job = _answer_job(message)
        if job is not None and job in last_row_of:
            continue
        arranged.append(message)
        for answered in sorted(after.get(index, ())):
            arranged.extend(answers.get(answered, ()))
    return arranged


def _answer_job(message: StoredMessage) -> int | None:
    if message.message_type is not MessageType.ASSISTANT:
        return None
    job = message.metadata.get("job_id")
    return job if isinstance(job, int) else None


def format_messages_for_sdk(
    messages: Iterable[StoredMessage],
    *,
    multi_party: bool | None = None,
    blobs: Mapping[str, Blob] | None = None,
    policy: AttachmentPolicy | None = None,
) -> list[ContextMessage]:
    """The message list of a run, from stored rows in ``seq`` order.

    Filters ``host`` and ``trace`` rows and commands. With *multi_party* (by default: when the
    rows hold more than one human sender, or observed lines, which always carry their names)
    every user row is prefixed ``[sender_name]``, the one that fires the turn included, so the
    model can tell who asked (MESSAGES §5). A user row's attachments follow its text: media
    parts for the images of the newest ``policy.max_images`` rows that carry some and for
    documents, text files inlined, a placeholder line for the rest (see
    :func:`~postroom.core.attachments.render_attachments`; *blobs* holds the bytes by hash).
    """
    rows = [
        m for m in messages if m.message_type in CONTEXT_TYPES and not m.metadata.get("command")
    ]
    if multi_party is None:
        users = [m for m in rows if m.message_type is MessageType.USER]
        multi_party = any(m.observed for m in users) or len({m.sender for m in users}) > 1
    policy = policy or AttachmentPolicy()
    with_images = _rows_with_images(rows, policy.max_images)
    out: list[ContextMessage] = []
    observed: list[str] = []
    observed_media: list[MediaPart] = []

    def flush() -> None:
        if observed:
            out.append(ContextMessage("user", "\n".join(observed), media=tuple(observed_media)))
            observed.clear()
            observed_media.clear()

    for index, row in enumerate(rows):
        kind = row.message_type
        lines: list[str] = []
        media: list[MediaPart] = []
        if kind is MessageType.USER:
            lines, media = render_attachments(
                attachment_refs(row.metadata), blobs or {}, policy, images=index in with_images
            )
        if kind is MessageType.USER and row.observed:
            observed.append("\n".join([f"[{_name(row)}] {row.content}", *lines]))
            observed_media.extend(media)
            continue
        flush()
        if kind is MessageType.USER:
            text = str(row.metadata.get("routed_content") or row.content)
            text = "\n".join([f"[{_name(row)}] {text}" if multi_party else text, *lines])
            out.append(ContextMessage("user", text, media=tuple(media)))
        elif kind is MessageType.ASSISTANT:
            out.append(ContextMessage("assistant", row.content))
        elif kind is MessageType.SYSTEM:
            out.append(ContextMessage("system", row.content))
        else:
            code = row.metadata.get("exit_code", 0)
            out.append(
                ContextMessage("tool_result", row.content, code if isinstance(code, int) else 1)
            )
    flush()
    return out


def _rows_with_images(rows: Sequence[StoredMessage], limit: int) -> set[int]:
    """The indexes of the newest *limit* user rows that carry an image."""
    found: set[int] = set()
    for index in range(len(rows) - 1, -1, -1):
        if len(found) >= limit:
            break
        row = rows[index]
        if row.message_type is MessageType.USER and any(
            ref.sha256 and ref.mime.startswith("image/") for ref in attachment_refs(row.metadata)
        ):
            found.add(index)
    return found


def attachment_hashes(messages: Sequence[StoredMessage], policy: AttachmentPolicy) -> set[str]:
    """The blobs a context of *messages* may send: the images it would send, and every
    other file (a picture it would only name is never read)."""
    rows = [
        m for m in messages if m.message_type in CONTEXT_TYPES and not m.metadata.get("command")
    ]
    with_images = _rows_with_images(rows, policy.max_images) if policy.vision else set()
    wanted: set[str] = set()
    for index, row in enumerate(rows):
        if row.message_type is not MessageType.USER:
            continue
        for ref in attachment_refs(row.metadata):
            image = ref.mime.startswith("image/")
            if (
                ref.sha256
                and ref.kind not in ("voice", "audio")
                and (not image or index in with_images)
            ):
                wanted.add(ref.sha256)
    return wanted


def _name(row: StoredMessage) -> str:
    return row.sender_name or row.sender


def system_notices(
    *, now: datetime, chat_jid: str, folder: str, topic: str = "", extra: Sequence[str] = ()
) -> list[str]:
    """The ephemeral notices of one run: never stored, appended last to the system prompt."""
    notices = [
        f"Current time: {now.strftime('%Y-%m-%d %H:%M')} UTC ({now.strftime('%A')}).",
        f"Chat: {chat_jid} ({chat_kind(chat_jid)}).",
        f"You are the agent in folder {folder}.",
    ]
    if topic:
        notices.append(f"Topic: {topic}.")
    notices.extend(extra)
    return notices


def render_system_prompt(
    persona: str,
    *,
    memory: Sequence[str] = (),
    state: Sequence[str] = (),
    summary: str = "",
    skills: Sequence[str] = (),
    notices: Sequence[str] = (),
) -> str:
    """Persona, then memory, state, the compaction summary and the skills chosen for the run,
    then the notices (last)."""
    parts = [persona.strip()] if persona.strip() else []
    if memory:
        parts.append("What you remember:\n" + "\n".join(f"- {fact}" for fact in memory))
    if state:
        parts.append("State:\n" + "\n".join(f"- {entry}" for entry in state))
    if summary:
        parts.append("Summary of the earlier conversation:\n" + summary.strip())
    if skills:
        parts.append("Skills for this request:\n\n" + "\n\n".join(skills))
    if notices:
        parts.append("\n".join(notices))
    return "\n\n".join(parts)


SUMMARY_BRIDGE = "The conversation before this point is summarized in the system prompt."


def bridge_summary(messages: list[ContextMessage], *, summarized: bool) -> list[ContextMessage]:
    """After a compaction the kept window may open with an answer; providers want a history
    that opens with the other side, so a ``system`` row says where the rest went (rather than
    dropping the answer, which would leave it in neither the summary nor the messages)."""
    if summarized and messages and messages[0].role == "assistant":
        return [ContextMessage("system", SUMMARY_BRIDGE), *messages]
    return messages
