"""The ``echo`` provider: answers with this turn's new input, so the whole pipeline runs before a
real model is configured (PIPELINE §4)."""

from __future__ import annotations

import asyncio

from postroom.core.context import ContextMessage
from postroom.llm.base import ModelRequest, ModelResponse, TextSink, text_with_placeholders

__all__ = ["EchoProvider", "render_for_echo"]


def render_for_echo(message: ContextMessage) -> str:
    """A message as a provider without system/tool roles would receive it."""
    if message.role == "system":
        return f"[system] {message.content}"
    if message.role == "tool_result":
        return f"[command output, exit {message.exit_code or 0}] {message.content}"
    if message.role == "tool":
        return f"[tool {message.tool_name or ''} result] {message.content}"
    return text_with_placeholders(message)


class EchoProvider:
    """Echoes the messages after the last assistant message, joined by newlines; never the
    system prompt. ``delay_ms`` slows every answer down (for tests of concurrency and crashes)."""

    name = "echo"

    def __init__(self, *, delay_ms: int = 0) -> None:
        self._delay_s = delay_ms / 1000

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        messages = list(request.messages)
        last_assistant = max(
            (i for i, m in enumerate(messages) if m.role == "assistant"), default=-1
        )
        text = "\n".join(render_for_echo(m) for m in messages[last_assistant + 1 :])
        return ModelResponse(
            text=text,
            raw=text,
            model="echo",
            usage={"input_tokens": 0, "output_tokens": 0},
            cost=0.0,
            stop_reason="end_turn",
        )

    async def check(self) -> str:
        return "echo answers with the new input (no model configured)"
