"""The API's refusals: one sentence, ``{"error": "..."}``, with the status its kind implies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from postroom.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    PostroomError,
    TooLarge,
)

__all__ = [
    "describe_errors",
    "describe_validation",
    "error_body",
    "error_response",
    "error_status",
]


def error_body(message: str) -> dict[str, Any]:
    # A sentence may quote the client's input, which can hold a lone surrogate (a JSON
    # ``\ud800`` escape, or invalid UTF-8 that ``json.loads`` lets through): write it escaped,
    # or encoding the answer would fail.
    return {"error": message.encode("utf-8", "backslashreplace").decode("utf-8")}


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(message), status_code=status)


def error_status(exc: PostroomError) -> int:
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    return 500


def describe_validation(exc: RequestValidationError) -> str:
    return describe_errors(exc.errors())


def describe_errors(errors: Sequence[Any]) -> str:
    """One sentence for the first of pydantic's validation errors (FastAPI's or a model's)."""
    if not errors:
        return "The request is malformed."
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    where = ".".join(loc)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"Unknown field {where!r}; it is not accepted here."
    if kind == "missing":
        return f"Missing field {where!r}."
    if kind == "json_invalid":
        return "The body is not valid JSON."
    message = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    return f"Field {where!r}: {message}." if where else f"{message}."
