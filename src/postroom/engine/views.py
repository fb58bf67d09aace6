"""The public JSON objects of stored things (INTERFACES §4), shared by the CLI and the API."""

from __future__ import annotations

from typing import Any

from postroom.core.messages import StoredMessage
from postroom.store.records import (
    DeliveryRecord,
    DropRecord,
    RouteAuditRecord,
    RunRecord,
    RunSummary,
)

__all__ = [
    "delivery_record_to_dict",
    "drop_to_dict",
    "message_to_dict",
    "route_change_to_dict",
    "run_summary_to_dict",
    "run_to_dict",
]


def message_to_dict(message: StoredMessage) -> dict[str, Any]:
    return {
        "id": message.id,
        "chat_jid": message.chat_jid,
        "seq": message.seq,
        "sender": message.sender,
        "sender_name": message.sender_name,
        "content": message.content,
        "timestamp": message.timestamp.isoformat(),
        "message_type": message.message_type.value,
        "verb": message.verb,
        "topic": message.topic,
        "reply_to": message.reply_to,
        "routed_to": message.routed_to,
        "observed": message.observed,
        "run_id": message.run_id,
        "metadata": dict(message.metadata),
    }


def drop_to_dict(drop: DropRecord) -> dict[str, Any]:
    return {
        "id": drop.id,
        "chat_jid": drop.chat_jid,
        "sender": drop.sender,
        "verb": drop.verb,
        "reason": drop.reason,
        "time": drop.time.isoformat(),
    }


def run_to_dict(run: RunRecord) -> dict[str, Any]:
    """The public run object: the exact request and the outcome."""
    return {
        "id": run.id,
        "job_id": run.job_id,
        "folder": run.folder,
        "provider": run.provider,
        "model": run.model,
        "account": run.account,
        "system": run.system,
        "messages": run.messages,
        "tools": run.tools,
        "output_raw": run.output_raw,
        "output": run.output,
        "usage": run.usage,
        "cost": run.cost,
        "duration_ms": run.duration_ms,
        "outcome": run.outcome,
        "error": run.error,
        "skills": run.skills,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def route_change_to_dict(entry: RouteAuditRecord) -> dict[str, Any]:
    """One write of the route table: who, when, what it held before and after."""
    return {
        "id": entry.id,
        "time": entry.at.isoformat(),
        "actor": entry.actor,
        "action": entry.action,
        "route_id": entry.route_id,
        "before": entry.before,
        "after": entry.after,
    }


def run_summary_to_dict(run: RunSummary) -> dict[str, Any]:
    """A run without its request and output (``runs list``, ``GET /api/v1/runs``); ``cost`` is
    null for a model without a price."""
    return {
        "id": run.id,
        "job_id": run.job_id,
        "folder": run.folder,
        "provider": run.provider,
        "model": run.model,
        "usage": run.usage,
        "cost": run.cost,
        "duration_ms": run.duration_ms,
        "outcome": run.outcome,
        "error": run.error,
        "purpose": run.purpose,
        "started_at": run.started_at.isoformat(),
    }


def delivery_record_to_dict(delivery: DeliveryRecord) -> dict[str, Any]:
    """The public delivery object: one outbox row (one chunk for one chat) and its attempts."""
    return {
        "id": delivery.id,
        "message_id": delivery.message_id,
        "chat_jid": delivery.chat_jid,
        "chunk": delivery.chunk,
        "chunks": delivery.chunks,
        "kind": delivery.kind,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_try": delivery.next_try.isoformat(),
        "last_error": delivery.last_error,
        "platform_message_id": delivery.platform_message_id,
        "created_at": delivery.created_at.isoformat(),
        "sent_at": delivery.sent_at.isoformat() if delivery.sent_at else None,
    }
