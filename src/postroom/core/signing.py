"""Bearer tokens, signed values and signed requests, compared in constant time.

Every HMAC check of postroom goes through :func:`hmac_hex_matches`, which compares bytes: a
presented value that is not ASCII (a header or cookie someone typed by hand) is simply wrong,
never a ``TypeError`` from :func:`hmac.compare_digest` on text.

Signed requests (INTERFACES §4, inbound ``/hooks/…`` and outbound webhooks) carry
``X-Postroom-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<path>.<body>">``: the
time bounds a replay to a window, and the path stops a body signed for one hook from being
posted to another.
"""

from __future__ import annotations

import hashlib
import hmac
import re

__all__ = [
    "SIGNATURE_WINDOW_S",
    "hash_token",
    "hmac_hex",
    "hmac_hex_matches",
    "sign_request",
    "sign_value",
    "token_matches",
    "token_tag",
    "verify_request",
    "verify_value",
]

#: How far a signed request's ``t`` may be from the receiver's clock, either way.
SIGNATURE_WINDOW_S = 300
_SIGNATURE = re.compile(r"t=([0-9]{1,12}),v1=([0-9a-f]{64})")


def _bytes(text: str) -> bytes:
    # surrogatepass: a lone surrogate (possible in decoded JSON) is data to compare, not a crash.
    return text.encode("utf-8", "surrogatepass")


def hmac_hex(secret: str | bytes, message: bytes) -> str:
    """The hex HMAC-SHA256 of *message* under *secret*."""
    key = secret if isinstance(secret, bytes) else _bytes(secret)
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def hmac_hex_matches(expected_hex: str, presented: str | None) -> bool:
    """Whether *presented* is *expected_hex*, compared as bytes in constant time."""
    if presented is None:
        return False
    return hmac.compare_digest(_bytes(expected_hex), _bytes(presented))


def token_matches(expected: str, presented: str | None) -> bool:
    """Whether *presented* is the configured token (no token configured accepts anything)."""
    if not expected:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(_bytes(expected), _bytes(presented))


def hash_token(secret: str) -> str:
    """What is stored of a named token's secret. The secrets are 256 random bits, so a plain
    hash is as hard to reverse as a slow one, and looking a token up costs one hash."""
    return hashlib.sha256(b"postroom-token:" + _bytes(secret)).hexdigest()


def token_tag(token: str) -> str:
    """A short stable tag for a token (to name the operator) that does not reveal it."""
    return hashlib.sha256(b"postroom-operator:" + _bytes(token)).hexdigest()[:8]


def sign_value(secret: bytes, value: str) -> str:
    """``value.signature``: a value a client may hold but not forge."""
    return f"{value}.{hmac_hex(secret, _bytes(value))[:32]}"


def verify_value(secret: bytes, signed: str | None) -> str | None:
    """The value of a :func:`sign_value` result, or ``None`` when it was tampered with."""
    if not signed or "." not in signed:
        return None
    value, _, mac = signed.rpartition(".")
    expected = hmac_hex(secret, _bytes(value))[:32]
    return value if hmac_hex_matches(expected, mac) else None


def sign_request(secret: str, path: str, body: bytes, *, now: float) -> str:
    """The ``X-Postroom-Signature`` value of a request to *path* with *body*, made at *now*."""
    t = int(now)
    return f"t={t},v1={hmac_hex(secret, f'{t}.{path}.'.encode() + body)}"


def verify_request(
    secret: str,
    header: str | None,
    path: str,
    body: bytes,
    *,
    now: float,
    window_s: float = SIGNATURE_WINDOW_S,
) -> str | None:
    """The ``v1`` of a valid signature of a request to *path* with *body*; ``None`` when the
    header is missing, malformed (non-ASCII included), wrong, or its ``t`` is more than
    *window_s* from *now*."""
    match = _SIGNATURE.fullmatch(header.strip()) if header else None
    if match is None:
        return None
    t, presented = int(match.group(1)), match.group(2)
    if abs(now - t) > window_s:
        return None
    expected = hmac_hex(secret, f"{t}.{path}.".encode() + body)
    return presented if hmac_hex_matches(expected, presented) else None
