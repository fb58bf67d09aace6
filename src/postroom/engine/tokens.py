"""Named tokens (INTERFACES §5): who may call the HTTP API and the MCP server, and for what.

A token has a scope — ``read`` (reads only), ``routes`` (route and folder writes and reads),
``admin`` (everything) — and may be confined to a folder's tree: it then sees and changes only
routes whose target lies under that folder and folders under it. ``[api] token`` is the token
named ``owner`` (admin, unconfined). Only a hash of each secret is stored; the secret is shown
once, when the token is made, and checking a presented secret costs one hash and one indexed
read (none for the owner's token).
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from postroom.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from postroom.core.folders import is_within, validate_folder
from postroom.core.signing import hash_token, token_matches
from postroom.engine.clock import Clock
from postroom.store.protocol import Store
from postroom.store.records import TokenRecord

__all__ = [
    "OWNER",
    "PRINCIPAL_KEY",
    "NewToken",
    "Principal",
    "Scope",
    "TokenService",
    "token_to_dict",
]

log = structlog.get_logger(__name__)

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: The name under which ``[api] token`` acts (and is audited).
OWNER_NAME = "owner"
#: Where the HTTP surfaces leave the caller of a request in its ASGI scope.
PRINCIPAL_KEY = "postroom.principal"


class Scope(StrEnum):
    """What a token may do; each scope includes the ones before it."""

    READ = "read"
    ROUTES = "routes"
    ADMIN = "admin"

    def covers(self, needed: Scope) -> bool:
        """Whether a token of this scope may do what *needed* allows."""
        return _RANK[self] >= _RANK[needed]

    @classmethod
    def parse(cls, value: Any) -> Scope:
        """A scope from its name, or one sentence naming the three."""
        try:
            return cls(value)
        except ValueError:
            raise InvalidInput(
                f"Unknown scope {value!r}; the scopes are read, routes and admin."
            ) from None


_RANK = {Scope.READ: 0, Scope.ROUTES: 1, Scope.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request: a token's name, its scope, and the folder it is confined to
    (``None``: the whole table)."""

    name: str
    scope: Scope
    folder: str | None = None

    def actor(self, surface: str) -> str:
        """The audit name of a write: ``api:<name>``, ``mcp:<name>``."""
        return f"{surface}:{self.name}"

    def require(self, needed: Scope, what: str) -> None:
        """Refuse *what* unless this token's scope covers *needed*."""
        if not self.scope.covers(needed):
            raise Forbidden(
                f"Token {self.name} has scope {self.scope}; {what} needs scope {needed} or more."
            )

    def require_whole_table(self, what: str) -> None:
        """Refuse *what*, which cannot be confined to a folder, to a confined token."""
        if self.folder is not None:
            raise Forbidden(
                f"Token {self.name} is confined to folder {self.folder}; {what} is not limited "
                "to one folder, so it is not available to this token."
            )

    def sees(self, folder: str | None) -> bool:
        """Whether *folder* lies in this token's tree (every folder when unconfined)."""
        if self.folder is None:
            return True
        return folder is not None and is_within(folder, self.folder)


#: ``[api] token``, and whoever runs ``postroom mcp`` on the data directory.
OWNER = Principal(OWNER_NAME, Scope.ADMIN)


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just made, with the only copy of its secret."""

    record: TokenRecord
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.record.name,
            "scope": self.record.scope,
            "folder": self.record.folder,
            "secret": self.secret,
            "created_at": self.record.created_at.isoformat(),
        }


def token_to_dict(record: TokenRecord) -> dict[str, Any]:
    """The public token object: never the secret (nor its hash)."""
    return {
        "name": record.name,
        "scope": record.scope,
        "folder": record.folder,
        "created_at": record.created_at.isoformat(),
        "created_by": record.created_by,
    }


def _principal(record: TokenRecord) -> Principal:
    return Principal(record.name, Scope(record.scope), record.folder)


class TokenService:
    """Makes, lists and removes named tokens, and tells who presented a secret."""

    def __init__(self, *, store: Store, clock: Clock, owner_secret: str = "") -> None:
        self._store = store
        self._clock = clock
        self._owner_secret = owner_secret

    async def add(
        self, name: str, *, scope: Any = Scope.READ, folder: str | None = None, actor: str
    ) -> NewToken:
        """Make a token; its secret is in the answer and nowhere else."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidInput(
                f"Token name {name!r} is not valid: use 1 to 64 of a-z, 0-9, - and _, "
                "starting with a letter or digit."
            )
        if name == OWNER_NAME:
            raise InvalidInput(f"The token name {OWNER_NAME} is reserved for [api] token.")
        parsed = Scope.parse(scope)
        if folder is not None:
            folder = validate_folder(folder, what="Token folder")
        secret = secrets.token_urlsafe(32)
        record = TokenRecord(name, parsed.value, folder, self._clock(), actor)
        async with self._store.write() as tx:
            if folder is not None and await tx.get_folder(folder) is None:
                raise InvalidInput(f"There is no folder {folder}; create it first.")
            if any(t.name == name for t in await tx.list_tokens()):
                raise Conflict(f"Token {name} already exists; remove it first to make a new one.")
            await tx.insert_token(record, secret_hash=hash_token(secret))
        log.info("token.added", name=name, scope=parsed.value, folder=folder, actor=actor)
        return NewToken(record, secret)

    async def list(self) -> list[TokenRecord]:
        """Every named token, by name (never a secret)."""
        async with self._store.read() as tx:
            return await tx.list_tokens()

    async def remove(self, name: str, *, actor: str) -> None:
        """Remove a token: the next request presenting its secret is refused."""
        async with self._store.write() as tx:
            if not await tx.delete_token(name):
                raise NotFound(f"There is no token {name}.")
        log.info("token.removed", name=name, actor=actor)

    async def authenticate(self, presented: str | None) -> Principal | None:
        """Who presented *presented*: the owner, a named token, or nobody (``None``).

        Without ``[api] token`` the API is open (it then listens on loopback only), so a
        request that presents no known token acts as the owner.
        """
        if presented and self._owner_secret and token_matches(self._owner_secret, presented):
            return OWNER
        if presented:
            async with self._store.read() as tx:
                record = await tx.find_token(hash_token(presented))
            if record is not None:
                return _principal(record)
        return OWNER if not self._owner_secret else None

    async def by_hash(self, secret_hash: str) -> Principal | None:
        """Who holds the secret hashing to *secret_hash* (a browser session keeps the hash,
        never the secret); ``None`` once the token is gone."""
        if self._owner_secret and hmac.compare_digest(hash_token(self._owner_secret), secret_hash):
            return OWNER
        async with self._store.read() as tx:
            record = await tx.find_token(secret_hash)
        if record is not None:
            return _principal(record)
        return OWNER if not self._owner_secret else None
