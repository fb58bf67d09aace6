"""One ``postroom serve`` per SQLite data directory (PIPELINE §2).

Two servers on one SQLite file would share an owner id, requeue each other's running turns and
both deliver every answer. ``serve`` therefore holds an exclusive ``flock`` on ``DIR/serve.lock``
for its whole life; the kernel drops it when the process ends, however it ends, so a crash never
leaves a stale lock behind. The file holds the holder's pid, for the refusal's sentence.

A store that many nodes share (PostgreSQL) does not take this lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from postroom.core.errors import PostroomError

__all__ = ["LOCK_FILE", "ServeLock"]

LOCK_FILE = "serve.lock"


class ServeLock:
    """The exclusive lock of one data directory, held until :meth:`release` or process exit."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> ServeLock:
        """Lock *data_dir* for this process, or refuse in one sentence naming the holder."""
        path = data_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise PostroomError(f"Cannot open {path}: {exc.strerror or exc}.") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise PostroomError(
                f"Another postroom serve ({who}) is already running on {data_dir}; stop it "
                "first, or pass another --data directory."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Let go of the lock (also done by the kernel when the process exits)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> ServeLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
