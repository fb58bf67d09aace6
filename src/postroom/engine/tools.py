"""The built-in tools of a turn (PIPELINE §4).

Every folder gets ``send_message``, ``memory_save``, ``memory_search``, ``state_set`` and
``delegate``; folders with ``role = "conductor"`` or ``"admin"`` also get the route tools and
``create_folder`` — the same functions as the CLI, a conductor confined to its own tree. A
folder's ``tools`` setting narrows the list.

Tools whose effect belongs with the answer (sending, saving, delegating) are collected in
:class:`TurnEffects` and applied in the transaction that stores the answer, so a turn that is
retried after a crash does not send or save twice; reading tools and the operator tools act at
once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from postroom.core.errors import PostroomError
from postroom.core.folders import FolderSettings, Role, is_within, validate_folder
from postroom.core.jid import parse_jid
from postroom.engine.folders import FolderService, FolderSpec
from postroom.engine.memory import MemoryService
from postroom.engine.routes import RouteService
from postroom.engine.runner import ToolOutcome
from postroom.llm.base import ToolSpec

__all__ = ["BASIC_TOOLS", "OPERATOR_TOOLS", "ToolFactory", "TurnEffects", "TurnToolbox"]

MAX_TEXT = 32_000


@dataclass
class TurnEffects:
    """What a turn asked for that is applied with its answer (tools and tags alike)."""

    memories: list[tuple[str, str]] = field(default_factory=list)
    states: list[tuple[str, str]] = field(default_factory=list)
    messages: list[tuple[str, str]] = field(default_factory=list)
    delegations: list[tuple[str, str]] = field(default_factory=list)


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name,
        description,
        {"type": "object", "properties": properties, "required": required},
    )


_STRING = {"type": "string"}
BASIC_TOOLS: tuple[ToolSpec, ...] = (
    _spec(
        "send_message",
        "Send a message now, to this chat (default) or to another chat this folder may reach.",
        {"text": _STRING, "chat_jid": _STRING},
        ["text"],
    ),
    _spec(
        "memory_save",
        "Remember a durable fact. Categories: sticky (always recalled), user_preference, "
        "project_context, learned_pattern.",
        {"fact": _STRING, "category": _STRING},
        ["fact"],
    ),
    _spec(
        "memory_search",
        "Search what this folder remembers.",
        {"query": _STRING},
        ["query"],
    ),
    _spec(
        "state_set",
        "Set a named piece of state (an empty value removes it).",
        {"key": _STRING, "value": _STRING},
        ["key", "value"],
    ),
    _spec(
        "delegate",
        "Hand a task to a folder inside this one; its answer is posted to this chat.",
        {"folder": _STRING, "task": _STRING},
        ["folder", "task"],
    ),
)
OPERATOR_TOOLS: tuple[ToolSpec, ...] = (
    _spec("list_routes", "The route table, with each row's mode and shadowing.", {}, []),
    _spec(
        "add_route",
        "Add a route: seq (lower first), match (key=pattern tests), target (folder[#mode]).",
        {"seq": {"type": "integer"}, "match": _STRING, "target": _STRING},
        ["seq", "target"],
    ),
    _spec("delete_route", "Remove a route by id.", {"id": {"type": "integer"}}, ["id"]),
    _spec(
        "set_routes",
        "Replace the routes (all of them, or for a conductor those targeting its own tree).",
        {"rows": {"type": "array", "items": {"type": "object"}}},
        ["rows"],
    ),
    _spec(
        "create_folder",
        "Create a folder (an agent) with an optional persona, provider and model.",
        {"path": _STRING, "persona": _STRING, "provider": _STRING, "model": _STRING},
        ["path"],
    ),
)


class TurnToolbox:
    """The tools of one turn, bound to its folder, chats and delegation depth."""

    def __init__(
        self,
        *,
        settings: FolderSettings,
        chats: Sequence[str],
        depth: int,
        max_depth: int,
        existing_folders: frozenset[str],
        memory: MemoryService,
        routes: RouteService,
        folders: FolderService,
    ) -> None:
        self.effects = TurnEffects()
        self._settings = settings
        self._folder = settings.path
        self._chats = list(chats)
        self._depth = depth
        self._max_depth = max_depth
        self._existing = existing_folders
        self._memory = memory
        self._routes = routes
        self._folders = folders
        allowed = set(settings.tools)
        specs = list(BASIC_TOOLS)
        if settings.role in (Role.CONDUCTOR, Role.ADMIN):
            specs += OPERATOR_TOOLS
        self._specs = tuple(s for s in specs if not allowed or s.name in allowed)
        handlers = {
            "send_message": self._send_message,
            "memory_save": self._memory_save,
            "memory_search": self._memory_search,
            "state_set": self._state_set,
            "delegate": self._delegate,
            "list_routes": self._list_routes,
            "add_route": self._add_route,
            "delete_route": self._delete_route,
            "set_routes": self._set_routes,
            "create_folder": self._create_folder,
        }
        self._handlers = {s.name: handlers[s.name] for s in self._specs}

    def specs(self) -> Sequence[ToolSpec]:
        return self._specs

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        handler = self._handlers.get(name)
        if handler is None:
            return ToolOutcome(f"There is no tool {name!r} here.", is_error=True)
        try:
            return await handler(dict(arguments))
        except PostroomError as exc:
            return ToolOutcome(str(exc), is_error=True)
        except (KeyError, TypeError, ValueError) as exc:
            return ToolOutcome(f"Bad arguments for {name}: {exc}", is_error=True)

    # -- basic tools --------------------------------------------------------------------------
    async def _send_message(self, args: dict[str, Any]) -> ToolOutcome:
        text = _text(args, "text")
        chat = str(args.get("chat_jid") or self._chats[0])
        parse_jid(chat, what="chat_jid")
        reachable = [*self._chats, *self._settings.mirror]
        if chat not in reachable:
            return ToolOutcome(
                f"{self._folder} cannot reach {chat}; it may send to {', '.join(reachable)}.",
                is_error=True,
            )
        self.effects.messages.append((chat, text))
        return ToolOutcome(f"Message to {chat} will be sent with this turn's answer.")

    async def _memory_save(self, args: dict[str, Any]) -> ToolOutcome:
        fact = _text(args, "fact")
        category = str(args.get("category") or "").strip().lower() or "project_context"
        self.effects.memories.append((category, fact))
        return ToolOutcome(f"Saved to memory ({category}).")

    async def _memory_search(self, args: dict[str, Any]) -> ToolOutcome:
        query = _text(args, "query")
        found = await self._memory.search(self._folder, query)
        if not found:
            return ToolOutcome("Nothing remembered yet.")
        return ToolOutcome("\n".join(f"- [{f.category}] {f.fact}" for f in found))

    async def _state_set(self, args: dict[str, Any]) -> ToolOutcome:
        key = _text(args, "key")
        value = str(args.get("value", ""))
        self.effects.states.append((key, value))
        return ToolOutcome(f"State {key} {'set' if value else 'removed'}.")

    async def _delegate(self, args: dict[str, Any]) -> ToolOutcome:
        target = validate_folder(_text(args, "folder"), what="Delegation target")
        task = _text(args, "task")
        if target == self._folder or not is_within(target, self._folder):
            return ToolOutcome(
                f"{self._folder} may delegate only to folders inside it, not to {target}.",
                is_error=True,
            )
        if target not in self._existing:
            return ToolOutcome(f"There is no folder {target}.", is_error=True)
        if self._depth + 1 > self._max_depth:
            return ToolOutcome(
                f"Delegation is limited to {self._max_depth} levels; this turn is already "
                f"{self._depth} deep.",
                is_error=True,
            )
        self.effects.delegations.append((target, task))
        return ToolOutcome(f"{target} will take the task; its answer goes to this chat.")

    # -- operator tools -----------------------------------------------------------------------
    @property
    def _actor(self) -> str:
        return f"agent:{self._folder}"

    @property
    def _scope(self) -> str | None:
        return None if self._settings.role is Role.ADMIN else self._folder

    async def _list_routes(self, args: dict[str, Any]) -> ToolOutcome:
        views = await self._routes.list_routes()
        return ToolOutcome(json.dumps([v.to_dict() for v in views], ensure_ascii=False))

    async def _add_route(self, args: dict[str, Any]) -> ToolOutcome:
        target = _text(args, "target")
        if self._scope is not None and not is_within(target.partition("#")[0], self._scope):
            return ToolOutcome(f"A route from {self._folder} must target inside it.", True)
        route_id = await self._routes.add_route(
            args.get("seq"), args.get("match", ""), target, actor=self._actor
        )
        return ToolOutcome(f"Added route {route_id}.")

    async def _delete_route(self, args: dict[str, Any]) -> ToolOutcome:
        route_id = int(args["id"])
        await self._routes.delete_route(route_id, actor=self._actor, within=self._scope)
        return ToolOutcome(f"Removed route {route_id}.")

    async def _set_routes(self, args: dict[str, Any]) -> ToolOutcome:
        views = await self._routes.set_routes(args["rows"], actor=self._actor, within=self._scope)
        return ToolOutcome(f"The route table has {len(views)} row(s).")

    async def _create_folder(self, args: dict[str, Any]) -> ToolOutcome:
        path = validate_folder(_text(args, "path"))
        if self._scope is not None and (path == self._folder or not is_within(path, self._folder)):
            return ToolOutcome(f"{self._folder} may create folders only inside itself.", True)
        spec = FolderSpec(
            persona=args.get("persona"), provider=args.get("provider"), model=args.get("model")
        )
        await self._folders.add_folder(path, spec, actor=self._actor)
        return ToolOutcome(f"Created folder {path}.")


def _text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} must be non-empty text")
    if len(value) > MAX_TEXT:
        raise ValueError(f"{key} is longer than {MAX_TEXT} characters")
    return value.strip()


@dataclass(frozen=True, slots=True)
class ToolFactory:
    """Builds each turn's toolbox over the engine's services."""

    memory: MemoryService
    routes: RouteService
    folders: FolderService
    max_depth: int = 3

    def toolbox(
        self,
        *,
        settings: FolderSettings,
        chats: Sequence[str],
        depth: int,
        existing_folders: frozenset[str],
    ) -> TurnToolbox:
        return TurnToolbox(
            settings=settings,
            chats=chats,
            depth=depth,
            max_depth=self.max_depth,
            existing_folders=existing_folders,
            memory=self.memory,
            routes=self.routes,
            folders=self.folders,
        )
