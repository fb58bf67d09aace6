"""Browser sessions of the dashboard and the operator chat: a signed cookie that holds no
token, ends when it expires or its named token is removed, and cannot be forged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from postroom.engine.sessions import SESSION_COOKIE, SESSION_TTL_S, SessionKeeper
from postroom.engine.tokens import Scope, TokenService
from postroom.store.sqlite import SqliteStore

from fakeclock import FakeClock

OWNER_SECRET = "owner-secret-of-twenty-chars"


@pytest.fixture
async def tokens(tmp_path: Path, clock: FakeClock) -> AsyncIterator[TokenService]:
    store = await SqliteStore.open(tmp_path / "postroom.db")
    try:
        yield TokenService(store=store, clock=clock, owner_secret=OWNER_SECRET)
    finally:
        await store.close()


def keeper(tokens: TokenService, clock: FakeClock, secret: bytes = b"k" * 32) -> SessionKeeper:
    return SessionKeeper(secret=secret, tokens=tokens, clock=clock)


async def test_the_owner_signs_in_and_the_cookie_holds_no_token(
    tokens: TokenService, clock: FakeClock
) -> None:
    sessions = keeper(tokens, clock)
    made = await sessions.sign_in(OWNER_SECRET)
    assert made is not None and made.principal.name == "owner"
    assert OWNER_SECRET not in made.cookie
    found = await sessions.session({SESSION_COOKIE: made.cookie})
    assert found is not None and found.principal.scope is Scope.ADMIN
    assert sessions.csrf_matches(found, made.csrf)
    assert not sessions.csrf_matches(found, None)
    assert not sessions.csrf_matches(found, made.csrf[:-1] + "0")


async def test_a_wrong_or_empty_token_signs_nobody_in(
    tokens: TokenService, clock: FakeClock
) -> None:
    sessions = keeper(tokens, clock)
    assert await sessions.sign_in("not-the-owner-secret") is None
    assert await sessions.sign_in("   ") is None


async def test_a_forged_or_foreign_cookie_is_no_session(
    tokens: TokenService, clock: FakeClock
) -> None:
    made = await keeper(tokens, clock).sign_in(OWNER_SECRET)
    assert made is not None
    value, _, mac = made.cookie.rpartition(".")
    forged = value.replace(":", ";", 1) + "." + mac
    assert await keeper(tokens, clock).session({SESSION_COOKIE: forged}) is None
    other_server = keeper(tokens, clock, secret=b"x" * 32)
    assert await other_server.session({SESSION_COOKIE: made.cookie}) is None
    assert await keeper(tokens, clock).session({}) is None


async def test_a_session_ends_when_it_expires(tokens: TokenService, clock: FakeClock) -> None:
    sessions = keeper(tokens, clock)
    made = await sessions.sign_in(OWNER_SECRET)
    assert made is not None
    clock.advance(seconds=SESSION_TTL_S - 1)
    assert await sessions.session({SESSION_COOKIE: made.cookie}) is not None
    clock.advance(seconds=2)
    assert await sessions.session({SESSION_COOKIE: made.cookie}) is None


async def test_removing_a_named_token_ends_its_sessions(
    tokens: TokenService, clock: FakeClock
) -> None:
    made_token = await tokens.add("viewer", scope="read", actor="test")
    sessions = keeper(tokens, clock)
    made = await sessions.sign_in(made_token.secret)
    assert made is not None and made.principal.name == "viewer"
    found = await sessions.session({SESSION_COOKIE: made.cookie})
    assert found is not None and found.principal.scope is Scope.READ
    await tokens.remove("viewer", actor="test")
    assert await sessions.session({SESSION_COOKIE: made.cookie}) is None
