"""The routes and folders pages: the table with Explain, Preview before every save and the
history of writes; the folder tree, creating a folder and editing every setting. Every write
goes through the route and folder services, audited as ``dashboard:<token name>``."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from postroom.core.errors import InvalidInput, PostroomError
from postroom.core.folder_settings import SETTING_KEYS
from postroom.core.folders import BusyPolicy, Role
from postroom.core.folders import Session as SessionMode
from postroom.dashboard.shell import Shell, error_status, form_text
from postroom.engine.folders import FolderSpec, folder_to_dict
from postroom.engine.inbound import build_inbound
from postroom.engine.services import Services
from postroom.engine.sessions import Session
from postroom.engine.tokens import Scope
from postroom.engine.views import route_change_to_dict

__all__ = ["routes"]

SURFACE = "dashboard"
#: The settings edited as a list, one entry per line (or comma-separated).
_LISTS = ("tools", "mirror")


def routes(shell: Shell, context: Any) -> list[BaseRoute]:
    pages = CatalogPages(shell, context.services)
    return [
        Route("/dashboard/routes", shell.page(pages.routes), methods=["GET"]),
        Route("/dashboard/routes/preview", shell.page(pages.preview), methods=["POST"]),
        Route("/dashboard/routes/save", shell.page(pages.save), methods=["POST"]),
        Route("/dashboard/routes/explain", shell.page(pages.explain), methods=["POST"]),
        Route("/dashboard/folders", shell.page(pages.folders), methods=["GET"]),
        Route("/dashboard/folders", shell.page(pages.create_folder), methods=["POST"]),
        Route("/dashboard/folders/{path:path}", shell.page(pages.folder), methods=["GET"]),
        Route("/dashboard/folders/{path:path}", shell.page(pages.save_folder), methods=["POST"]),
    ]


class CatalogPages:
    def __init__(self, shell: Shell, services: Services) -> None:
        self._shell = shell
        self._services = services

    # -- routes ---------------------------------------------------------------------------------
    async def _routes_page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        within = session.principal.folder
        services = self._services
        table = await services.routes.list_routes(within=within)
        history = await services.history.route_changes(limit=20, within=within)
        editing = extra.pop("editing", None)
        if editing is None and request.query_params.get("edit", "").isdigit():
            wanted = int(request.query_params["edit"])
            editing = next((r.to_dict() for r in table if r.id == wanted), None)
        return self._shell.render(
            "routes.html",
            request,
            session,
            status=status,
            routes=[r.to_dict() for r in table],
            history=[route_change_to_dict(e) for e in history],
            editing=editing,
            saved=request.query_params.get("saved"),
            **extra,
        )

    async def routes(self, request: Request, session: Session) -> Response:
        return await self._routes_page(request, session)

    async def preview(self, request: Request, session: Session) -> Response:
        """``Preview``, ``Add route`` and ``Delete`` all land here: what the change would do to
        recent traffic, with the button that saves it."""
        form = await request.form()
        change = _change(form)
        within = session.principal.folder
        try:
            session.principal.require(Scope.ROUTES, "changing routes")
            result = await self._preview(change, within)
        except PostroomError as exc:
            return await self._routes_page(
                request,
                session,
                status=error_status(exc),
                form_error=str(exc),
                editing=change if change["op"] != "delete" else None,
            )
        return await self._routes_page(
            request, session, preview=result.to_dict(), change=change, editing=change
        )

    async def _preview(self, change: dict[str, Any], within: str | None) -> Any:
        routes = self._services.routes
        if change["op"] == "delete":
            return await routes.preview_delete(_route_id(change["id"]), within=within)
        if change["op"] == "edit":
            return await routes.preview_routes(await self._edited(change, within), within=within)
        return await routes.preview_add(
            _seq(change["seq"]), change["match"], change["target"], within=within
        )

    async def _edited(self, change: dict[str, Any], within: str | None) -> list[dict[str, Any]]:
        """The whole table (of the caller's tree) with one row changed."""
        route_id = _route_id(change["id"])
        table = await self._services.routes.list_routes(within=within)
        if not any(r.id == route_id for r in table):
            raise InvalidInput(f"There is no route {route_id}.")
        return [
            {"id": r.id, "seq": r.seq, "match": r.match, "target": r.target}
            if r.id != route_id
            else {
                "id": r.id,
                "seq": _seq(change["seq"]),
                "match": change["match"],
                "target": change["target"],
            }
            for r in table
        ]

    async def save(self, request: Request, session: Session) -> Response:
        form = await request.form()
        change = _change(form)
        within = session.principal.folder
        actor = session.principal.actor(SURFACE)
        routes = self._services.routes
        try:
            session.principal.require(Scope.ROUTES, "changing routes")
            if change["op"] == "delete":
                await routes.delete_route(_route_id(change["id"]), actor=actor, within=within)
            elif change["op"] == "edit":
                rows = await self._edited(change, within)
                await routes.set_routes(rows, actor=actor, within=within)
            else:
                await routes.add_route(
                    _seq(change["seq"]),
                    change["match"],
                    change["target"],
                    actor=actor,
                    within=within,
                )
        except PostroomError as exc:
            return await self._routes_page(
                request, session, status=error_status(exc), form_error=str(exc), editing=change
            )
        return self._shell.back(f"/routes?saved={change['op']}")

    async def explain(self, request: Request, session: Session) -> Response:
        form = await request.form()
        asked = {name: form_text(form, name) for name in ("chat", "sender", "text")}
        services = self._services
        try:
            chat = asked["chat"] or "web:main/operator"
            message = build_inbound(
                chat_jid=chat,
                sender=asked["sender"] or chat,
                text=asked["text"],
                now=services.clock(),
            )
            services.ingest.validate(message)
            decision = (await services.router.explain(message)).to_dict()
        except PostroomError as exc:
            return await self._routes_page(
                request, session, status=error_status(exc), explain_error=str(exc), asked=asked
            )
        return await self._routes_page(request, session, decision=decision, asked=asked)

    # -- folders --------------------------------------------------------------------------------
    async def _folders_page(
        self, request: Request, session: Session, *, status: int = 200, **extra: Any
    ) -> Response:
        found = await self._services.folders.list_folders(within=session.principal.folder)
        tree = [
            folder_to_dict(f) | {"depth": f.path.count("/")}
            for f in sorted(found, key=lambda f: f.path.split("/"))
        ]
        return self._shell.render(
            "folders.html", request, session, status=status, folders=tree, **extra
        )

    async def folders(self, request: Request, session: Session) -> Response:
        created = request.query_params.get("created")
        return await self._folders_page(request, session, created=created)

    async def create_folder(self, request: Request, session: Session) -> Response:
        form = await request.form()
        given = {k: form_text(form, k) for k in ("path", "persona", "provider", "model")}
        try:
            session.principal.require(Scope.ROUTES, "creating folders")
            spec = FolderSpec(
                persona=given["persona"] or None,
                provider=given["provider"] or None,
                model=given["model"] or None,
            )
            await self._services.folders.add_folder(
                given["path"],
                spec,
                actor=session.principal.actor(SURFACE),
                within=session.principal.folder,
            )
        except PostroomError as exc:
            return await self._folders_page(
                request, session, status=error_status(exc), form_error=str(exc), given=given
            )
        return self._shell.back(f"/folders?created={given['path']}")

    async def _folder_page(
        self, request: Request, session: Session, path: str, *, status: int = 200, **extra: Any
    ) -> Response:
        try:
            folder = await self._services.folders.show(path, within=session.principal.folder)
        except PostroomError as exc:
            return self._shell.render(
                "message.html", request, session, status=error_status(exc), text=str(exc)
            )
        shown = folder_to_dict(folder)
        values = {key: _shown(shown.get(key)) for key in SETTING_KEYS}
        values.update(extra.pop("values", {}))
        return self._shell.render(
            "folder.html",
            request,
            session,
            status=status,
            folder=shown,
            values=values,
            sessions=[m.value for m in SessionMode],
            busy_policies=[m.value for m in BusyPolicy],
            roles=[m.value for m in Role],
            saved=request.query_params.get("saved"),
            **extra,
        )

    async def folder(self, request: Request, session: Session) -> Response:
        return await self._folder_page(request, session, request.path_params["path"])

    async def save_folder(self, request: Request, session: Session) -> Response:
        path = request.path_params["path"]
        form = await request.form()
        submitted = {key: form_text(form, key) for key in SETTING_KEYS}
        if isinstance(form.get("persona"), str):
            submitted["persona"] = str(form.get("persona")).replace("\r\n", "\n").strip()
        try:
            session.principal.require(Scope.ROUTES, "changing folders")
            current = folder_to_dict(
                await self._services.folders.show(path, within=session.principal.folder)
            )
            changes = {
                key: _setting(key, value)
                for key, value in submitted.items()
                if value != _shown(current.get(key))
            }
            if not changes:
                raise InvalidInput("Nothing changed: edit a setting before saving.")
            await self._services.folders.update(
                path,
                changes,
                actor=session.principal.actor(SURFACE),
                within=session.principal.folder,
            )
        except PostroomError as exc:
            return await self._folder_page(
                request,
                session,
                path,
                status=error_status(exc),
                form_error=str(exc),
                values=submitted,
            )
        return self._shell.back(f"/folders/{path}?saved=1")


def _change(form: Any) -> dict[str, Any]:
    op = form_text(form, "op")
    return {
        "op": op if op in ("add", "edit", "delete") else "add",
        "id": form_text(form, "id"),
        "seq": form_text(form, "seq"),
        "match": form.get("match") if isinstance(form.get("match"), str) else "",
        "target": form_text(form, "target"),
    }


def _seq(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"Seq must be a whole number, such as 10 or -5, not {text!r}.") from None


def _route_id(text: str) -> int:
    if not text.isdigit():
        raise InvalidInput(f"{text!r} is not a route id.")
    return int(text)


def _shown(value: Any) -> str:
    """A setting as its form field shows it ("" when the folder does not set it)."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _setting(key: str, text: str) -> Any:
    """A form field as the folder service takes it: empty unsets the setting."""
    if not text:
        return None
    if key in _LISTS:
        return [part.strip() for part in text.replace(",", "\n").splitlines() if part.strip()]
    return text
