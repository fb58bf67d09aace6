"""Statements on named tokens (only the hash of each secret is stored)."""

from __future__ import annotations

from typing import Any

from postroom.store.records import TokenRecord
from postroom.store.sqlite.base import Statements
from postroom.store.sqlite.codec import from_iso, to_iso

__all__ = ["TokenStatements"]

_COLUMNS = "name, scope, folder, created_at, created_by"


class TokenStatements(Statements):
    async def insert_token(self, token: TokenRecord, *, secret_hash: str) -> None:
        await self._run(
            "INSERT INTO tokens (name, scope, folder, secret_hash, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                token.name,
                token.scope,
                token.folder,
                secret_hash,
                to_iso(token.created_at),
                token.created_by,
            ),
        )

    async def list_tokens(self) -> list[TokenRecord]:
        rows = await self._all(f"SELECT {_COLUMNS} FROM tokens ORDER BY name")
        return [_token(row) for row in rows]

    async def find_token(self, secret_hash: str) -> TokenRecord | None:
        row = await self._one(
            f"SELECT {_COLUMNS} FROM tokens WHERE secret_hash = ?", (secret_hash,)
        )
        return None if row is None else _token(row)

    async def delete_token(self, name: str) -> bool:
        return await self._run("DELETE FROM tokens WHERE name = ?", (name,)) > 0


def _token(row: Any) -> TokenRecord:
    return TokenRecord(row[0], row[1], row[2], from_iso(row[3]), row[4])
