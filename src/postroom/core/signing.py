"""Bearer tokens and signed values, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["hash_token", "sign_value", "token_matches", "token_tag", "verify_value"]


def token_matches(expected: str, presented: str | None) -> bool:
    """Whether *presented* is the configured token (no token configured accepts anything)."""
    if not expected:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def hash_token(secret: str) -> str:
    """What is stored of a named token's secret. The secrets are 256 random bits, so a plain
    hash is as hard to reverse as a slow one, and looking a token up costs one hash."""
    return hashlib.sha256(b"postroom-token:" + secret.encode()).hexdigest()


def token_tag(token: str) -> str:
    """A short stable tag for a token (to name the operator) that does not reveal it."""
    return hashlib.sha256(b"postroom-operator:" + token.encode()).hexdigest()[:8]


def sign_value(secret: bytes, value: str) -> str:
    """``value.signature``: a value a client may hold but not forge."""
    mac = hmac.new(secret, value.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{value}.{mac}"


def verify_value(secret: bytes, signed: str | None) -> str | None:
    """The value of a :func:`sign_value` result, or ``None`` when it was tampered with."""
    if not signed or "." not in signed:
        return None
    value, _, mac = signed.rpartition(".")
    expected = hmac.new(secret, value.encode(), hashlib.sha256).hexdigest()[:32]
    return value if hmac.compare_digest(mac, expected) else None
