"""The OpenAPI document at ``/api/v1/openapi.json`` lists the statuses the server really answers.

FastAPI documents a 422 "Validation Error" on every operation that takes input; postroom answers
400 with ``{"error": "<one sentence>"}`` instead (INTERFACES §4). The document is FastAPI's with
that corrected: 422 and its schemas removed, and each operation given the refusals that apply to
it — 400 when it takes parameters or a body, 401 and 403 under ``/api/`` (the bearer token, and
a named token's scope: :mod:`postroom.api.scopes`), 404 when its path names something, 413 when
it takes a body — plus those a route declares itself with :func:`refusals` (409 for a conflict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

__all__ = ["ERROR_SCHEMA", "corrected_openapi", "refusals"]

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "properties": {"error": {"type": "string", "description": "One sentence saying why."}},
    "required": ["error"],
}
_DESCRIPTIONS = {
    400: "Malformed or invalid input",
    401: "No or wrong bearer token",
    403: "Outside the token's scope",
    404: "Not found",
    409: "Conflicts with what is stored",
    413: "The body is too large",
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _refusal(status: int) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS[status],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route that can also answer these statuses (e.g. 409)."""
    return {status: _refusal(status) for status in statuses}


def corrected_openapi(app: FastAPI, *extra: APIRoute) -> Callable[[], dict[str, Any]]:
    """What to install as ``app.openapi``: FastAPI's document, corrected (built once). *extra*
    routes are described too: endpoints answered before FastAPI's routing (the ingest lane)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                openapi_version=app.openapi_version,
                description=app.description,
                routes=[*app.routes, *extra],
            )
            for path, operations in doc.get("paths", {}).items():
                for operation in operations.values():
                    _correct(path, operation)
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            schemas["Error"] = ERROR_SCHEMA
            app.openapi_schema = doc
        return app.openapi_schema

    return document


def _correct(path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    statuses: set[int] = set()
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.add(400)
    if path.startswith("/api/"):
        statuses |= {401, 403}
    if "{" in path:
        statuses.add(404)
    if operation.get("requestBody"):
        statuses.add(413)
    for status in sorted(statuses):
        responses.setdefault(str(status), _refusal(status))
