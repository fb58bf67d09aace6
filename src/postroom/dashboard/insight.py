"""The pages that show what happened: the overview (health, queue, trouble, cost today),
conversations, one message's journey, one run's exact context, usage with spend against
budget, and nodes."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from postroom import __version__
from postroom.core.errors import PostroomError
from postroom.core.messages import MessageType
from postroom.dashboard.charts import bar_chart
from postroom.dashboard.nodes_view import node_rows
from postroom.dashboard.shell import Shell, error_status
from postroom.engine.budgets import BudgetStatus
from postroom.engine.health import channel_health
from postroom.engine.overview import read_overview
from postroom.engine.sessions import Session
from postroom.engine.turns import job_to_dict
from postroom.engine.views import delivery_record_to_dict, message_to_dict, run_to_dict

__all__ = ["budget_view", "message_view", "routes"]

CONVERSATION_LIMIT = 200
USAGE_DAYS = 30
#: Message types shown folded (a run's inner workings), as in the web chat.
_FOLDED = {MessageType.TRACE.value, MessageType.TOOL_RESULT.value}


def routes(shell: Shell, context: Any) -> list[BaseRoute]:
    pages = InsightPages(shell, context)
    return [
        Route("/dashboard", shell.page(pages.overview), methods=["GET"]),
        Route("/dashboard/channels/check", shell.page(pages.check_channels), methods=["POST"]),
        Route("/dashboard/conversations", shell.page(pages.conversations), methods=["GET"]),
        Route("/dashboard/journey", shell.page(pages.journey), methods=["GET"]),
        Route("/dashboard/runs/{run_id:int}", shell.page(pages.run), methods=["GET"]),
        Route("/dashboard/usage", shell.page(pages.usage), methods=["GET"]),
        Route("/dashboard/nodes", shell.page(pages.nodes), methods=["GET"]),
    ]


def message_view(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the conversation view lists it: folded when it is a trace."""
    return message | {"folded": message["message_type"] in _FOLDED}


def budget_view(status: BudgetStatus) -> dict[str, Any]:
    """A budgeted folder's row: its spend today and the share of its budget, for the bar
    (capped at 100 %: a turn already running may spend past the budget)."""
    used = status.spent / status.budget * 100 if status.budget > 0 else 100.0
    return status.to_dict() | {"percent": round(used), "width": min(round(used), 100)}


def _money(amount: float) -> str:
    return f"${amount:,.4f}" if amount < 1 else f"${amount:,.2f}"


class InsightPages:
    def __init__(self, shell: Shell, context: Any) -> None:
        self._shell = shell
        self._context = context
        self._services = context.services

    async def overview(self, request: Request, session: Session) -> Response:
        services, context = self._services, self._context
        now = services.clock()
        figures = await read_overview(services.store, now=now)
        health = channel_health(
            context.channel_status(),
            services.health.snapshot(),
            adapter_platforms=context.adapter_platforms,
            webhooks=context.webhook_platforms,
            now=now,
        )
        template = "overview_body.html" if request.query_params.get("part") else "overview.html"
        return self._shell.render(
            template,
            request,
            session,
            figures=figures,
            failed_jobs=[job_to_dict(j) for j in figures.failed_jobs],
            abandoned=[delivery_record_to_dict(d) for d in figures.abandoned],
            health=[h.to_dict() for h in health],
            adapters=bool(context.adapter_platforms),
        )

    async def check_channels(self, request: Request, session: Session) -> Response:
        if self._context.probe_channels is not None:
            await self._context.probe_channels()
        return self._shell.back("")

    async def conversations(self, request: Request, session: Session) -> Response:
        folder = request.query_params.get("folder") or None
        chat = request.query_params.get("chat") or None
        within = session.principal.folder
        services = self._services
        error = None
        found: list[dict[str, Any]] = []
        try:
            if within is not None and folder is None:
                folder = within
            messages = await services.history.messages(
                chat_jid=chat, folder=folder, limit=CONVERSATION_LIMIT, within=within
            )
            found = [message_view(message_to_dict(m)) for m in messages]
        except PostroomError as exc:
            error = str(exc)
        folders = await services.folders.list_folders(within=within)
        chats = sorted({m["chat_jid"] for m in found})
        return self._shell.render(
            "conversations.html",
            request,
            session,
            messages=found,
            folders=[f.path for f in folders],
            chats=chats,
            folder=folder or "",
            chat=chat or "",
            error=error,
            last_seq=found[-1]["seq"] if found else 0,
        )

    async def journey(self, request: Request, session: Session) -> Response:
        chat = request.query_params.get("chat", "")
        message_id = request.query_params.get("id", "")
        try:
            journey = await self._services.journeys.journey(
                chat, message_id, within=session.principal.folder
            )
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        return self._shell.render("journey.html", request, session, journey=journey)

    async def run(self, request: Request, session: Session) -> Response:
        try:
            record = await self._services.history.run(
                request.path_params["run_id"], within=session.principal.folder
            )
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        return self._shell.render("run.html", request, session, run=run_to_dict(record))

    async def usage(self, request: Request, session: Session) -> Response:
        since = self._services.clock() - timedelta(days=USAGE_DAYS)
        rows = await self._services.history.usage(since=since)
        by: dict[str, dict[str, list[float]]] = {
            "day": defaultdict(lambda: [0.0, 0.0, 0.0]),
            "folder": defaultdict(lambda: [0.0, 0.0, 0.0]),
            "model": defaultdict(lambda: [0.0, 0.0, 0.0]),
        }
        unpriced = False
        for row in rows:
            tokens = row.input_tokens + row.output_tokens
            unpriced = unpriced or (row.cost is None and tokens > 0)
            keys = {"day": row.day, "folder": row.folder, "model": row.model or row.provider}
            for kind, key in keys.items():
                bucket = by[kind][key]
                bucket[0] += row.cost or 0.0
                bucket[1] += tokens
                bucket[2] += row.runs
        charts = {
            kind: Markup(
                bar_chart(
                    f"Cost per {kind}, last {USAGE_DAYS} days",
                    [
                        (key, values[0], f"{_money(values[0])} · {int(values[1]):,} tokens")
                        for key, values in sorted(groups.items())
                    ],
                )
            )
            for kind, groups in by.items()
        }
        budgets = await self._services.budgets.today(now=self._services.clock())
        return self._shell.render(
            "usage.html",
            request,
            session,
            budgets=[budget_view(b) for b in budgets],
            rows=rows,
            charts=charts,
            unpriced=unpriced,
            days=USAGE_DAYS,
        )

    async def nodes(self, request: Request, session: Session) -> Response:
        context = self._context
        running = [str(s.get("name")) for s in context.channel_status()]
        now = self._services.clock()
        rows = node_rows(
            await context.nodes() if context.nodes is not None else [],
            me=context.node_id,
            now=now,
            version=__version__,
            running=running,
        )
        return self._shell.render(
            "nodes.html", request, session, nodes=rows, shared=context.node_rows, now=now
        )
