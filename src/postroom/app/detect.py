"""Which provider ``postroom init`` writes (PIPELINE §4): an Anthropic key, else an OpenAI key,
else a Gemini key, else an Ollama answering locally, else ``echo``. Keys are never written."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ECHO_HINT", "Detected", "detect_provider"]

OLLAMA_URL = "http://127.0.0.1:11434"
ECHO_HINT = (
    "No language model is configured yet, so answers echo what you write. To use one, set "
    "ANTHROPIC_API_KEY (or OPENAI_API_KEY, or GEMINI_API_KEY) in the environment, or run Ollama "
    "locally, then set [defaults] provider in postroom.toml (postroom init detects it on a new "
    "data directory) and restart postroom serve; postroom doctor checks the result."
)


@dataclass(frozen=True, slots=True)
class Detected:
    provider: str
    reason: str
    model: str | None = None


def _ollama_models(base_url: str, timeout_s: float) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"{base_url}/api/tags", timeout=timeout_s) as response:
            payload = json.loads(response.read() or b"{}")
    except (OSError, ValueError, urllib.error.URLError):
        return None
    models = payload.get("models") if isinstance(payload, dict) else None
    if not isinstance(models, list):
        return []
    return [str(m.get("name")) for m in models if isinstance(m, dict) and m.get("name")]


def detect_provider(environ: Mapping[str, str], *, probe_timeout_s: float = 0.5) -> Detected:
    if environ.get("ANTHROPIC_API_KEY"):
        return Detected("anthropic", "ANTHROPIC_API_KEY is set")
    if environ.get("OPENAI_API_KEY"):
        return Detected("openai", "OPENAI_API_KEY is set")
    if environ.get("GEMINI_API_KEY"):
        return Detected("gemini", "GEMINI_API_KEY is set")
    base_url = environ.get("OLLAMA_HOST") or OLLAMA_URL
    if not base_url.startswith("http"):
        base_url = f"http://{base_url}"
    models = _ollama_models(base_url.rstrip("/"), probe_timeout_s)
    if models is not None:
        model = models[0] if models else None
        return Detected("ollama", f"Ollama answers at {base_url}", model)
    return Detected("echo", "no API key in the environment and no Ollama answering locally")
