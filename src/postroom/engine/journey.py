"""One inbound message's whole path (INTERFACES §4's journey): the decision and its reason,
the turn and its attempts, the runs with their model, usage and cost, the answers, and every
delivery of every answer — or, for a message nobody handled, its drop record."""

from __future__ import annotations

from typing import Any

from postroom.core.errors import NotFound
from postroom.core.folders import is_within
from postroom.core.messages import MessageType
from postroom.engine.turns import job_to_dict
from postroom.engine.views import delivery_record_to_dict, drop_to_dict, message_to_dict
from postroom.store.protocol import Store, StoreTx
from postroom.store.records import JobRecord, RunRecord

__all__ = ["ANSWER_SCAN", "JourneyService", "run_brief"]

#: How far after the message its answers are looked for, in messages of its chat.
ANSWER_SCAN = 1000


def run_brief(run: RunRecord) -> dict[str, Any]:
    """A run as the journey lists it: what it cost and how it ended."""
    return {
        "id": run.id,
        "provider": run.provider,
        "model": run.model,
        "usage": run.usage,
        "cost": run.cost,
        "outcome": run.outcome,
        "error": run.error,
        "duration_ms": run.duration_ms,
        "started_at": run.started_at.isoformat(),
    }


class JourneyService:
    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def journey(
        self, chat_jid: str, message_id: str, *, within: str | None = None
    ) -> dict[str, Any]:
        """The journey of message *message_id* of *chat_jid*; *within* a folder's tree, only
        a message routed into it."""
        async with self._store.read() as tx:
            message = await tx.get_message(message_id, chat_jid)
            if message is None:
                drop = await tx.get_drop(message_id, chat_jid)
                if drop is None or within is not None:
                    raise NotFound(f"There is no message {message_id} in {chat_jid}.")
                return {
                    "message": None,
                    "drop": drop_to_dict(drop),
                    "decision": None,
                    "jobs": [],
                    "answers": [],
                    "deliveries": [],
                }
            if within is not None and not (
                message.routed_to and is_within(message.routed_to, within)
            ):
                raise NotFound(f"There is no message {message_id} in {chat_jid}.")
            prior = await tx.prior_outcome(message_id, chat_jid)
            job = await tx.job_for_message(message_id, chat_jid)
            jobs = [job] if job is not None else []
            jobs_out = [await _job_with_runs(tx, j) for j in jobs]
            answers = await _answers(tx, jobs, chat_jid=chat_jid, after_seq=message.seq)
            deliveries: list[dict[str, Any]] = []
            for answer in answers:
                rows = await tx.list_deliveries(message_id=answer.id, limit=1000)
                deliveries.extend(delivery_record_to_dict(d) for d in rows)
        return {
            "message": message_to_dict(message),
            "drop": None,
            "decision": dict(prior.decision) if prior and prior.decision else None,
            "jobs": jobs_out,
            "answers": [message_to_dict(a) for a in answers],
            "deliveries": deliveries,
        }


async def _job_with_runs(tx: StoreTx, job: JobRecord) -> dict[str, Any]:
    run_ids = (await tx.run_ids_for_jobs([job.id])).get(job.id, [])
    runs = [run for run in [await tx.get_run(i) for i in run_ids] if run is not None]
    return job_to_dict(job, run_ids=run_ids) | {"runs": [run_brief(r) for r in runs]}


async def _answers(
    tx: StoreTx, jobs: list[JobRecord], *, chat_jid: str, after_seq: int
) -> list[Any]:
    if not jobs:
        return []
    wanted = {j.id for j in jobs}
    found = await tx.get_messages_since(chat_jid, after_seq, limit=ANSWER_SCAN)
    return [
        m
        for m in found
        if m.metadata.get("job_id") in wanted
        and m.message_type in (MessageType.ASSISTANT, MessageType.HOST)
    ]
