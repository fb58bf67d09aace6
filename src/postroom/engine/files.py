"""Files written in the data directory: replaced atomically and readable by their owner only
(INTERFACES §1), so a reader never sees half a file and nobody else reads it at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["create_file", "make_private_dir", "replace_file"]

#: INTERFACES §1: secrets and the database are their owner's alone, from the first byte.
FILE_MODE = 0o600
DIR_MODE = 0o700


def replace_file(path: Path, text: str) -> None:
    """Write *text* to *path* through a temporary file in the same folder (mode 0600) and
    rename it over *path*; the folder is created (0700) if missing."""
    make_private_dir(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def make_private_dir(path: Path) -> None:
    """Create *path* and its missing parents as 0700 (``mkdir(parents=True)`` would give the
    parents the default mode); an existing directory is left as it is."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)


def create_file(path: Path, text: str) -> bool:
    """Create *path* with *text*, mode 0600 from the start; ``False`` if it already exists (it
    is never overwritten, and never loosened)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return True
