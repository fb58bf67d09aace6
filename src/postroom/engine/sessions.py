"""Browser sessions of the operator (INTERFACES §6): a signed cookie instead of a token.

Signing in with the API token (or a named token) gives a cookie holding the token's hash and
when it was issued, signed with the server's secret — no row in the database, and never the
token itself. Each request finds its caller again from the hash, so removing a named token ends
its sessions at once. Writes carry a CSRF token derived from the cookie, which a page of
another site cannot read.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from postroom.core.signing import hash_token, sign_value, verify_value
from postroom.engine.clock import Clock
from postroom.engine.tokens import Principal, TokenService

__all__ = ["SESSION_COOKIE", "SESSION_TTL_S", "Session", "SessionKeeper"]

SESSION_COOKIE = "postroom_session"
SESSION_TTL_S = 12 * 3600
_VERSION = "s1"


class Session:
    """A signed-in caller and the cookie that proves it."""

    __slots__ = ("cookie", "csrf", "principal")

    def __init__(self, principal: Principal, cookie: str, csrf: str) -> None:
        self.principal = principal
        self.cookie = cookie
        self.csrf = csrf


class SessionKeeper:
    def __init__(self, *, secret: bytes, tokens: TokenService, clock: Clock) -> None:
        self._secret = secret
        self._tokens = tokens
        self._clock = clock

    async def sign_in(self, presented: str) -> Session | None:
        """A new session for whoever *presented* is, or ``None`` for an unknown token."""
        if not presented.strip():
            return None
        principal = await self._tokens.authenticate(presented.strip())
        if principal is None:
            return None
        issued = int(self._clock().timestamp())
        cookie = sign_value(self._secret, f"{_VERSION}:{hash_token(presented.strip())}:{issued}")
        return Session(principal, cookie, self._csrf(cookie))

    async def session(self, cookies: Mapping[str, str]) -> Session | None:
        """The session of a request's cookies, if it is valid, unexpired and its token still
        exists."""
        cookie = cookies.get(SESSION_COOKIE)
        value = verify_value(self._secret, cookie)
        if cookie is None or value is None:
            return None
        version, _, rest = value.partition(":")
        secret_hash, _, issued = rest.partition(":")
        if version != _VERSION or not issued.isdigit():
            return None
        if self._clock().timestamp() - int(issued) > SESSION_TTL_S:
            return None
        principal = await self._tokens.by_hash(secret_hash)
        if principal is None:
            return None
        return Session(principal, cookie, self._csrf(cookie))

    def csrf_matches(self, session: Session, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(session.csrf, presented)

    def _csrf(self, cookie: str) -> str:
        return hmac.new(self._secret, b"csrf:" + cookie.encode(), hashlib.sha256).hexdigest()[:40]
