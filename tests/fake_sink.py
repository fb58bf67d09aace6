"""A text sink for streaming tests: it records what a provider or runner wrote."""

from __future__ import annotations


class WrittenText:
    """Each piece written, in order, and ``None`` for each restart."""

    def __init__(self) -> None:
        self.pieces: list[str | None] = []

    def write(self, text: str) -> None:
        self.pieces.append(text)

    def restart(self) -> None:
        self.pieces.append(None)
