"""The pages of work in flight: jobs (retry, cancel), deliveries (retry), drops and tasks
(create, pause, resume, delete) — over the same services as ``postroom jobs``, ``tasks``…"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from postroom.core.errors import NotFound, PostroomError
from postroom.dashboard.shell import Shell, error_status, form_text
from postroom.engine.deliveries import DELIVERY_STATUSES
from postroom.engine.services import Services
from postroom.engine.sessions import Session
from postroom.engine.tasks import task_to_dict
from postroom.engine.tokens import Scope
from postroom.engine.turns import job_to_dict
from postroom.engine.views import delivery_record_to_dict, drop_to_dict
from postroom.store.records import JobStatus

__all__ = ["routes"]

SURFACE = "dashboard"
LIST_LIMIT = 200


def routes(shell: Shell, context: Any) -> list[BaseRoute]:
    pages = ActivityPages(shell, context.services)
    return [
        Route("/dashboard/jobs", shell.page(pages.jobs), methods=["GET"]),
        Route(
            "/dashboard/jobs/{item_id:int}/{verb:str}",
            shell.page(pages.job_action),
            methods=["POST"],
        ),
        Route("/dashboard/deliveries", shell.page(pages.deliveries), methods=["GET"]),
        Route(
            "/dashboard/deliveries/{item_id:int}/retry",
            shell.page(pages.retry_delivery),
            methods=["POST"],
        ),
        Route("/dashboard/drops", shell.page(pages.drops), methods=["GET"]),
        Route("/dashboard/tasks", shell.page(pages.tasks), methods=["GET"]),
        Route("/dashboard/tasks", shell.page(pages.add_task), methods=["POST"]),
        Route(
            "/dashboard/tasks/{item_id:int}/{verb:str}",
            shell.page(pages.task_action),
            methods=["POST"],
        ),
    ]


class ActivityPages:
    def __init__(self, shell: Shell, services: Services) -> None:
        self._shell = shell
        self._services = services

    async def _jobs_page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        wanted = request.query_params.get("status") or None
        if wanted not in (None, *[s.value for s in JobStatus]):
            wanted = None
        found = await self._services.turns.list_jobs(
            status=wanted, limit=LIST_LIMIT, within=session.principal.folder
        )
        run_ids = await self._services.history.run_ids([j.id for j in found])
        return self._shell.render(
            "jobs.html",
            request,
            session,
            status=status,
            jobs=[job_to_dict(j, run_ids=run_ids.get(j.id, [])) for j in found],
            statuses=[s.value for s in JobStatus],
            current=wanted or "",
            **extra,
        )

    async def jobs(self, request: Request, session: Session) -> Response:
        return await self._jobs_page(request, session)

    async def job_action(self, request: Request, session: Session) -> Response:
        job_id, verb = request.path_params["item_id"], request.path_params["verb"]
        turns = self._services.turns
        actions: dict[str, Callable[[int], Awaitable[Any]]] = {
            "retry": turns.retry,
            "cancel": turns.cancel,
        }
        return await self._act(
            request,
            session,
            lambda: actions[verb](job_id) if verb in actions else _unknown(verb),
            page=self._jobs_page,
            back="/jobs" + _query(request),
            what="retrying or cancelling jobs",
        )

    async def _deliveries_page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        wanted = request.query_params.get("status", "failed")
        if wanted not in (*DELIVERY_STATUSES, "all"):
            wanted = "failed"
        try:
            session.principal.require_whole_table("the deliveries page")
            found = await self._services.deliveries.list(
                status=None if wanted == "all" else wanted, limit=LIST_LIMIT
            )
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        return self._shell.render(
            "deliveries.html",
            request,
            session,
            status=status,
            deliveries=[delivery_record_to_dict(d) for d in found],
            statuses=[*DELIVERY_STATUSES, "all"],
            current=wanted,
            **extra,
        )

    async def deliveries(self, request: Request, session: Session) -> Response:
        return await self._deliveries_page(request, session)

    async def retry_delivery(self, request: Request, session: Session) -> Response:
        delivery_id = request.path_params["item_id"]
        return await self._act(
            request,
            session,
            lambda: self._services.deliveries.retry(
                delivery_id, actor=session.principal.actor(SURFACE)
            ),
            page=self._deliveries_page,
            back="/deliveries" + _query(request),
            what="retrying deliveries",
        )

    async def drops(self, request: Request, session: Session) -> Response:
        try:
            session.principal.require_whole_table("the drops page")
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        found = await self._services.history.drops(limit=LIST_LIMIT)
        return self._shell.render(
            "drops.html", request, session, drops=[drop_to_dict(d) for d in reversed(found)]
        )

    async def _tasks_page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        found = await self._services.tasks.list()
        folders = await self._services.folders.list_folders(within=session.principal.folder)
        return self._shell.render(
            "tasks.html",
            request,
            session,
            status=status,
            tasks=[task_to_dict(t) for t in found],
            folders=[f.path for f in folders],
            **extra,
        )

    async def tasks(self, request: Request, session: Session) -> Response:
        return await self._tasks_page(request, session)

    async def add_task(self, request: Request, session: Session) -> Response:
        form = await request.form()
        given = {k: form_text(form, k) for k in ("folder", "chat_jid", "schedule", "prompt", "tz")}
        try:
            session.principal.require(Scope.ADMIN, "creating tasks")
            session.principal.require_whole_table("creating tasks")
            await self._services.tasks.add(
                folder=given["folder"],
                chat_jid=given["chat_jid"],
                schedule=given["schedule"],
                prompt=given["prompt"],
                tz=given["tz"] or None,
                actor=session.principal.actor(SURFACE),
            )
        except PostroomError as exc:
            return await self._tasks_page(
                request, session, status=error_status(exc), form_error=str(exc), given=given
            )
        return self._shell.back("/tasks")

    async def task_action(self, request: Request, session: Session) -> Response:
        task_id, verb = request.path_params["item_id"], request.path_params["verb"]
        tasks = self._services.tasks
        actions: dict[str, Callable[[int], Awaitable[Any]]] = {
            "pause": tasks.pause,
            "resume": tasks.resume,
            "delete": tasks.remove,
        }
        return await self._act(
            request,
            session,
            lambda: actions[verb](task_id) if verb in actions else _unknown(verb),
            page=self._tasks_page,
            back="/tasks",
            what="changing tasks",
        )

    async def _act(
        self,
        request: Request,
        session: Session,
        action: Callable[[], Awaitable[Any]],
        *,
        page: Callable[..., Awaitable[Response]],
        back: str,
        what: str,
    ) -> Response:
        """Run a row's button; a refusal is shown above the table in one sentence."""
        try:
            session.principal.require(Scope.ADMIN, what)
            session.principal.require_whole_table(what)
            await action()
        except PostroomError as exc:
            return await page(
                request,
                session,
                status=error_status(exc),
                action_error=str(exc),
                failed_id=request.path_params.get("item_id"),
            )
        return self._shell.back(back)


async def _unknown(verb: str) -> None:
    raise NotFound(f"There is no action {verb!r} here.")


def _query(request: Request) -> str:
    status = request.query_params.get("status")
    return f"?status={status}" if status else ""
