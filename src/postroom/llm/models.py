"""What postroom knows about models: context window, price (USD per million tokens), and
whether it takes images (``vision``: unknown models are assumed not to, so they get a line
naming the picture instead of bytes they may refuse).

Matched by the longest prefix of the model name; unknown models get a conservative window and
no price (their runs cost ``None``, not a guess). ``[models."<name>"]`` in the configuration
overrides or adds entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_MODELS", "ModelInfo", "ModelTable"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    context_window: int
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    vision: bool = True

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.input_per_mtok is None or self.output_per_mtok is None:
            return None
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


DEFAULT_MODELS: Mapping[str, ModelInfo] = {
    "claude-opus-4": ModelInfo(200_000, 15.0, 75.0),
    "claude-sonnet-4": ModelInfo(200_000, 3.0, 15.0),
    "claude-3-7-sonnet": ModelInfo(200_000, 3.0, 15.0),
    "claude-3-5-sonnet": ModelInfo(200_000, 3.0, 15.0),
    "claude-haiku-4": ModelInfo(200_000, 1.0, 5.0),
    "claude-3-5-haiku": ModelInfo(200_000, 0.8, 4.0),
    "gpt-4.1-mini": ModelInfo(1_047_576, 0.4, 1.6),
    "gpt-4.1": ModelInfo(1_047_576, 2.0, 8.0),
    "gpt-4o-mini": ModelInfo(128_000, 0.15, 0.6),
    "gpt-4o": ModelInfo(128_000, 2.5, 10.0),
    "gpt-5-mini": ModelInfo(400_000, 0.25, 2.0),
    "gpt-5": ModelInfo(400_000, 1.25, 10.0),
    "o3": ModelInfo(200_000, 2.0, 8.0),
    "o4-mini": ModelInfo(200_000, 1.1, 4.4),
    "gemini-2.5-pro": ModelInfo(1_048_576, 1.25, 10.0),
    "gemini-2.5-flash": ModelInfo(1_048_576, 0.3, 2.5),
    "gemini-2.0-flash": ModelInfo(1_048_576, 0.1, 0.4),
    "llama3": ModelInfo(128_000, 0.0, 0.0, vision=False),
    "llama3.2-vision": ModelInfo(128_000, 0.0, 0.0),
    "llava": ModelInfo(4_096, 0.0, 0.0),
    "gemma3": ModelInfo(128_000, 0.0, 0.0),
    "qwen": ModelInfo(32_768, 0.0, 0.0, vision=False),
    "qwen2.5vl": ModelInfo(32_768, 0.0, 0.0),
    "smollm2": ModelInfo(8_192, 0.0, 0.0, vision=False),
    "echo": ModelInfo(32_000, 0.0, 0.0),
    # A folder that names no model runs its provider's default, looked up by the provider's
    # name: each of these defaults takes images.
    "anthropic": ModelInfo(32_000),
    "openai": ModelInfo(32_000),
    "gemini": ModelInfo(32_000),
}
UNKNOWN = ModelInfo(32_000, vision=False)


class ModelTable:
    def __init__(self, overrides: Mapping[str, ModelInfo] | None = None) -> None:
        self._table = {**DEFAULT_MODELS, **(overrides or {})}

    def info(self, model: str | None) -> ModelInfo:
        if not model:
            return UNKNOWN
        best: str | None = None
        for name in self._table:
            if model.startswith(name) and (best is None or len(name) > len(best)):
                best = name
        return self._table[best] if best is not None else UNKNOWN

    def cost_of(self, model: str | None, usage: Mapping[str, int]) -> float | None:
        """The price of one call from the tokens its response reported (``None``: unpriced)."""
        return self.info(model).cost(
            int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        )
