"""OpenAI's Chat Completions API (PIPELINE §4), through the official ``openai`` SDK — and so every
OpenAI-compatible server (Ollama's ``/v1``, vLLM, OpenRouter, LM Studio) reached by ``base_url``;
``name`` lets a configuration call such a server by its own name.

How a :class:`ModelRequest` is sent:

- the system prompt is the first ``system`` message; a stored ``system`` row stays a ``system``
  message where it stands; a stored command output becomes a user message
  ``[command output, exit N] …``;
- an ``assistant`` message carries its ``tool_calls`` (arguments as JSON text); an in-run
  ``tool`` message becomes a ``tool`` message with its ``tool_call_id`` (the API has no error flag:
  a failed tool's content is prefixed ``[error]``);
- a user message with attachments becomes content parts: its text, each image as an
  ``image_url`` data URL, each PDF as a ``file`` part (OpenAI's own API only);
- roles need not alternate here, so nothing is merged.

SDK exceptions never leave this module: they become :class:`ProviderError` or
:class:`RateLimited`, chained ``from exc``. Messages name the account label, never the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionContentPartImageParam,
    ChatCompletionContentPartParam,
    ChatCompletionContentPartTextParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.chat_completion_content_part_param import File, FileFile

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
    unreadable,
)

__all__ = ["OpenAIProvider"]

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class OpenAIProvider:
    """One account of an OpenAI-compatible API: ``account`` is the label reported in responses
    and errors.

    ``max_tokens_field`` names the request field that carries ``ModelRequest.max_tokens``:
    ``max_tokens`` (the default) is what every compatible server reads; OpenAI's reasoning
    models accept only ``max_completion_tokens``.
    """

    def __init__(
        self,
        *,
        api_key: str,
        account: str,
        base_url: str | None = None,
        default_model: str = "gpt-4o-mini",
        stream: bool = False,
        timeout_s: float = 120.0,
        name: str = "openai",
        max_tokens_field: MaxTokensField = "max_tokens",
    ) -> None:
        self.name = name
        self.account = account
        self._label = f"{name} account {account!r}"
        self.default_model = default_model
        self._stream = stream
        self._key = api_key
        self._max_tokens_field = max_tokens_field
        try:
            # Retries are the account pool's job (it moves on to the next account at once).
            self._client = openai.AsyncOpenAI(
                api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
            )
        except openai.OpenAIError as exc:  # an empty key: a server without keys wants any text
            raise ProviderError(
                f"{self._label}: no API key given",
                retryable=False,
                public=f"{name} has no API key configured",
            ) from exc

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections."""
        await self._client.close()

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        model = request.model or self.default_model
        try:
            if self._stream:
                return await self._complete_streaming(request, model, sink)
            return await self._complete_once(request, model)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        except httpx2.TransportError as exc:  # raised while a stream is being read
            raise ProviderError(
                f"{self._label}: the connection broke mid-answer ({type(exc).__name__})",
                public=f"{self.name}'s answer was cut off",
            ) from exc
        except UNREADABLE_ERRORS as exc:  # a body of another shape than the API's
            raise unreadable(self.name, self._label, exc) from exc

    async def check(self) -> str:
        try:
            page = await self._client.models.list()
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        ids = {model.id for model in page.data}
        found = "listed" if self.default_model in ids else "not listed"
        return (
            f"{self._label}: key accepted; {len(ids)} models, "
            f"default model {self.default_model} {found}"
        )

    async def _complete_once(self, request: ModelRequest, model: str) -> ModelResponse:
        raw = await self._client.chat.completions.with_raw_response.create(
            model=model,
            messages=_messages(request.system, request.messages, documents=self.name == "openai"),
            tools=_tools(request.tools) or openai.omit,
            max_tokens=self._limit(request, "max_tokens"),
            max_completion_tokens=self._limit(request, "max_completion_tokens"),
        )
        completion = raw.parse()
        if not completion.choices:
            raise ProviderError(
                f"{self._label}: the answer has no choices",
                public=f"{self.name}'s answer could not be read",
            )
        choice = completion.choices[0]
        calls = tuple(
            ToolCall(
                id=call.id or f"call_{index}",
                name=call.function.name,
                arguments=_arguments(call.function.arguments),
            )
            for index, call in enumerate(choice.message.tool_calls or ())
            if isinstance(call, ChatCompletionMessageFunctionToolCall)
        )
        usage = completion.usage
        return ModelResponse(
            text=choice.message.content or "",
            raw=raw.text,
            model=completion.model or model,
            account=self.account,
            usage={
                "input_tokens": usage.prompt_tokens if usage else 0,
                "output_tokens": usage.completion_tokens if usage else 0,
            },
            tool_calls=calls,
            stop_reason=choice.finish_reason,
        )

    async def _complete_streaming(
        self, request: ModelRequest, model: str, sink: TextSink | None
    ) -> ModelResponse:
        stream = await self._client.chat.completions.create(
            model=model,
            messages=_messages(request.system, request.messages, documents=self.name == "openai"),
            tools=_tools(request.tools) or openai.omit,
            max_tokens=self._limit(request, "max_tokens"),
            max_completion_tokens=self._limit(request, "max_completion_tokens"),
            stream=True,
            stream_options={"include_usage": True},
        )
        answer = _StreamedAnswer(fallback_model=model, sink=sink)
        async with stream:
            async for chunk in stream:
                answer.add(chunk)
        if answer.finish_reason is None:
            raise ProviderError(
                f"{self._label}: the stream ended before a finish_reason",
                public=f"{self.name}'s answer was cut off",
            )
        return answer.response(account=self.account)

    def _limit(self, request: ModelRequest, field: MaxTokensField) -> int | openai.Omit:
        return request.max_tokens if field == self._max_tokens_field else openai.omit

    def _translate(self, exc: openai.OpenAIError) -> ProviderError:
        label, name = self._label, self.name
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status in (429, 529):
                return RateLimited(
                    f"{label}: rate limited (HTTP {status})",
                    retry_after=parse_retry_after(
                        exc.response.headers.get("retry-after"),
                        now=datetime.now(UTC),
                        millis=exc.response.headers.get("retry-after-ms"),
                    ),
                    public=f"{name} is rate limiting (HTTP {status})",
                )
            if status in (401, 403):
                # OpenAI's own message quotes part of the key: it is left out.
                return ProviderError(
                    f"{label}: the API key was refused (HTTP {status})",
                    retryable=False,
                    public=f"{name} refused the API key (HTTP {status})",
                )
            detail = self._scrub(_api_message(exc.body) or exc.message)[:300]
            retryable = status >= 500 or status in (408, 409)
            return ProviderError(
                f"{label}: HTTP {status}: {detail}",
                retryable=retryable,
                public=f"{name} answered HTTP {status}",
            )
        if isinstance(exc, openai.APITimeoutError):
            return ProviderError(
                f"{label}: the request timed out", public=f"{name} did not answer in time"
            )
        if isinstance(exc, openai.APIConnectionError):
            return ProviderError(
                f"{label}: connection failed ({exc.message})", public=f"{name} could not be reached"
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return unreadable(name, label, exc)
        if isinstance(exc, openai.APIError):  # e.g. an error event in the middle of a stream
            if _error_code(exc.body) in ("429", "rate_limit_exceeded"):
                return RateLimited(
                    f"{label}: rate limited mid-stream", public=f"{name} is rate limiting"
                )
            return ProviderError(
                f"{label}: {self._scrub(exc.message)}",
                public=f"{name} reported an error in the middle of its answer",
            )
        return ProviderError(
            f"{label}: {type(exc).__name__}",
            retryable=False,
            public=f"{name} could not be used",
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "[key]") if self._key else text


class _StreamedAnswer:
    """The answer put back together from the chunks, shaped like the non-streaming body."""

    def __init__(self, *, fallback_model: str, sink: TextSink | None) -> None:
        self.finish_reason: str | None = None
        self._sink = sink
        self._id = ""
        self._created = 0
        self._model = fallback_model
        self._text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._usage: dict[str, Any] | None = None

    def add(self, chunk: ChatCompletionChunk) -> None:
        self._id = chunk.id or self._id
        self._created = chunk.created or self._created
        self._model = chunk.model or self._model
        if chunk.usage is not None:
            self._usage = chunk.usage.model_dump(mode="json", exclude_unset=True)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.delta.content:
                self._text.append(choice.delta.content)
                if self._sink is not None:
                    self._sink.write(choice.delta.content)
            for delta in choice.delta.tool_calls or ():
                call = self._calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                if delta.id:
                    call["id"] = delta.id
                if delta.function and delta.function.name:
                    call["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    call["arguments"] += delta.function.arguments
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def response(self, *, account: str) -> ModelResponse:
        text = "".join(self._text)
        ordered = [self._calls[i] for i in sorted(self._calls)]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if ordered:
            message["tool_calls"] = [
                {
                    "id": c["id"] or f"call_{n}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for n, c in enumerate(ordered)
            ]
        body = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self._usage,
        }
        usage = self._usage or {}
        return ModelResponse(
            text=text,
            raw=json.dumps(body, ensure_ascii=False),
            model=self._model,
            account=account,
            usage={
                "input_tokens": int(usage.get("prompt_tokens") or 0),
                "output_tokens": int(usage.get("completion_tokens") or 0),
            },
            tool_calls=tuple(
                ToolCall(
                    id=c["id"] or f"call_{n}",
                    name=c["name"],
                    arguments=_arguments(c["arguments"]),
                )
                for n, c in enumerate(ordered)
            ),
            stop_reason=self.finish_reason,
        )


def _messages(
    system: str, messages: Sequence[ContextMessage], *, documents: bool
) -> list[ChatCompletionMessageParam]:
    """The request's messages; *documents*: PDFs go as file parts (OpenAI's own API; other
    servers speaking its protocol get a line naming the file instead)."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append(ChatCompletionSystemMessageParam(role="system", content=system))
    for message in messages:
        out.append(_message(message, documents))
    return out


def _message(message: ContextMessage, documents: bool) -> ChatCompletionMessageParam:
    role = message.role
    if role == "assistant":
        if not message.tool_calls:
            return ChatCompletionAssistantMessageParam(role="assistant", content=message.content)
        return ChatCompletionAssistantMessageParam(
            role="assistant",
            content=message.content or None,
            tool_calls=[
                ChatCompletionMessageFunctionToolCallParam(
                    id=call.id,
                    type="function",
                    function={"name": call.name, "arguments": json.dumps(dict(call.arguments))},
                )
                for call in message.tool_calls
            ],
        )
    if role == "tool":
        content = f"[error] {message.content}" if message.is_error else message.content
        return ChatCompletionToolMessageParam(
            role="tool", tool_call_id=message.tool_call_id or "", content=content
        )
    if role == "system":
        return ChatCompletionSystemMessageParam(role="system", content=message.content)
    if role == "tool_result":
        text = f"[command output, exit {message.exit_code or 0}] {message.content}"
        return ChatCompletionUserMessageParam(role="user", content=text)
    if not message.media:
        return ChatCompletionUserMessageParam(role="user", content=message.content)
    return ChatCompletionUserMessageParam(role="user", content=_user_parts(message, documents))


def _user_parts(message: ContextMessage, documents: bool) -> list[ChatCompletionContentPartParam]:
    """A user message with attachments: its text (with a line for each file not sent), then
    each image as a data URL, then each PDF as a file part when the API takes them."""
    sent = frozenset({"image", "document"} if documents else {"image"})
    parts: list[ChatCompletionContentPartParam] = [
        ChatCompletionContentPartTextParam(
            type="text", text=text_with_placeholders(message, sent=sent)
        )
    ]
    for part in message.media:
        url = f"data:{part.mime};base64,{base64_of(part)}"
        if part.as_kind == "image":
            parts.append(
                ChatCompletionContentPartImageParam(type="image_url", image_url={"url": url})
            )
        elif documents:
            parts.append(
                File(
                    type="file", file=FileFile(filename=part.name or "document.pdf", file_data=url)
                )
            )
    return parts


def _tools(tools: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        ChatCompletionFunctionToolParam(
            type="function",
            function={
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        )
        for t in tools
    ]


def _arguments(text: str) -> dict[str, Any]:
    """A tool call's JSON arguments; what the model wrote, kept, when it is not an object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _api_message(body: object) -> str | None:
    """``error.message`` of an error body (OpenAI's shape; compatible servers mostly follow it),
    or the start of a body that is not JSON (a proxy's error page)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()
    return None


def _error_code(body: object) -> str | None:
    """``code`` of an error object (a stream's error event carries the object itself)."""
    if isinstance(body, dict) and body.get("code") is not None:
        return str(body["code"])
    return None
