"""Google Gemini's ``generateContent`` API (PIPELINE §4), through the ``google-genai`` SDK.

How a :class:`ModelRequest` is sent:

- the system prompt goes in ``system_instruction``; the API has only ``user`` and ``model``
  turns, so a stored ``system`` row becomes a user text part ``[system] …`` and a stored command
  output a user text part ``[command output, exit N] …``;
- an ``assistant`` message becomes a ``model`` turn: its text part (when not blank) and one
  ``function_call`` part per tool call; an in-run ``tool`` message becomes a user
  ``function_response`` part (``{"output": …}``, or ``{"error": …}`` when the tool failed);
- consecutive turns of one role are merged into one turn of several parts (the API wants user
  and model to alternate).

Gemini gives function calls no id (or an optional one), so a call's id is Gemini's own when
given, else ``call_{index}`` (its position in the answer); a function response names its
function, found through the id of the call it answers. A call's *thought signature* (which
Gemini 3 requires back with the call) rides in the id after a ``#``, so it survives the tool
loop, a change of account and a retried run without any state here.

SDK exceptions never leave this module: they become :class:`ProviderError` or
:class:`RateLimited`, chained ``from exc``. Messages name the account label, never the key.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

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
    unreadable,
)
from postroom.llm.echo import render_for_echo

__all__ = ["GeminiProvider"]

_SYNTHETIC_ID = re.compile(r"call_\d+")
_SIGNATURE_MARK = "#"
_RETRY_DELAY = re.compile(r"(\d+(?:\.\d+)?)s")
_STOP_REASONS = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
# Failures below HTTP: connection refused, timeouts, a stream cut short. google-genai sends
# through httpx2 (httpx, or aiohttp when installed: its connection errors are OSError or
# TimeoutError subclasses).
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx2.TransportError,
    httpx.TransportError,
    TimeoutError,
    OSError,
)


class GeminiProvider:
    """One Gemini API key: ``account`` is the label reported in responses and errors."""

    name = "gemini"

    def __init__(
        self,
        *,
        api_key: str,
        account: str,
        base_url: str | None = None,
        default_model: str = "gemini-2.5-flash",
        stream: bool = False,
        timeout_s: float = 120.0,
    ) -> None:
        self.account = account
        self.default_model = default_model
        self._stream = stream
        self._key = api_key
        # No retry options: retries are the account pool's job. ``vertexai=False`` keeps the
        # SDK from switching backends on GOOGLE_GENAI_USE_VERTEXAI in the environment.
        # Our own httpx client: with aiohttp installed (other SDKs bring it) the SDK would
        # otherwise switch transports, and its aiohttp session class is deprecated.
        self._http = httpx.AsyncClient(timeout=timeout_s)
        options = genai_types.HttpOptions(
            base_url=base_url.rstrip("/") + "/" if base_url else None,
            api_version="v1beta",
            timeout=max(1, math.ceil(timeout_s * 1000)),
            httpx_async_client=self._http,
        )
        self._client = genai.Client(vertexai=False, api_key=api_key, http_options=options)

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections."""
        await self._client.aio.aclose()
        await self._http.aclose()

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        model = request.model or self.default_model
        contents = _contents(request.messages)
        config = genai_types.GenerateContentConfig(
            system_instruction=request.system or None,
            max_output_tokens=request.max_tokens,
            tools=_tools(request.tools),
            automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
        )
        chunks: list[genai_types.GenerateContentResponse] = []
        try:
            if self._stream:
                stream = await self._client.aio.models.generate_content_stream(
                    model=model, contents=contents, config=config
                )
                async for chunk in stream:
                    chunks.append(chunk)
                    if sink is not None:
                        _write_text(sink, chunk)
            else:
                chunks.append(
                    await self._client.aio.models.generate_content(
                        model=model, contents=contents, config=config
                    )
                )
            return self._response(chunks, model)
        except genai_errors.APIError as exc:
            raise self._translate(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        except UNREADABLE_ERRORS as exc:  # a body of another shape than the API's
            raise unreadable(self.name, f"gemini account {self.account!r}", exc) from exc

    async def check(self) -> str:
        try:
            found = await self._client.aio.models.get(model=self.default_model)
        except genai_errors.APIError as exc:
            raise self._translate(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        shown = found.display_name or found.name or self.default_model
        return f"gemini account {self.account!r}: key accepted; {self.default_model} is {shown}"

    def _response(
        self, chunks: Sequence[genai_types.GenerateContentResponse], model: str
    ) -> ModelResponse:
        parts: list[genai_types.Part] = []
        finish: genai_types.FinishReason | None = None
        usage: genai_types.GenerateContentResponseUsageMetadata | None = None
        version: str | None = None
        block: str | None = None
        for chunk in chunks:
            usage = chunk.usage_metadata or usage
            version = chunk.model_version or version
            if chunk.prompt_feedback and chunk.prompt_feedback.block_reason:
                block = chunk.prompt_feedback.block_reason.value
            if not chunk.candidates:
                continue
            candidate = chunk.candidates[0]
            finish = candidate.finish_reason or finish
            if candidate.content and candidate.content.parts:
                parts.extend(candidate.content.parts)
        if block is not None and not parts:
            raise ProviderError(
                f"gemini: the prompt was blocked ({block})",
                retryable=False,
                public=f"gemini blocked the prompt ({block})",
            )
        if not chunks or (finish is None and not parts):
            raise ProviderError(
                f"gemini: an answer without content for account {self.account!r}",
                public="gemini's answer could not be read",
            )
        text, calls = _answer(parts)
        if calls:
            stop: str | None = "tool_use"
        elif finish is not None:
            stop = _STOP_REASONS.get(finish.value, finish.value.lower())
        else:
            stop = None
        return ModelResponse(
            text=text,
            raw="\n".join(_wire_json(chunk) for chunk in chunks),
            model=version or model,
            account=self.account,
            usage={
                "input_tokens": (usage.prompt_token_count or 0) if usage else 0,
                # Thinking is billed as output.
                "output_tokens": (
                    (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
                    if usage
                    else 0
                ),
            },
            tool_calls=calls,
            stop_reason=stop,
        )

    def _unreachable(self, exc: BaseException) -> ProviderError:
        return ProviderError(
            f"gemini: no answer for account {self.account!r} ({type(exc).__name__})",
            public="gemini could not be reached",
        )

    def _translate(self, exc: genai_errors.APIError) -> ProviderError:
        code = exc.code or 0  # None when a body said nothing: treat it as a server fault
        status = (exc.status or "").upper()
        text = self._scrub(exc.message or status or "no message")
        if code == 429 or status == "RESOURCE_EXHAUSTED":
            return RateLimited(
                f"gemini: account {self.account!r} is rate-limited (HTTP {code}): {text}",
                retry_after=_retry_after(exc),
                public=f"gemini is rate limiting (HTTP {code})",
            )
        if code == 503 and "overload" in text.lower():
            return RateLimited(
                f"gemini: the model is overloaded (HTTP 503): {text}",
                retry_after=_retry_after(exc),
                public="gemini is overloaded",
            )
        if (
            code in (401, 403)
            or status in ("UNAUTHENTICATED", "PERMISSION_DENIED")
            or _bad_key(exc)
        ):
            return ProviderError(
                f"gemini: the API key of account {self.account!r} was refused "
                f"(HTTP {code}): {text}",
                retryable=False,
                public=f"gemini refused the API key (HTTP {code})",
            )
        answered = f"gemini answered HTTP {code}" if code else "gemini answered with an error"
        if code in (0, 408) or code >= 500:
            return ProviderError(
                f"gemini: server error (HTTP {code} {status}): {text}", public=answered
            )
        return ProviderError(
            f"gemini: the request was refused (HTTP {code} {status}): {text}",
            retryable=False,
            public=answered,
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "[key]") if self._key else text


def _contents(messages: Sequence[ContextMessage]) -> list[genai_types.Content]:
    """Turns in API order; consecutive turns of one role merged."""
    names: dict[str, str] = {}
    turns: list[tuple[str, list[genai_types.Part]]] = []
    for message in messages:
        role, parts = _turn(message, names)
        if not parts:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(parts)
        else:
            turns.append((role, parts))
    return [genai_types.Content(role=role, parts=parts) for role, parts in turns]


def _turn(message: ContextMessage, names: dict[str, str]) -> tuple[str, list[genai_types.Part]]:
    """One message's role and parts. *names* maps the ids of calls seen so far to functions."""
    text = [genai_types.Part(text=message.content)] if message.content.strip() else []
    if message.role == "user":
        # Images and PDFs go inline, with their MIME type, ahead of the text.
        media = [
            genai_types.Part(inline_data=genai_types.Blob(mime_type=part.mime, data=part.data))
            for part in message.media
        ]
        return "user", media + text
    if message.role == "assistant":
        calls = []
        for call in message.tool_calls:
            names[call.id] = call.name
            call_id, signature = _split_call_id(call.id)
            calls.append(
                genai_types.Part(
                    function_call=genai_types.FunctionCall(
                        id=call_id, name=call.name, args=dict(call.arguments)
                    ),
                    thought_signature=signature,
                )
            )
        return "model", text + calls
    if message.role in ("system", "tool_result"):
        return "user", [genai_types.Part(text=render_for_echo(message))]
    if message.role == "tool":
        call_id, _ = _split_call_id(message.tool_call_id or "")
        name = message.tool_name or names.get(message.tool_call_id or "", "")
        key = "error" if message.is_error else "output"
        response = genai_types.FunctionResponse(
            id=call_id, name=name, response={key: message.content}
        )
        return "user", [genai_types.Part(function_response=response)]
    raise ValueError(f"a context message of unknown role {message.role!r}")


def _tools(tools: Sequence[ToolSpec]) -> list[genai_types.Tool] | None:
    if not tools:
        return None
    declarations = [
        genai_types.FunctionDeclaration(
            name=tool.name,
            description=tool.description,
            # The JSON Schema as given: ``parameters`` would want Gemini's OpenAPI subset.
            parameters_json_schema=dict(tool.parameters),
        )
        for tool in tools
    ]
    return [genai_types.Tool(function_declarations=declarations)]


def _write_text(sink: TextSink, chunk: genai_types.GenerateContentResponse) -> None:
    """The answer's text in one streamed chunk (thoughts left out), to *sink*."""
    content = chunk.candidates[0].content if chunk.candidates else None
    parts = (content.parts if content is not None else None) or ()
    for part in parts:
        if part.text and not part.thought and part.function_call is None:
            sink.write(part.text)


def _answer(parts: Sequence[genai_types.Part]) -> tuple[str, tuple[ToolCall, ...]]:
    """The answer's text (thoughts left out) and the function calls it asks for."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for part in parts:
        if part.function_call is not None:
            call = part.function_call
            calls.append(
                ToolCall(
                    id=_call_id(call.id, len(calls), part.thought_signature),
                    name=call.name or "",
                    arguments=dict(call.args or {}),
                )
            )
        elif part.text and not part.thought:
            texts.append(part.text)
    return "".join(texts), tuple(calls)


def _call_id(gemini_id: str | None, index: int, signature: bytes | None) -> str:
    base = gemini_id or f"call_{index}"
    if not signature:
        return base
    return f"{base}{_SIGNATURE_MARK}{base64.urlsafe_b64encode(signature).decode()}"


def _split_call_id(call_id: str) -> tuple[str | None, bytes | None]:
    """Gemini's own id of a call (None for one made up here) and its thought signature."""
    base, _, encoded = call_id.partition(_SIGNATURE_MARK)
    signature: bytes | None = None
    if encoded:
        try:
            signature = base64.urlsafe_b64decode(encoded)
        except (binascii.Error, ValueError):
            signature = None
    if not base or _SYNTHETIC_ID.fullmatch(base):
        return None, signature
    return base, signature


def _wire_json(chunk: genai_types.GenerateContentResponse) -> str:
    """A response as the API sent it (camelCase JSON), without what the SDK adds."""
    return chunk.model_dump_json(
        by_alias=True,
        exclude_none=True,
        exclude={"sdk_http_response", "automatic_function_calling_history"},
    )


def _bad_key(exc: genai_errors.APIError) -> bool:
    """Gemini answers an invalid key with HTTP 400 and the reason ``API_KEY_INVALID``."""
    return any(detail.get("reason") == "API_KEY_INVALID" for detail in _error_details(exc))


def _error_details(exc: genai_errors.APIError) -> list[Mapping[str, Any]]:
    body = exc.details
    if not isinstance(body, Mapping):
        return []
    error = body.get("error", body)
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return []
    return [detail for detail in details if isinstance(detail, Mapping)]


def _retry_after(exc: genai_errors.APIError) -> float | None:
    """Seconds to wait: the ``retry-after`` header, else the body's ``RetryInfo.retryDelay``."""
    headers = getattr(exc.response, "headers", None)
    header = headers.get("retry-after") if headers is not None else None
    if isinstance(header, str) and header.strip():
        seconds = parse_retry_after(header, now=datetime.now(UTC))
        if seconds is not None:
            return seconds
    for detail in _error_details(exc):
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _RETRY_DELAY.fullmatch(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
