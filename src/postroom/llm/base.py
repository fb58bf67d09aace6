"""The provider seam: one request and response shape for every model API (PIPELINE §4).

An adapter turns a :class:`ModelRequest` into its SDK's call and the SDK's answer into a
:class:`ModelResponse`. It maps roles to its API's conventions (a stored ``system`` row or
command output becomes a labelled user block where the API has no such role; consecutive
messages of one role are merged where the API wants alternation). SDK exceptions never leave
an adapter: they become :class:`ProviderError` — :class:`RateLimited` for HTTP 429/529 and
"overloaded", with the ``retry-after`` the API gave — chained with ``from exc``. An answer the
adapter cannot read (a malformed body, a proxy's error page served as JSON) is one of them too
(:func:`unreadable`), never a Python exception reaching the people in a chat.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from postroom.core.attachments import MediaPart, placeholder
from postroom.core.context import ContextMessage, ToolCall
from postroom.core.errors import PostroomError

__all__ = [
    "UNREADABLE_ERRORS",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "RateLimited",
    "TextSink",
    "ToolSpec",
    "base64_of",
    "text_with_placeholders",
    "unreadable",
]


class ProviderError(PostroomError):
    """A model call failed. ``retryable`` says whether trying the turn again later may help
    (a 5xx or a timeout may; a refused key or a malformed request will not).

    ``str()`` holds the details (the account, the API's own message) for the run record and the
    log; ``public`` is the one sentence people in a chat may see (PIPELINE §4): the provider's
    name and what went wrong — ``anthropic answered HTTP 500`` — never SDK internals.
    """

    def __init__(self, message: str, *, retryable: bool = True, public: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.public = public or message


class RateLimited(ProviderError):
    """The provider refused for now (HTTP 429/529, overloaded); ``retry_after`` seconds, when
    it said (the ``retry-after`` header; ``math.inf`` when it said something unreadable — the
    account pool caps it at ``llm.max_rest``)."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, public: str | None = None
    ) -> None:
        super().__init__(message, retryable=True, public=public)
        self.retry_after = retry_after


#: What reading a malformed answer raises, inside an SDK or in an adapter (JSON and pydantic
#: errors are ``ValueError``s; a body of the wrong shape gives attribute and type errors).
UNREADABLE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    AttributeError,
    LookupError,
)


def unreadable(provider: str, label: str, exc: BaseException) -> ProviderError:
    """The error for an answer *provider* sent that could not be read: the exception in the
    details, a plain sentence for people. Retryable: a proxy's bad moment passes."""
    detail = f"{label}: the answer could not be read ({type(exc).__name__}: {exc})"
    return ProviderError(detail[:1000], public=f"{provider}'s answer could not be read")


def text_with_placeholders(message: ContextMessage, *, sent: frozenset[str] = frozenset()) -> str:
    """A message's text, with a line ``[attachment: …]`` for each of its media parts whose
    kind (``image``, ``document``) the API is not sent (MESSAGES §4: the model knows it is
    there)."""
    lines = [placeholder(part.ref()) for part in message.media if part.as_kind not in sent]
    return "\n".join([message.content, *lines]) if lines else message.content


def base64_of(part: MediaPart) -> str:
    """A media part's bytes as the base64 text every API's inline data takes."""
    return base64.b64encode(part.data).decode("ascii")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Exactly what one model call sends: this is what the run record stores."""

    system: str
    messages: Sequence[ContextMessage]
    model: str | None = None
    tools: Sequence[ToolSpec] = ()
    max_tokens: int = 4096
    #: The conversation the run belongs to: a command-line runner keeps its working directory
    #: per conversation (``None`` for a call outside one, such as a summary).
    conversation_id: int | None = None
    #: The skills chosen for the run (already in ``system``), as the run record lists them.
    skills: Sequence[Mapping[str, Any]] = ()

    def to_record(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "messages": [m.to_dict() for m in self.messages],
            "model": self.model,
            "tools": [t.to_dict() for t in self.tools],
            "skills": [dict(s) for s in self.skills],
        }


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What came back from one call.

    ``text`` is the answer's text (before tag processing); ``raw`` the provider's answer as
    received (the JSON body, or the concatenated stream) for the run record; ``tool_calls``
    the tools the model asked for (empty for a final answer); ``usage`` has ``input_tokens``
    and ``output_tokens``; ``account`` names the key used (never the key itself).
    """

    text: str
    raw: str
    model: str | None = None
    account: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    cost: float | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None


class TextSink(Protocol):
    """Where the text of an answer goes while the model writes it (``stream = true``)."""

    def write(self, text: str) -> None:
        """The next piece of the answer's text. Called from the provider's loop: never blocks."""
        ...

    def restart(self) -> None:
        """What was written is not the answer (the call is tried again, or another follows)."""
        ...


class Provider(Protocol):
    """One model API reached with one account."""

    name: str

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        """One model call. Raises :class:`ProviderError` (or :class:`RateLimited`). A provider
        that streams writes the answer's text to *sink* as it arrives; one that does not
        ignores it (the whole answer comes back at once)."""
        ...

    async def check(self) -> str:
        """The cheapest call that proves the account works (for ``postroom doctor``): returns
        a short description, or raises :class:`ProviderError` saying what is wrong."""
        ...
