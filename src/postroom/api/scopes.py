"""Which token may call which endpoint: the one table of the HTTP API's scopes.

Each endpoint needs a scope (``read`` < ``routes`` < ``admin``) and either honours a token's
folder (``confined``: the handler passes the token's folder to the engine, which shows and
changes only that folder's tree) or cannot be narrowed to one folder, and is then refused to
a confined token. An endpoint missing from the table needs ``admin`` and an unconfined token,
so a new endpoint is closed until someone decides otherwise. ``/mcp`` checks each tool's scope
itself (:mod:`postroom.mcp.tools`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from postroom.engine.tokens import Principal, Scope

__all__ = ["ENDPOINTS", "Endpoint", "endpoint_for", "refusal"]

READ, ROUTES, ADMIN = Scope.READ, Scope.ROUTES, Scope.ADMIN


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    scope: Scope
    #: The handler confines its answer and its writes to a token's folder.
    confined: bool

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.path)


ENDPOINTS: tuple[Endpoint, ...] = tuple(
    Endpoint(method, path, scope, confined)
    for method, path, scope, confined in (
        ("POST", "/api/v1/messages", ADMIN, False),
        ("GET", "/api/v1/messages", READ, True),
        ("GET", "/api/v1/messages/{chat_jid:path}/{id}/journey", READ, True),
        ("GET", "/api/v1/events", READ, False),
        ("GET", "/api/v1/routes", READ, True),
        ("POST", "/api/v1/routes", ROUTES, True),
        ("PUT", "/api/v1/routes", ROUTES, True),
        ("DELETE", "/api/v1/routes/{id}", ROUTES, True),
        ("POST", "/api/v1/routes/explain", READ, True),
        ("POST", "/api/v1/routes/preview", READ, True),
        ("GET", "/api/v1/routes/history", READ, True),
        ("GET", "/api/v1/folders", READ, True),
        ("POST", "/api/v1/folders", ROUTES, True),
        ("GET", "/api/v1/folders/{path:path}", READ, True),
        ("PATCH", "/api/v1/folders/{path:path}", ROUTES, True),
        ("DELETE", "/api/v1/folders/{path:path}", ROUTES, True),
        ("GET", "/api/v1/folders/{path:path}/skills", READ, True),
        ("POST", "/api/v1/folders/{path:path}/skills", ROUTES, True),
        ("GET", "/api/v1/folders/{path:path}/skills/{name}", READ, True),
        ("PATCH", "/api/v1/folders/{path:path}/skills/{name}", ROUTES, True),
        ("DELETE", "/api/v1/folders/{path:path}/skills/{name}", ROUTES, True),
        ("GET", "/api/v1/tasks", READ, False),
        ("POST", "/api/v1/tasks", ADMIN, False),
        ("POST", "/api/v1/tasks/{id}/pause", ADMIN, False),
        ("POST", "/api/v1/tasks/{id}/resume", ADMIN, False),
        ("DELETE", "/api/v1/tasks/{id}", ADMIN, False),
        ("GET", "/api/v1/jobs", READ, True),
        ("POST", "/api/v1/jobs/{id}/retry", ADMIN, False),
        ("POST", "/api/v1/jobs/{id}/cancel", ADMIN, False),
        ("GET", "/api/v1/runs", READ, False),
        ("GET", "/api/v1/runs/{id}", READ, True),
        ("GET", "/api/v1/deliveries", READ, False),
        ("POST", "/api/v1/deliveries/{id}/retry", ADMIN, False),
        ("GET", "/api/v1/drops", READ, False),
        ("GET", "/api/v1/blobs/{sha256}", READ, False),
        ("GET", "/api/v1/providers", READ, False),
        ("GET", "/api/v1/channels", READ, False),
        ("GET", "/api/v1/nodes", READ, False),
        ("GET", "/api/v1/tokens", ADMIN, False),
        ("POST", "/api/v1/tokens", ADMIN, False),
        ("DELETE", "/api/v1/tokens/{name}", ADMIN, False),
        ("GET", "/api/v1/access", READ, False),
        ("GET", "/api/v1/access/pending", READ, False),
        ("POST", "/api/v1/access", ADMIN, False),
        ("POST", "/api/v1/access/pending/{code}/approve", ADMIN, False),
        ("POST", "/api/v1/access/pending/{code}/deny", ADMIN, False),
        ("DELETE", "/api/v1/access/{id}", ADMIN, False),
        ("GET", "/api/v1/budgets", READ, False),
        ("GET", "/api/v1/openapi.json", READ, True),
        ("GET", "/metrics", READ, False),
    )
)

_UNLISTED = Endpoint("", "", ADMIN, False)


def _compile(path: str) -> re.Pattern[str]:
    """``{name}`` is one path segment, ``{name:path}`` one or more."""
    parts = re.split(r"(\{[a-z_]+(?::path)?\})", path)
    return re.compile(
        "".join(
            (".+" if part.endswith(":path}") else "[^/]+")
            if part.startswith("{")
            else re.escape(part)
            for part in parts
        )
    )


# Most specific first: a literal path beats a template that would also match it
# (``/routes/history`` before ``/routes/{id}``).
_COMPILED = sorted(
    ((e.method, e.pattern, e) for e in ENDPOINTS),
    key=lambda item: ("{" in item[2].path, -len(item[2].path)),
)


def endpoint_for(method: str, path: str) -> Endpoint:
    wanted = "GET" if method == "HEAD" else method
    for endpoint_method, pattern, endpoint in _COMPILED:
        if endpoint_method == wanted and pattern.fullmatch(path):
            return endpoint
    return _UNLISTED


def refusal(method: str, path: str, principal: Principal) -> str | None:
    """Why *principal* may not call ``method path``, or ``None`` when it may."""
    if principal.scope is ADMIN and principal.folder is None:
        return None  # the owner's token, on every request: no lookup on the ingest path
    endpoint = endpoint_for(method, path)
    if not principal.scope.covers(endpoint.scope):
        return (
            f"Token {principal.name} has scope {principal.scope}; {method} {path} needs "
            f"scope {endpoint.scope} or more."
        )
    if principal.folder is not None and not endpoint.confined:
        return (
            f"Token {principal.name} is confined to folder {principal.folder}; {method} {path} "
            "is not limited to one folder, so it is not available to this token."
        )
    return None
