"""The web chat's visitor cookie (INTERFACES §4): a visitor's chat is theirs because the server
signed the cookie naming it. Against the real server (``Gateway.build`` and ``Gateway.run`` on
a free port) with a real HTTP client and a real WebSocket client: a cookie whose signature or
value was altered, or whose halves come from two visitors, gives a new visitor — never another
visitor's chat or history."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from postroom.app.gateway import Gateway
from postroom.config import Config
from postroom.engine.bootstrap import bootstrap
from postroom.web.chat import VISITOR_COOKIE

from gateway_support import new_data_dir, serving
from support import eventually

WAIT_S = 10.0


@dataclass(frozen=True)
class Visit:
    """What the socket said to one cookie: the chat it gave, its history, any new cookie."""

    chat_jid: str
    history: list[str]
    set_cookie: str | None


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[Gateway, str]]:
    gateway = await Gateway.build(await new_data_dir(tmp_path / "data"), Config())
    await bootstrap(gateway.services, actor="test")
    async with serving(gateway) as url:
        yield gateway, url


async def new_cookie(url: str) -> str:
    """The signed cookie the chat page hands a first-time visitor."""
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/chat/main")
    assert page.status_code == 200
    cookie = page.cookies.get(VISITOR_COOKIE)
    assert cookie, page.headers
    return cookie


async def visit(url: str, cookie: str | None, *, say: str | None = None) -> Visit:
    """Open the chat's socket with *cookie*; optionally send *say* and wait for it to be taken."""
    headers = {"Cookie": f"{VISITOR_COOKIE}={cookie}"} if cookie is not None else {}
    socket_url = url.replace("http://", "ws://") + "/ws/chat/main"
    async with connect(socket_url, additional_headers=headers, open_timeout=WAIT_S) as socket:
        set_cookie = socket.response.headers.get("set-cookie") if socket.response else None
        hello = await frame(socket, "hello")
        history = await frame(socket, "history")
        if say is not None:
            await socket.send(json.dumps({"type": "send", "client_id": "c1", "text": say}))
            await frame(socket, "accepted")
    return Visit(
        chat_jid=str(hello["chat_jid"]),
        history=[str(m["content"]) for m in history["messages"]],
        set_cookie=set_cookie,
    )


async def frame(socket: Any, kind: str) -> dict[str, Any]:
    while True:
        value = json.loads(await socket.recv(decode=True))
        if value.get("type") == kind:
            return dict(value)


def tampered_signature(cookie: str) -> str:
    value, _, mac = cookie.rpartition(".")
    return f"{value}.{mac[:-1]}{'0' if mac[-1] != '0' else '1'}"


def tampered_value(cookie: str) -> str:
    value, _, mac = cookie.rpartition(".")
    return f"{value[:-1]}{'0' if value[-1] != '0' else '1'}.{mac}"


def halves(first: str, second: str) -> str:
    """The value of *first* with the signature of *second*."""
    return f"{first.rpartition('.')[0]}.{second.rpartition('.')[2]}"


async def test_a_forged_or_altered_cookie_gives_a_new_visitor_never_another_ones_chat(
    server: tuple[Gateway, str],
) -> None:
    gateway, url = server
    alice, bob = await new_cookie(url), await new_cookie(url)
    assert alice != bob
    mine = await visit(url, alice, say="alice's secret")
    theirs = await visit(url, bob, say="bob's secret")
    assert mine.chat_jid != theirs.chat_jid

    async def stored() -> bool:
        rows = await gateway.services.history.messages(chat_jid=mine.chat_jid, limit=10)
        return any(m.content == "alice's secret" for m in rows)

    await eventually(stored, "alice's message to be stored")
    # The real cookies still open their owners' chats, with their own history only.
    again = await visit(url, alice)
    assert again.chat_jid == mine.chat_jid and again.set_cookie is None
    assert "alice's secret" in again.history and "bob's secret" not in again.history

    known = {mine.chat_jid, theirs.chat_jid}
    forgeries = {
        "signature altered": tampered_signature(alice),
        "value altered": tampered_value(alice),
        "alice's value, bob's signature": halves(alice, bob),
        "bob's value, alice's signature": halves(bob, alice),
        "no signature": alice.rpartition(".")[0],
        "a signature alone": "." + alice.rpartition(".")[2],
    }
    for name, forged in forgeries.items():
        forged_visit = await visit(url, forged)
        assert forged_visit.chat_jid not in known, name
        assert forged_visit.chat_jid.startswith("web:main/anon-"), name
        assert forged_visit.history == [], name
        # A fresh, properly signed cookie replaces the forged one.
        assert forged_visit.set_cookie is not None, name
        assert forged_visit.set_cookie.startswith(f"{VISITOR_COOKIE}="), name
        fresh = forged_visit.set_cookie.split(";")[0].split("=", 1)[1]
        assert (await visit(url, fresh)).chat_jid == forged_visit.chat_jid, name
    # The page refuses forged cookies the same way: it hands out a new signed one.
    async with httpx.AsyncClient(
        base_url=url, cookies={VISITOR_COOKIE: halves(alice, bob)}
    ) as http:
        page = await http.get("/chat/main")
    replaced = page.cookies.get(VISITOR_COOKIE)
    assert replaced and replaced not in (alice, bob)


async def test_a_non_ascii_cookie_gives_a_new_visitor_not_an_error(
    server: tuple[Gateway, str],
) -> None:
    _, url = server
    alice = await new_cookie(url)
    value, _, mac = alice.rpartition(".")
    forged = f"{value}.{mac[:-1]}é".encode("latin-1")
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get(
            "/chat/main", headers={"Cookie": VISITOR_COOKIE.encode() + b"=" + forged}
        )
    assert page.status_code == 200, page.text
    replaced = page.cookies.get(VISITOR_COOKIE)
    assert replaced and replaced != alice
