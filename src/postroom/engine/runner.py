"""The seam between a turn and the model, and the shared tool loop (PIPELINE §4).

An :class:`AgentRunner` takes the built request, the folder's settings and the turn's toolbox
and returns the final answer with everything that happened on the way. The default runner
picks the folder's provider and runs the loop: call the model; if it asks for tools, run them,
record each call and result as a trace, and call again — at most ``max_model_calls`` times, the
last call without tools so the model has to answer. Before each call after the first, a
*steer* callback (``busy_policy = "steer"``, PIPELINE §2) may add the messages that arrived
meanwhile, so the same run answers them. Every model call ends within ``call_timeout_s``
(``llm.call_timeout``) whatever the server does — a stream that trickles forever is cut — and
the cut is a retryable :class:`ProviderError`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from postroom.core.context import ContextMessage, ToolCall
from postroom.core.durations import format_duration
from postroom.core.folders import FolderSettings
from postroom.core.messages import Sender
from postroom.llm.base import (
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderError,
    TextSink,
    ToolSpec,
)
from postroom.llm.models import ModelTable

__all__ = [
    "AgentResult",
    "AgentRunner",
    "ProviderRunner",
    "Steer",
    "ToolOutcome",
    "Toolbox",
    "Trace",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    is_error: bool = False


class Toolbox(Protocol):
    """The tools of one turn."""

    def specs(self) -> Sequence[ToolSpec]: ...

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome: ...


@dataclass(frozen=True, slots=True)
class Trace:
    """Something that happened inside a run, stored as a ``trace`` row (MESSAGES §2)."""

    sender: str
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentResult:
    """The final answer, the last request (with the tool exchanges), and the run's trail."""

    response: ModelResponse
    request: ModelRequest
    traces: tuple[Trace, ...] = ()
    calls: int = 1
    raws: tuple[str, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    cost: float | None = None


#: The messages that arrived for a running turn since it last asked (rendered for the model).
Steer = Callable[[], Awaitable[Sequence[ContextMessage]]]


class AgentRunner(Protocol):
    async def run(
        self,
        request: ModelRequest,
        *,
        settings: FolderSettings,
        toolbox: Toolbox | None = None,
        steer: Steer | None = None,
        sink: TextSink | None = None,
    ) -> AgentResult:
        """Run the turn; a streaming provider writes the answer's text to *sink* meanwhile."""
        ...


class ProviderRunner:
    """Runs the tool loop against the provider the folder is configured for."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        *,
        max_model_calls: int = 5,
        models: ModelTable | None = None,
        call_timeout_s: float = 120.0,
    ) -> None:
        self._providers = dict(providers)
        self._max_calls = max(1, max_model_calls)
        self._models = models or ModelTable()
        self._call_timeout_s = call_timeout_s

    def provider_for(self, settings: FolderSettings) -> Provider:
        provider = self._providers.get(settings.provider)
        if provider is None:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ProviderError(
                f"Folder {settings.path} uses provider {settings.provider!r}, which is not "
                f"configured (configured: {known}).",
                retryable=False,
                public=f"the provider {settings.provider} is not configured",
            )
        return provider

    async def complete(
        self, request: ModelRequest, settings: FolderSettings, *, sink: TextSink | None = None
    ) -> ModelResponse:
        """One model call with the folder's provider, ended after ``call_timeout_s``."""
        provider = self.provider_for(settings)
        deadline = asyncio.timeout(self._call_timeout_s)
        try:
            async with deadline:
                return await provider.complete(request, sink=sink)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            limit = format_duration(self._call_timeout_s)
            raise ProviderError(
                f"{settings.provider}: the model call was cut after {limit} (llm.call_timeout)",
                public=f"{settings.provider} did not answer within {limit}",
            ) from exc

    async def run(
        self,
        request: ModelRequest,
        *,
        settings: FolderSettings,
        toolbox: Toolbox | None = None,
        steer: Steer | None = None,
        sink: TextSink | None = None,
    ) -> AgentResult:
        self.provider_for(settings)  # an unknown provider fails before anything runs
        specs = tuple(toolbox.specs()) if toolbox is not None else ()
        messages = list(request.messages)
        traces: list[Trace] = []
        raws: list[str] = []
        usage = {"input_tokens": 0, "output_tokens": 0}
        cost: float | None = 0.0
        calls = 0
        while True:
            if calls and steer is not None:
                messages.extend(await steer())
            calls += 1
            last = calls >= self._max_calls or not specs
            current = replace(request, messages=tuple(messages), tools=() if last else specs)
            if sink is not None and calls > 1:
                sink.restart()  # what the model wrote before calling tools is not the answer
            response = await self.complete(current, settings, sink=sink)
            raws.append(response.raw)
            for key in usage:
                usage[key] += int(response.usage.get(key, 0))
            call_cost = response.cost
            if call_cost is None:
                call_cost = self._models.cost_of(response.model or request.model, response.usage)
            cost = None if cost is None or call_cost is None else cost + call_cost
            if not response.tool_calls or last or toolbox is None:
                traces.append(
                    Trace(
                        Sender.RESULT_META.value,
                        _meta(response, calls, usage, cost),
                        {"model": response.model, "calls": calls, "usage": dict(usage)},
                    )
                )
                return AgentResult(
                    response=response,
                    # The record shows the tools the run offered, even if its last call had none.
                    request=replace(current, tools=specs),
                    traces=tuple(traces),
                    calls=calls,
                    raws=tuple(raws),
                    usage=dict(usage),
                    cost=cost,
                )
            messages.append(
                ContextMessage("assistant", response.text, tool_calls=response.tool_calls)
            )
            for call in response.tool_calls:
                traces.append(
                    Trace(
                        Sender.TOOL_USE.value,
                        f"{call.name}({json.dumps(dict(call.arguments), ensure_ascii=False)})",
                        {"tool_call_id": call.id, "name": call.name},
                    )
                )
                outcome = await _call(toolbox, call)
                traces.append(
                    Trace(
                        Sender.TOOL_RESULT.value,
                        outcome.text,
                        {"tool_call_id": call.id, "name": call.name, "is_error": outcome.is_error},
                    )
                )
                messages.append(
                    ContextMessage(
                        "tool",
                        outcome.text,
                        tool_call_id=call.id,
                        tool_name=call.name,
                        is_error=outcome.is_error,
                    )
                )


async def _call(toolbox: Toolbox, call: ToolCall) -> ToolOutcome:
    try:
        return await toolbox.call(call.name, call.arguments)
    except ProviderError:
        raise
    except Exception as exc:  # a tool's failure is the model's to see, not the turn's
        log.warning("tool.failed", tool=call.name, error=f"{type(exc).__name__}: {exc}")
        return ToolOutcome(f"{call.name} failed: {exc}", is_error=True)


def _meta(response: ModelResponse, calls: int, usage: Mapping[str, int], cost: float | None) -> str:
    parts = [f"model {response.model or '?'}", f"{calls} call{'s' if calls != 1 else ''}"]
    parts.append(f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens")
    if cost is not None:
        parts.append(f"${cost:.6f}")
    if response.stop_reason:
        parts.append(f"stop: {response.stop_reason}")
    return " · ".join(parts)
