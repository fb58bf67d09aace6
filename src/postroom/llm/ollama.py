"""Ollama's native chat API (PIPELINE §4), ``POST /api/chat`` through the ``ollama`` SDK.

How a :class:`ModelRequest` is sent:

- the system prompt is the first ``{"role": "system"}`` message, and a stored ``system`` row
  stays a system message where it stands; a stored command output becomes a user message
  ``[command output, exit N] …``;
- an ``assistant`` message carries its tool calls as ``tool_calls`` (``function`` with
  ``name`` and ``arguments``); an in-run ``tool`` message becomes ``{"role": "tool"}`` with the
  tool's name;
- tools are ``{"type": "function", "function": {…}}`` entries and ``max_tokens`` is
  ``options.num_predict``. The SDK keeps, of each parameter's schema, only ``type``,
  ``items``, ``description`` and ``enum``.

Ollama gives tool calls no id the SDK keeps, so a call's id is ``call_{index}``, its position in
the answer. Usage is ``prompt_eval_count`` and ``eval_count``; a stream (NDJSON) is assembled
into one answer.

SDK exceptions never leave this module: they become :class:`ProviderError` or
:class:`RateLimited`, chained ``from exc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import httpx
import ollama

from postroom.core.context import ContextMessage, ToolCall
from postroom.core.durations import parse_retry_after
from postroom.llm.base import (
    UNREADABLE_ERRORS,
    ModelRequest,
    ModelResponse,
    ProviderError,
    RateLimited,
    TextSink,
    ToolSpec,
    base64_of,
    text_with_placeholders,
)
from postroom.llm.echo import render_for_echo

__all__ = ["DEFAULT_HOST", "OllamaProvider"]

#: No usable answer: the server is unreachable, or it answered something the SDK cannot read.
_NO_ANSWER: tuple[type[Exception], ...] = (
    ConnectionError,
    httpx.TransportError,
    *UNREADABLE_ERRORS,
)

DEFAULT_HOST = "http://127.0.0.1:11434"
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


class OllamaProvider:
    """One Ollama server: ``account`` is the label reported in responses and errors."""

    name = "ollama"

    def __init__(
        self,
        *,
        account: str = "local",
        base_url: str | None = None,
        default_model: str = "llama3.2",
        stream: bool = False,
        timeout_s: float = 300.0,
    ) -> None:
        self.account = account
        self.default_model = default_model
        self.host = (base_url or DEFAULT_HOST).rstrip("/")
        self._stream = stream
        self._timeout_s = timeout_s
        # ResponseError keeps a refusal's status and text but not its headers: a response hook
        # notes ``retry-after`` for the call running in this context.
        self._retry_after: ContextVar[list[str] | None] = ContextVar(
            "ollama_retry_after", default=None
        )
        self._client = ollama.AsyncClient(
            host=self.host,
            timeout=timeout_s,
            event_hooks={"response": [self._note_retry_after]},
        )

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections."""
        await self._client.close()  # type: ignore[no-untyped-call]  # unannotated in the SDK

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        model = request.model or self.default_model
        messages = _messages(request)
        tools = [_tool(spec) for spec in request.tools] or None
        options = {"num_predict": request.max_tokens}
        hints: list[str] = []
        token = self._retry_after.set(hints)
        try:
            if self._stream:
                stream = await self._client.chat(
                    model=model, messages=messages, tools=tools, options=options, stream=True
                )
                parts = []
                async for part in stream:
                    parts.append(part)
                    if sink is not None and part.message.content:
                        sink.write(part.message.content)
            else:
                parts = [
                    await self._client.chat(
                        model=model, messages=messages, tools=tools, options=options
                    )
                ]
            return self._response(parts, model)
        except ollama.ResponseError as exc:
            raise self._translate(exc, model, hints) from exc
        except _NO_ANSWER as exc:
            raise self._unreachable(exc) from exc
        finally:
            self._retry_after.reset(token)

    async def check(self) -> str:
        try:
            listing = await self._client.list()
        except ollama.ResponseError as exc:
            raise self._translate(exc, self.default_model, []) from exc
        except (ConnectionError, httpx.TransportError, ValueError) as exc:
            raise self._unreachable(exc) from exc
        names = [entry.model for entry in listing.models if entry.model]
        if not names:
            return (
                f"ollama at {self.host} answers but has no models; "
                f"run `ollama pull {self.default_model}`"
            )
        described = f"ollama at {self.host} has {', '.join(names)}"
        if not any(_same_model(name, self.default_model) for name in names):
            described += (
                f"; the default model {self.default_model} is missing: "
                f"run `ollama pull {self.default_model}`"
            )
        return described

    async def _note_retry_after(self, response: httpx.Response) -> None:
        hints = self._retry_after.get()
        value = response.headers.get("retry-after")
        if hints is not None and value and response.status_code in (429, 503):
            hints.append(value)

    def _response(self, parts: Sequence[ollama.ChatResponse], model: str) -> ModelResponse:
        if not parts or not parts[-1].done:
            raise ProviderError(
                f"ollama at {self.host}: the answer stopped before it was done",
                public="ollama's answer was cut off",
            )
        last = parts[-1]
        calls = tuple(
            ToolCall(
                id=f"call_{index}", name=call.function.name, arguments=dict(call.function.arguments)
            )
            for index, call in enumerate(
                call for part in parts for call in part.message.tool_calls or ()
            )
        )
        if calls:
            stop: str | None = "tool_use"
        else:
            reason = last.done_reason
            stop = _STOP_REASONS.get(reason, reason) if reason else None
        return ModelResponse(
            text="".join(part.message.content or "" for part in parts),
            raw="\n".join(part.model_dump_json(exclude_none=True) for part in parts),
            model=last.model or model,
            account=self.account,
            usage={
                "input_tokens": last.prompt_eval_count or 0,
                "output_tokens": last.eval_count or 0,
            },
            tool_calls=calls,
            stop_reason=stop,
        )

    def _translate(
        self, exc: ollama.ResponseError, model: str, retry_after: Sequence[str]
    ) -> ProviderError:
        status = exc.status_code
        text = str(exc.error).strip() or "no message"
        lowered = text.lower()
        where = f"ollama at {self.host}"
        if status == 429 or (status == 503 and ("busy" in lowered or "overload" in lowered)):
            return RateLimited(
                f"{where} is rate-limiting account {self.account!r} (HTTP {status}): {text}",
                retry_after=parse_retry_after(retry_after[-1], now=datetime.now(UTC))
                if retry_after
                else None,
                public=f"ollama is busy (HTTP {status})",
            )
        if status == 404 and "model" in lowered:
            return ProviderError(
                f"{where} has no model {model!r}: run `ollama pull {model}` ({text})",
                retryable=False,
                public=f"ollama has no model {model} (run `ollama pull {model}`)",
            )
        if status in (401, 403):
            return ProviderError(
                f"{where} refused account {self.account!r} (HTTP {status}): {text}",
                retryable=False,
                public=f"ollama refused the request (HTTP {status})",
            )
        if status == 408 or status >= 500 or status < 0:
            # A negative status is an error reported inside a stream that had begun.
            public = (
                f"ollama answered HTTP {status}"
                if status > 0
                else "ollama reported an error in the middle of its answer"
            )
            return ProviderError(f"{where} failed (HTTP {status}): {text}", public=public)
        return ProviderError(
            f"{where} refused the request (HTTP {status}): {text}",
            retryable=False,
            public=f"ollama answered HTTP {status}",
        )

    def _unreachable(self, exc: Exception) -> ProviderError:
        if isinstance(exc, UNREADABLE_ERRORS):  # JSON or shape the SDK could not read
            return ProviderError(
                f"ollama at {self.host} answered with something that is not Ollama's API "
                f"({type(exc).__name__}: {exc}); is base_url right?"[:1000],
                retryable=False,
                public="ollama's answer could not be read",
            )
        if isinstance(exc, httpx.TimeoutException):
            return ProviderError(
                f"ollama at {self.host} did not answer within {self._timeout_s:g} s",
                public="ollama did not answer in time",
            )
        return ProviderError(
            f"Ollama is not reachable at {self.host} ({type(exc).__name__}): "
            "is `ollama serve` running?",
            public="ollama could not be reached (is `ollama serve` running?)",
        )


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    names: dict[str, str] = {}
    for message in request.messages:
        out.append(_message(message, names))
    return out


_IMAGES = frozenset({"image"})


def _message(message: ContextMessage, names: dict[str, str]) -> dict[str, Any]:
    """One message in Ollama's shape. *names* maps the ids of calls seen so far to tools."""
    if message.role == "user" and message.media:
        # Ollama takes images as base64 beside the text; it has no document input.
        user: dict[str, Any] = {
            "role": "user",
            "content": text_with_placeholders(message, sent=_IMAGES),
        }
        images = [base64_of(part) for part in message.media if part.as_kind == "image"]
        if images:
            user["images"] = images
        return user
    if message.role in ("user", "system"):
        return {"role": message.role, "content": message.content}
    if message.role == "tool_result":
        return {"role": "user", "content": render_for_echo(message)}
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [
                {"function": {"name": call.name, "arguments": dict(call.arguments)}}
                for call in message.tool_calls
            ]
            names.update((call.id, call.name) for call in message.tool_calls)
        return out
    if message.role == "tool":
        name = message.tool_name or names.get(message.tool_call_id or "")
        content = f"[error] {message.content}" if message.is_error else message.content
        return {"role": "tool", "content": content, "tool_name": name}
    raise ValueError(f"a context message of unknown role {message.role!r}")


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.parameters),
        },
    }


def _same_model(listed: str, wanted: str) -> bool:
    """``llama3.2`` is ``llama3.2:latest`` in Ollama's listing."""
    return listed == wanted or (":" not in wanted and listed == f"{wanted}:latest")
