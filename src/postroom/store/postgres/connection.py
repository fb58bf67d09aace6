"""One asyncpg connection behind the statements' :class:`~postroom.store.sqlite.base.Connection`
seam, so the statements written in the SQL both engines speak run here unchanged.

The statements mark parameters with ``?`` (SQLite's style); they become ``$1, $2, …`` here,
once per distinct statement text. Values PostgreSQL cannot hold — text with a NUL character or
a lone surrogate, an integer beyond 64 bits — are the client's input, refused with the same
one-sentence error the SQLite store gives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from postroom.core.errors import InvalidInput

__all__ = ["PgConnection", "RawConnection", "numbered"]

#: A connection of its own or one lent by the pool.
RawConnection = asyncpg.Connection | PoolConnectionProxy


@functools.lru_cache(maxsize=2048)
def numbered(sql: str) -> str:
    """*sql* with each ``?`` outside quotes replaced by ``$n`` (``n`` counting from 1)."""
    out: list[str] = []
    quote: str | None = None
    n = 0
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(char)
    return "".join(out)


class PgConnection:
    """Statements on one pooled connection, inside the transaction the store opened."""

    def __init__(self, conn: RawConnection, trace: Callable[[str], None] | None = None) -> None:
        self._conn = conn
        self._trace = trace

    @property
    def raw(self) -> RawConnection:
        return self._conn

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self._trace is not None:
            self._trace(sql)
        try:
            return list(await self._conn.fetch(numbered(sql), *params))
        except _UNSTORABLE as exc:
            raise _refused(exc) from exc

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        if self._trace is not None:
            self._trace(sql)
        try:
            status = await self._conn.execute(numbered(sql), *params)
        except _UNSTORABLE as exc:
            raise _refused(exc) from exc
        # "UPDATE 3", "INSERT 0 1", "DELETE 0": the last word counts the rows.
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else -1

    async def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if self._trace is not None:
            self._trace(sql)
        try:
            await self._conn.executemany(numbered(sql), rows)
        except _UNSTORABLE as exc:
            raise _refused(exc) from exc

    async def close(self) -> None:
        """The pool owns the connection."""


_UNSTORABLE = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.CharacterNotInRepertoireError,
    asyncpg.exceptions.UntranslatableCharacterError,
    asyncpg.exceptions.NumericValueOutOfRangeError,
    UnicodeEncodeError,
    OverflowError,
)


def _refused(exc: Exception) -> InvalidInput:
    text = str(exc)
    if isinstance(exc, OverflowError) or "out of range" in text or "int64" in text:
        return InvalidInput("A number is out of range; integers must fit in 64 bits.")
    if isinstance(exc, UnicodeEncodeError) or "surrogate" in text:
        return InvalidInput("A text value is not valid Unicode (it holds a lone surrogate).")
    if isinstance(exc, asyncpg.exceptions.CharacterNotInRepertoireError) or "0x00" in text:
        return InvalidInput("A text value holds a NUL character, which cannot be stored.")
    return InvalidInput(f"A value cannot be stored: {text.splitlines()[0]}.")
