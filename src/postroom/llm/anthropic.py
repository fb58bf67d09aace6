"""Anthropic's Messages API (PIPELINE §4), through the official ``anthropic`` SDK.

How a :class:`ModelRequest` is sent:

- the system prompt goes in ``system=``; the API has no mid-history system role we rely on, so a
  stored ``system`` row becomes a user text block ``[system] …`` and a stored command output a
  user text block ``[command output, exit N] …``;
- an ``assistant`` message becomes its text block (when not blank) and one ``tool_use`` block per
  tool call; an in-run ``tool`` message becomes a user ``tool_result`` block;
- consecutive messages of one role are merged into one message of several blocks (the API wants
  user and assistant to alternate), tool results first in their user message (the API requires
  them before any text);
- a user message's images and PDFs become ``image`` and ``document`` blocks (base64 sources)
  ahead of its text;
- the first message must be the user's: leading assistant messages (a history that starts with an
  answer, e.g. after compaction) are dropped rather than faked into a user turn. Blank text is
  dropped too (the API refuses empty text blocks).

SDK exceptions never leave this module: they become :class:`ProviderError` or
:class:`RateLimited`, chained ``from exc``. Messages name the account label, never the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

import anthropic
import httpx2
from anthropic.types import (
    AssistantMessageParam,
    Base64ImageSourceParam,
    Base64PDFSourceParam,
    DocumentBlockParam,
    ImageBlockParam,
    InputJSONDelta,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextBlockParam,
    TextDelta,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
    UserMessageParam,
)

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
    unreadable,
)

__all__ = ["AnthropicProvider"]

_Block = (
    TextBlockParam | ToolUseBlockParam | ToolResultBlockParam | ImageBlockParam | DocumentBlockParam
)

# Error types the API reports in a body, and in a stream's ``error`` event (sent with HTTP 200).
_LIMIT_TYPES = frozenset({"rate_limit_error", "overloaded_error"})
_AUTH_TYPES = frozenset({"authentication_error", "permission_error"})
_TRANSIENT_TYPES = frozenset({"api_error", "timeout_error"})


class AnthropicProvider:
    """One Anthropic account: ``account`` is the label reported in responses and errors."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        account: str,
        base_url: str | None = None,
        default_model: str = "claude-sonnet-4-6",
        stream: bool = False,
        timeout_s: float = 120.0,
    ) -> None:
        self.account = account
        self._label = f"anthropic account {account!r}"
        self.default_model = default_model
        self._stream = stream
        self._key = api_key
        # Retries are the account pool's job (it moves on to the next account at once).
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        )

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections."""
        await self._client.close()

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        messages = _messages(request.messages)
        if not messages:
            raise ProviderError(
                f"{self._label}: the request has no user message to send",
                retryable=False,
                public="anthropic got no user message to answer",
            )
        model = request.model or self.default_model
        try:
            if self._stream:
                return await self._complete_streaming(request, model, messages, sink)
            return await self._complete_once(request, model, messages)
        except anthropic.AnthropicError as exc:
            raise self._translate(exc) from exc
        except httpx2.TransportError as exc:  # raised while a stream is being read
            raise ProviderError(
                f"{self._label}: the connection broke mid-answer ({type(exc).__name__})",
                public="anthropic's answer was cut off",
            ) from exc
        except UNREADABLE_ERRORS as exc:  # a body of another shape than the API's
            raise unreadable(self.name, self._label, exc) from exc

    async def check(self) -> str:
        try:
            page = await self._client.models.list(limit=1)
        except anthropic.AnthropicError as exc:
            raise self._translate(exc) from exc
        listed = f"; the API lists {page.data[0].id}" if page.data else ""
        return f"{self._label}: key accepted{listed}"

    async def _complete_once(
        self, request: ModelRequest, model: str, messages: list[MessageParam]
    ) -> ModelResponse:
        raw = await self._client.messages.with_raw_response.create(
            model=model,
            max_tokens=request.max_tokens,
            system=request.system or anthropic.omit,
            messages=messages,
            tools=_tools(request.tools) or anthropic.omit,
        )
        message = await raw.parse()
        calls = tuple(
            ToolCall(id=block.id, name=block.name, arguments=dict(block.input))
            for block in message.content
            if isinstance(block, ToolUseBlock)
        )
        return ModelResponse(
            text="".join(b.text for b in message.content if isinstance(b, TextBlock)),
            raw=await raw.text(),
            model=message.model,
            account=self.account,
            usage={
                "input_tokens": message.usage.input_tokens,
                "output_tokens": message.usage.output_tokens,
            },
            tool_calls=calls,
            stop_reason=message.stop_reason,
        )

    async def _complete_streaming(
        self,
        request: ModelRequest,
        model: str,
        messages: list[MessageParam],
        sink: TextSink | None,
    ) -> ModelResponse:
        stream = await self._client.messages.create(
            model=model,
            max_tokens=request.max_tokens,
            system=request.system or anthropic.omit,
            messages=messages,
            tools=_tools(request.tools) or anthropic.omit,
            stream=True,
        )
        answer = _StreamedAnswer(sink)
        async with stream:
            async for event in stream:
                answer.add(event)
        if not answer.stopped:
            raise ProviderError(
                f"{self._label}: the stream ended before message_stop",
                public="anthropic's answer was cut off",
            )
        return answer.response(account=self.account, fallback_model=model)

    def _translate(self, exc: anthropic.AnthropicError) -> ProviderError:
        label = self._label
        if isinstance(exc, anthropic.APIStatusError):
            status, kind = exc.status_code, exc.type
            if status in (429, 529) or kind in _LIMIT_TYPES:
                overloaded = status == 529 or kind == "overloaded_error"
                why = "overloaded" if overloaded else "rate limited"
                where = "mid-stream" if status == 200 else f"HTTP {status}"
                return RateLimited(
                    f"{label}: {why} ({where})",
                    retry_after=parse_retry_after(
                        exc.response.headers.get("retry-after"),
                        now=datetime.now(UTC),
                        millis=exc.response.headers.get("retry-after-ms"),
                    ),
                    public=f"anthropic is {why}",
                )
            if status in (401, 403) or kind in _AUTH_TYPES:
                return ProviderError(
                    f"{label}: the API key was refused (HTTP {status})",
                    retryable=False,
                    public=f"anthropic refused the API key (HTTP {status})",
                )
            detail = self._scrub(exc.api_message or exc.message)[:300]
            retryable = status >= 500 or status in (200, 408, 409) or kind in _TRANSIENT_TYPES
            public = (
                "anthropic reported an error in the middle of its answer"
                if status == 200
                else f"anthropic answered HTTP {status}"
            )
            return ProviderError(
                f"{label}: HTTP {status}: {detail}", retryable=retryable, public=public
            )
        if isinstance(exc, anthropic.APITimeoutError):
            return ProviderError(
                f"{label}: the request timed out", public="anthropic did not answer in time"
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return ProviderError(
                f"{label}: connection failed ({exc.message})",
                public="anthropic could not be reached",
            )
        if isinstance(exc, anthropic.APIResponseValidationError):
            return unreadable(self.name, label, exc)
        if isinstance(exc, anthropic.APIError):
            return ProviderError(
                f"{label}: {self._scrub(exc.message)}",
                public="anthropic reported an error in the middle of its answer",
            )
        return ProviderError(
            f"{label}: {type(exc).__name__}", retryable=False, public="anthropic could not be used"
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "[key]") if self._key else text


class _StreamedAnswer:
    """The answer put back together from the stream's events, as the non-streaming body reads."""

    def __init__(self, sink: TextSink | None) -> None:
        self.stopped = False
        self._sink = sink
        self._start: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._usage: dict[str, int] = {}

    def add(self, event: RawMessageStreamEvent) -> None:
        if isinstance(event, RawMessageStartEvent):
            self._start = event.message.model_dump(
                mode="json", exclude={"content"}, exclude_unset=True
            )
            self._usage = {
                "input_tokens": event.message.usage.input_tokens,
                "output_tokens": event.message.usage.output_tokens,
            }
        elif isinstance(event, RawContentBlockStartEvent):
            self._blocks[event.index] = event.content_block.model_dump(
                mode="json", exclude_unset=True
            )
        elif isinstance(event, RawContentBlockDeltaEvent):
            block = self._blocks.setdefault(event.index, {"type": "text", "text": ""})
            if isinstance(event.delta, TextDelta):
                block["text"] = block.get("text", "") + event.delta.text
                if self._sink is not None:
                    self._sink.write(event.delta.text)
            elif isinstance(event.delta, InputJSONDelta):
                self._json[event.index] = self._json.get(event.index, "") + event.delta.partial_json
        elif isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason
            self._stop_sequence = event.delta.stop_sequence
            self._usage["output_tokens"] = event.usage.output_tokens
            if event.usage.input_tokens is not None:
                self._usage["input_tokens"] = event.usage.input_tokens
        elif isinstance(event, RawMessageStopEvent):
            self.stopped = True

    def response(self, *, account: str, fallback_model: str) -> ModelResponse:
        for index, text in self._json.items():
            self._blocks.setdefault(index, {"type": "tool_use"})["input"] = _arguments(text)
        content = [self._blocks[i] for i in sorted(self._blocks)]
        body = {
            **self._start,
            "content": content,
            "stop_reason": self._stop_reason,
            "stop_sequence": self._stop_sequence,
            "usage": {**self._start.get("usage", {}), **self._usage},
        }
        calls = tuple(
            ToolCall(id=str(b.get("id", "")), name=str(b.get("name", "")), arguments=b["input"])
            for b in content
            if b.get("type") == "tool_use" and isinstance(b.get("input"), dict)
        )
        model = self._start.get("model")
        return ModelResponse(
            text="".join(str(b.get("text", "")) for b in content if b.get("type") == "text"),
            raw=json.dumps(body, ensure_ascii=False),
            model=model if isinstance(model, str) else fallback_model,
            account=account,
            usage={
                "input_tokens": self._usage.get("input_tokens", 0),
                "output_tokens": self._usage.get("output_tokens", 0),
            },
            tool_calls=calls,
            stop_reason=self._stop_reason,
        )


def _arguments(text: str) -> dict[str, Any]:
    """A tool call's streamed JSON input; what the model wrote, kept, when it is not an object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _messages(messages: Sequence[ContextMessage]) -> list[MessageParam]:
    turns: list[tuple[str, list[_Block]]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    while turns and turns[0][0] == "assistant":
        turns.pop(0)
    out: list[MessageParam] = []
    for role, blocks in turns:
        if role == "assistant":
            out.append(AssistantMessageParam(role="assistant", content=blocks))
        else:
            results: list[_Block] = [b for b in blocks if b["type"] == "tool_result"]
            rest: list[_Block] = [b for b in blocks if b["type"] != "tool_result"]
            out.append(UserMessageParam(role="user", content=results + rest))
    return out


def _blocks(message: ContextMessage) -> tuple[str, list[_Block]]:
    role = message.role
    if role == "assistant":
        blocks: list[_Block] = []
        if message.content.strip():
            blocks.append(TextBlockParam(type="text", text=message.content))
        blocks.extend(
            ToolUseBlockParam(
                type="tool_use", id=call.id, name=call.name, input=dict(call.arguments)
            )
            for call in message.tool_calls
        )
        return "assistant", blocks
    if role == "tool":
        result = ToolResultBlockParam(
            type="tool_result",
            tool_use_id=message.tool_call_id or "",
            is_error=message.is_error,
        )
        if message.content:
            result["content"] = message.content
        return "user", [result]
    if role == "system":
        text = f"[system] {message.content}"
    elif role == "tool_result":
        text = f"[command output, exit {message.exit_code or 0}] {message.content}"
    else:
        return "user", _user_blocks(message)
    return "user", [TextBlockParam(type="text", text=text)] if text.strip() else []


def _user_blocks(message: ContextMessage) -> list[_Block]:
    """A user message: its images and PDFs as base64 blocks, then its text (the API reads
    pictures best before the question about them)."""
    blocks: list[_Block] = []
    for part in message.media:
        if part.as_kind == "image":
            blocks.append(
                ImageBlockParam(
                    type="image",
                    source=Base64ImageSourceParam(
                        type="base64", media_type=_image_type(part.mime), data=base64_of(part)
                    ),
                )
            )
        else:
            blocks.append(
                DocumentBlockParam(
                    type="document",
                    source=Base64PDFSourceParam(
                        type="base64", media_type="application/pdf", data=base64_of(part)
                    ),
                )
            )
    if message.content.strip():
        blocks.append(TextBlockParam(type="text", text=message.content))
    return blocks


_ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


def _image_type(mime: str) -> _ImageType:
    # Context building sends only these four as images (core.attachments.IMAGE_MIMES).
    for known in get_args(_ImageType):
        if mime == known:
            return cast(_ImageType, known)
    return "image/png"


def _tools(tools: Sequence[ToolSpec]) -> list[ToolParam]:
    return [
        ToolParam(name=t.name, description=t.description, input_schema=dict(t.parameters))
        for t in tools
    ]
