"""Files written in the data directory: replaced atomically and readable by their owner only
(INTERFACES §1), so a reader never sees half a file and nobody else reads it at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: Path, text: str) -> None:
    """Write *text* to *path* through a temporary file in the same folder (mode 0600) and
    rename it over *path*; the folder is created if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
