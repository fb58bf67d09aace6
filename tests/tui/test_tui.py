"""The terminal UI (``postroom chat``) and its server side, the ``/ws/tui`` socket.

Every test runs a real gateway in the test's event loop (``Gateway.build`` over a directory made
by ``postroom init``, served by ``Gateway.run`` on a free loopback port, the echo provider
answering), so ``/ws/tui`` is the route ``postroom serve`` mounts. The socket is driven with the
real ``websockets`` client; the app with Textual's ``App.run_test()`` pilot.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pty
import select
import shutil
import struct
import sys
import termios
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
import typer
from textual.pilot import Pilot
from textual.widgets import Collapsible, Input, OptionList, Static
from typer.testing import CliRunner, Result
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from postroom.app.gateway import Gateway
from postroom.cli.chat import exit_status, server_url
from postroom.cli.main import app as cli_app
from postroom.config import load_config
from postroom.core.messages import MessageType
from postroom.engine.notices import new_message_id, store_message_direct
from postroom.logs import configure_logging
from postroom.store.records import NewMessage
from postroom.tui import Connection, LinkState, PostroomTUI, auth_headers, socket_url
from postroom.tui.app import FolderPicker, MessageItem
from postroom.tui.render import render_message

from fake_llm_servers import ndjson_reply, serve_fake
from gateway_support import serving as gateway_serving

WAIT_S = 15.0
FAST_BACKOFF = (0.1, 0.2)
VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")
GROUP = "telegram:group/5"
GROUP_SENDER = "telegram:user/42"

runner = CliRunner()


# --------------------------------------------------------------------------- the server


def _clean_env() -> dict[str, str | None]:
    """Unset every configuration variable of the calling environment (CI may set some)."""
    return {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES
    }


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The CLI points logging at the stream ``CliRunner`` lends it, which is closed once the
    command ends; put the previous set-up back so later tests never log into a closed file."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


def cli(data: Path, *args: str) -> Result:
    with logging_kept():
        return runner.invoke(cli_app, ["--data", str(data), *args], env=_clean_env())


@pytest.fixture(scope="module")
def initialized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory made by ``postroom init``, copied for every test."""
    directory = tmp_path_factory.mktemp("tui-template") / "d"
    result = cli(directory, "init")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return directory


@pytest.fixture
def data_dir(initialized: Path, tmp_path: Path) -> Path:
    """A fresh copy: folder ``main`` and the catch-all route ``9999 "" → main``, echo provider."""
    directory = tmp_path / "d"
    shutil.copytree(initialized, directory)
    return directory


@dataclass
class Server:
    gateway: Gateway
    base_url: str
    port: int
    token: str
    http: httpx.AsyncClient

    def ws_url(self, *, folder: str = "main") -> str:
        return socket_url(self.base_url, folder=folder)

    def socket(self, *, token: str | None = None, folder: str = "main") -> Any:
        """A connection to ``/ws/tui`` presenting *token* (the server's own by default) in the
        ``Authorization`` header, as the TUI does."""
        return connect(
            self.ws_url(folder=folder),
            additional_headers=auth_headers(self.token if token is None else token),
            proxy=None,
        )

    async def post(self, content: str, *, chat_jid: str = GROUP, sender: str = GROUP_SENDER) -> Any:
        response = await self.http.post(
            "/api/v1/messages",
            json={"chat_jid": chat_jid, "sender": sender, "sender_name": "Ana", "content": content},
        )
        assert response.status_code == 200, response.text
        return response.json()

    async def add_folder(self, path: str) -> None:
        response = await self.http.post("/api/v1/folders", json={"path": path})
        assert response.status_code == 201, response.text

    async def store(self, message: NewMessage) -> None:
        """A row the gateway itself writes (system, command output, trace...), as a turn would."""
        async with self.gateway.services.store.write() as tx:
            await store_message_direct(tx, message)
        self.gateway.services.signals.stored.wake()


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path, *, port: int = 0, environ: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """``Gateway.run`` (what ``postroom serve`` runs) on 127.0.0.1, configured by
    ``postroom.toml`` and *environ* (``POSTROOM_…`` variables); stopped gracefully after."""
    token = tomllib.loads((data_dir / "postroom.toml").read_text("utf-8"))["api"]["token"]
    with logging_kept():
        configure_logging(level="warning", stream=sys.stderr)
        gateway = await Gateway.build(data_dir, load_config(data_dir, environ or {}))
        async with (
            gateway_serving(gateway, port=port) as base,
            httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {token}"}, trust_env=False
            ) as http,
        ):
            yield Server(gateway, base, int(base.rpartition(":")[2]), token, http)


@pytest.fixture
async def server(data_dir: Path) -> AsyncIterator[Server]:
    async with serving(data_dir) as running:
        yield running


# --------------------------------------------------------------------------- socket helpers


async def frame(socket: ClientConnection) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        value = json.loads(await socket.recv())
    assert isinstance(value, dict)
    return value


async def frame_where(
    socket: ClientConnection, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The next frame that satisfies *predicate* (typing frames and others are skipped)."""
    while True:
        found = await frame(socket)
        if predicate(found):
            return found


def message_frame(
    *, content: str | None = None, message_type: str | None = None, chat_jid: str | None = None
) -> Callable[[dict[str, Any]], bool]:
    def matches(found: dict[str, Any]) -> bool:
        if found["type"] != "message":
            return False
        message = found["message"]
        return (
            (content is None or message["content"] == content)
            and (message_type is None or message["message_type"] == message_type)
            and (chat_jid is None or message["chat_jid"] == chat_jid)
        )

    return matches


async def closed_with(connection: Any) -> tuple[int, str]:
    async with connection as socket:
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(WAIT_S):
                await socket.recv()
    received = closed.value.rcvd
    assert received is not None
    return received.code, received.reason


# --------------------------------------------------------------------------- the socket


async def test_socket_refuses_a_wrong_or_missing_token(server: Server) -> None:
    assert await closed_with(server.socket(token="not-the-token")) == (
        4401,
        "the access token was refused",
    )
    url = f"ws://127.0.0.1:{server.port}/ws/tui?folder=main"
    code, _ = await closed_with(connect(url, proxy=None))
    assert code == 4401
    # A token in the URL is not how it is presented (URLs end up in logs): refused.
    code, _ = await closed_with(connect(f"{url}&token={server.token}", proxy=None))
    assert code == 4401


async def test_socket_refuses_an_unknown_folder(server: Server) -> None:
    code, reason = await closed_with(server.socket(folder="nosuch"))
    assert code == 4404
    assert "nosuch" in reason


async def test_socket_sends_hello_history_then_operator_messages_live(server: Server) -> None:
    before = await server.post("from the group before")
    assert before["decision"]["folder"] == "main"

    async with server.socket() as socket:
        hello = await frame(socket)
        assert hello == {
            "type": "hello",
            "folder": "main",
            "chat_jid": "tui:main",
            "sender": "tui-user",
            "assistant": server.gateway.config.assistant.name,
            "folders": ["main"],
        }
        history = await frame(socket)
        assert history["type"] == "history"
        contents = [(m["chat_jid"], m["content"]) for m in history["messages"]]
        assert (GROUP, "from the group before") in contents

        await socket.send(json.dumps({"type": "send", "client_id": "c1", "text": "hi from tui"}))
        accepted = await frame_where(socket, lambda f: f["type"] == "accepted")
        assert accepted["client_id"] == "c1"
        assert accepted["chat_jid"] == "tui:main"
        decision = accepted["decision"]
        assert decision["layer"] == "operator"
        assert decision["action"] == "fire"
        assert decision["folder"] == "main"

        mine = (await frame_where(socket, message_frame(content="hi from tui")))["message"]
        assert mine["sender"] == "tui-user"
        assert mine["sender_name"] == "operator"
        assert mine["chat_jid"] == "tui:main"
        assert mine["message_type"] == "user"
        answer = (
            await frame_where(socket, message_frame(message_type="assistant", chat_jid="tui:main"))
        )["message"]
        assert answer["chat_jid"] == "tui:main"
        assert answer["routed_to"] == "main"
        assert answer["content"] == "hi from tui"

        # Another chat of the folder reaches the same socket, live.
        await server.post("live from the group")
        live = (await frame_where(socket, message_frame(content="live from the group")))["message"]
        assert live["chat_jid"] == GROUP

        await socket.send(json.dumps({"type": "send", "client_id": "c2", "text": "  "}))
        error = await frame_where(socket, lambda f: f["type"] == "error")
        assert error["client_id"] == "c2"
        await socket.send("not json")
        assert (await frame_where(socket, lambda f: f["type"] == "error"))["client_id"] is None
        await socket.send(json.dumps({"type": "ping"}))
        assert (await frame_where(socket, lambda f: f["type"] in ("pong", "error")))["type"] == (
            "pong"
        )


async def test_socket_never_sends_a_history_message_again_live(server: Server) -> None:
    """A message stored just before a client connects is in its history; when the live feed
    publishes it afterwards, the socket does not send it a second time."""
    quiet = NewMessage(
        id=new_message_id(),
        chat_jid=GROUP,
        sender=GROUP_SENDER,
        sender_name="Ana",
        content="stored, not yet published",
        timestamp=server.gateway.services.clock(),
        message_type=MessageType.USER,
        routed_to="main",
        observed=True,
    )
    # Written without waking the feed: it publishes on its next backstop tick, after the
    # socket below has read the history.
    async with server.gateway.services.store.write() as tx:
        await store_message_direct(tx, quiet)
    published = server.gateway.services.signals.bus.subscribe(kinds=frozenset({"message"}))
    async with server.socket() as socket:
        assert (await frame(socket))["type"] == "hello"
        history = await frame(socket)
        assert [m["id"] for m in history["messages"]] == [quiet.id]
        # The feed's backstop tick publishes the quiet row, after the socket read its history.
        async with asyncio.timeout(WAIT_S):
            event = await anext(aiter(published))
        published.close()
        assert event.data["id"] == quiet.id
        await server.post("published after it")
        # The feed publishes in seq order, so everything before this frame was the quiet row.
        seen = []
        while True:
            found = await frame_where(socket, lambda f: f["type"] == "message")
            seen.append(found["message"]["content"])
            if found["message"]["content"] == "published after it":
                break
        assert seen == ["published after it"]


async def test_the_http_api_never_accepts_the_tui_user(server: Server) -> None:
    response = await server.http.post(
        "/api/v1/messages",
        json={"chat_jid": "tui:main", "sender": "tui-user", "content": "forged"},
    )
    assert response.status_code == 400
    assert "tui-user" in response.json()["error"]


async def test_socket_refuses_a_send_that_names_its_type_sender_or_chat(server: Server) -> None:
    forged = [
        {"message_type": "host"},
        {"message_type": "system", "sender": "system"},
        {"sender": "host"},
        {"sender_name": "deploy"},
        {"chat_jid": GROUP},
    ]
    async with server.socket() as socket:
        assert (await frame(socket))["type"] == "hello"
        assert (await frame(socket))["type"] == "history"
        for number, fields in enumerate(forged):
            client_id = f"forged-{number}"
            text = f"forged {number}"
            await socket.send(
                json.dumps({"type": "send", "client_id": client_id, "text": text, **fields})
            )
            error = await frame_where(socket, lambda f: f["type"] in ("error", "accepted"))
            assert error["type"] == "error", error
            assert error["client_id"] == client_id
            for name in fields:
                assert name in error["error"]
        # Frames are handled in order: once this plain send is accepted, none of the forged
        # ones can still be on their way into the store.
        await socket.send(json.dumps({"type": "send", "client_id": "plain", "text": "honest"}))
        accepted = await frame_where(socket, lambda f: f["type"] == "accepted")
        assert accepted["client_id"] == "plain"

    stored = []
    for chat_jid in ("tui:main", GROUP):
        response = await server.http.get("/api/v1/messages", params={"chat_jid": chat_jid})
        stored += response.json()["messages"]
    assert not [m for m in stored if m["content"].startswith("forged")]
    (honest,) = [m for m in stored if m["content"] == "honest" and m["message_type"] == "user"]
    assert honest["sender"] == "tui-user"
    assert honest["chat_jid"] == "tui:main"


async def test_socket_switches_folders(server: Server) -> None:
    await server.add_folder("ops")
    async with server.socket() as socket:
        assert (await frame(socket))["type"] == "hello"
        assert (await frame(socket))["type"] == "history"

        await socket.send(json.dumps({"type": "switch", "folder": "nosuch"}))
        error = await frame_where(socket, lambda f: f["type"] == "error")
        assert "nosuch" in error["error"]

        await socket.send(json.dumps({"type": "switch", "folder": "ops"}))
        hello = await frame_where(socket, lambda f: f["type"] == "hello")
        assert hello["folder"] == "ops"
        assert hello["chat_jid"] == "tui:ops"
        assert hello["folders"] == ["main", "ops"]
        history = await frame(socket)
        assert history == {"type": "history", "messages": []}

        # main's traffic is no longer shown; ops' operator chat is, in order.
        await server.post("for main only")
        await socket.send(json.dumps({"type": "send", "client_id": "o1", "text": "to ops"}))
        accepted = await frame_where(socket, lambda f: f["type"] == "accepted")
        assert accepted["decision"]["folder"] == "ops"
        assert accepted["decision"]["layer"] == "operator"
        first = await frame_where(socket, lambda f: f["type"] == "message")
        assert first["message"]["content"] == "to ops"
        assert first["message"]["chat_jid"] == "tui:ops"


# --------------------------------------------------------------------------- the app


async def until(pilot: Pilot[Any], predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def shown(app: PostroomTUI) -> list[tuple[str, str, str]]:
    """(chat, type, content) of every message on screen."""
    return [
        (
            str(item.message["chat_jid"]),
            str(item.message["message_type"]),
            str(item.message["content"]),
        )
        for item in app.items()
    ]


def item_with(app: PostroomTUI, content: str, message_type: str = "user") -> MessageItem:
    """The one item of *message_type* showing *content*. The type matters: the echo provider
    answers with the very text it was sent, so a user message and its answer share content."""
    (item,) = [
        i
        for i in app.items()
        if i.message["content"] == content and i.message["message_type"] == message_type
    ]
    return item


async def test_tui_shows_history_sends_and_shows_the_echo_answer(server: Server) -> None:
    await server.post("earlier in the group")
    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        await until(pilot, lambda: bool(app.items()), "the history")
        assert (GROUP, "user", "earlier in the group") in shown(app)
        assert "connected" in app.status_text
        assert "tui:main" in app.status_text
        history_item = item_with(app, "earlier in the group")
        assert GROUP in history_item.rendered.label.plain
        assert "Ana" in history_item.rendered.label.plain

        await pilot.press(*"hello tui", "enter")
        await until(
            pilot, lambda: ("tui:main", "assistant", "hello tui") in shown(app), "the echo answer"
        )
        assert ("tui:main", "user", "hello tui") in shown(app)
        assert app.query_one(Input).value == ""
        mine = next(
            i
            for i in app.items()
            if i.message["message_type"] == "user" and i.message["chat_jid"] == "tui:main"
        )
        assert "tui-user" in mine.rendered.label.plain
        answer = next(i for i in app.items() if i.message["message_type"] == "assistant")
        assert answer.has_class("assistant")
        label = answer.rendered.label.plain
        assert server.gateway.config.assistant.name in label
        assert "(main)" in label


async def test_tui_shows_an_answer_growing_while_the_model_writes_it(data_dir: Path) -> None:
    words = ["Once ", "upon ", "a ", "time ", "a ", "router ", "kept ", "every ", "promise."]
    story = "".join(words)
    lines = [
        {"model": "llama3.2", "message": {"role": "assistant", "content": word}, "done": False}
        for word in words
    ]
    lines.append(
        {
            "model": "llama3.2",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 12,
            "eval_count": len(words),
        }
    )
    async with serve_fake() as model:
        # Ollama streams NDJSON; this model writes a word every 0.3 s.
        model.script(ndjson_reply(lines, every_s=0.3))
        environ = {
            "POSTROOM_DEFAULTS__PROVIDER": "ollama",
            "POSTROOM_PROVIDERS__OLLAMA__BASE_URL": model.base_url,
            "POSTROOM_PROVIDERS__OLLAMA__STREAM": "true",
        }
        async with serving(data_dir, environ=environ) as server:
            app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
            async with app.run_test(size=(120, 40)) as pilot:
                await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "connected")
                await pilot.press(*"tell me a story", "enter")

                def partly_written() -> bool:
                    texts = [item.text for item in app.streams()]
                    return bool(texts) and "upon" in texts[0] and texts[0] != story

                await until(pilot, partly_written, "part of the answer")
                (growing,) = app.streams()
                assert story.startswith(growing.text)
                assert "tui:main" in growing.query_one(".label", Static).render().plain
                assert not [i for i in app.items() if i.message["message_type"] == "assistant"]

                await until(
                    pilot, lambda: ("tui:main", "assistant", story) in shown(app), "the answer"
                )
                await until(pilot, lambda: not app.streams(), "the growing answer to go")
        assert [r.path for r in model.requests] == ["/api/chat"]
        assert model.requests[0].json["stream"] is True


async def test_tui_shows_other_chats_live_and_host_notices(server: Server) -> None:
    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        await server.post("a group message, live")
        await until(
            pilot,
            lambda: (GROUP, "user", "a group message, live") in shown(app),
            "the group message",
        )
        assert GROUP in item_with(app, "a group message, live").rendered.label.plain
        # The group's message fired a turn: its echo answer has the same text, another type.
        await until(
            pilot,
            lambda: (GROUP, "assistant", "a group message, live") in shown(app),
            "the group's answer",
        )
        answer = item_with(app, "a group message, live", "assistant")
        assert answer.has_class("assistant")
        assert "🤖" in answer.rendered.label.plain

        # A message the view already holds is never drawn twice, whichever frame repeats it
        # (a history read overlapping live events, a replayed live event).
        before = shown(app)
        again = [i.message for i in app.items()]
        await app._on_frame({"type": "history", "messages": again})
        await app._on_frame({"type": "message", "message": again[0]})
        await pilot.pause()
        assert shown(app) == before
        keys = [(i.message["id"], i.message["chat_jid"]) for i in app.items()]
        assert len(keys) == len(set(keys))

        await pilot.press(*"/status", "enter")
        await until(
            pilot,
            lambda: any(t == "host" and c.startswith("folder main") for _, t, c in shown(app)),
            "the /status answer",
        )
        notice = next(i for i in app.items() if i.message["message_type"] == "host")
        assert notice.has_class("host")
        assert notice.rendered.label.plain.split("  ", 1)[1].startswith("🏠 host")
        assert notice.message["chat_jid"] == "tui:main"


async def test_tui_distinguishes_every_message_type(server: Server) -> None:
    gateway_clock = server.gateway.services.clock

    def row(content: str, message_type: MessageType, sender: str, **extra: Any) -> NewMessage:
        return NewMessage(
            id=new_message_id(),
            chat_jid="tui:main",
            sender=sender,
            sender_name=sender,
            content=content,
            timestamp=gateway_clock(),
            message_type=message_type,
            is_from_me=True,
            routed_to="main",
            **extra,
        )

    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 60)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        await server.store(row("be brief", MessageType.SYSTEM, "system"))
        await server.store(
            row("ok", MessageType.TOOL_RESULT, "command_output", metadata={"exit_code": 0})
        )
        await server.store(
            row("boom", MessageType.TOOL_RESULT, "command_output", metadata={"exit_code": 2})
        )
        await server.store(row("pondering", MessageType.TRACE, "thinking"))
        await server.store(row("rebooted", MessageType.HOST, "host"))
        observed = row("overheard", MessageType.USER, GROUP_SENDER, observed=True)
        await server.store(observed)
        await until(pilot, lambda: len(app.items()) == 6, "six messages")

        kinds = {str(i.message["content"]): i for i in app.items()}
        assert kinds["be brief"].has_class("system")
        assert "⚙️ system" in kinds["be brief"].rendered.label.plain
        assert kinds["ok"].has_class("tool-ok")
        assert "🔧 ✅" in kinds["ok"].rendered.label.plain
        assert kinds["boom"].has_class("tool-failed")
        assert "🔧 ❌" in kinds["boom"].rendered.label.plain
        assert "exit 2" in kinds["boom"].rendered.label.plain
        assert kinds["rebooted"].has_class("host")
        assert "🏠" in kinds["rebooted"].rendered.label.plain
        assert kinds["overheard"].has_class("observed")
        assert "(observed)" in kinds["overheard"].rendered.label.plain

        trace = kinds["pondering"]
        assert trace.has_class("trace")
        collapsible = trace.query_one(Collapsible)
        assert collapsible.collapsed
        assert "thinking" in collapsible.title
        collapsible.collapsed = False
        await pilot.pause()
        assert not collapsible.collapsed

        # The typing indicator follows the server's typing events for the folder.
        server.gateway.services.signals.typing(GROUP, "main", True)
        await until(pilot, lambda: GROUP in app.typing_text, "the typing indicator")
        assert "is typing" in app.typing_text
        server.gateway.services.signals.typing(GROUP, "main", False)
        await until(pilot, lambda: app.typing_text == "", "the typing indicator to clear")


async def test_tui_switches_folders_with_the_picker(server: Server) -> None:
    await server.add_folder("ops")
    await server.post("main traffic")
    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: bool(app.items()), "main's history")
        assert app.folders == ["main", "ops"]

        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, FolderPicker), "the folder picker")
        await pilot.press("ctrl+o")  # already open: not stacked twice
        assert len([s for s in app.screen_stack if isinstance(s, FolderPicker)]) == 1
        options = app.screen.query_one(OptionList)
        assert options.option_count == 2
        assert options.highlighted == 0  # the current folder
        await pilot.press("down", "enter")
        # The hello comes first, then the old folder's messages leave the screen.
        await until(pilot, lambda: app.folder == "ops" and not app.items(), "the switch")
        assert not isinstance(app.screen, FolderPicker)
        assert app.chat_jid == "tui:ops"
        assert "folder ops" in app.status_text
        assert app.items() == []
        assert app.connection.folder == "ops"

        await pilot.press(*"to ops", "enter")
        await until(pilot, lambda: ("tui:ops", "assistant", "to ops") in shown(app), "ops' answer")
        # main's traffic stays out of the ops view.
        await server.post("more main traffic")
        await pilot.press(*"again", "enter")
        await until(pilot, lambda: ("tui:ops", "assistant", "again") in shown(app), "the answer")
        assert all(chat == "tui:ops" for chat, _, _ in shown(app))

        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, FolderPicker), "the folder picker")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FolderPicker), "the picker to close")
        assert app.folder == "ops"


async def test_tui_with_a_wrong_token_shows_the_refusal_and_stops_trying(server: Server) -> None:
    app = PostroomTUI(server.base_url, "wrong-token", "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.REFUSED, "the refusal")
        assert "refused the API token" in app.status_text
        assert app.status_text.startswith("✖")
        assert app.query_one("#status").has_class("refused")
        await pilot.pause(0.4)  # longer than the whole back-off: no new attempt
        assert app.link.state is LinkState.REFUSED

        await pilot.press(*"anyone?", "enter")
        await pilot.pause()
        assert app.query_one(Input).value == "anyone?"  # not sent, kept
        await pilot.press("ctrl+o")  # no hello, so no folder list to pick from
        await pilot.pause()
        assert not isinstance(app.screen, FolderPicker)

    # Once the operator closes the UI, `postroom chat` ends with the refusal and exit 1.
    with pytest.raises(typer.Exit) as ended:
        exit_status(app)
    assert ended.value.exit_code == 1


async def test_tui_with_an_unknown_folder_says_so(server: Server) -> None:
    app = PostroomTUI(server.base_url, server.token, "nosuch", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.REFUSED, "the refusal")
        assert "nosuch" in app.status_text


async def test_tui_reconnects_after_the_server_restarts(data_dir: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        first_server = contextlib.AsyncExitStack()
        stack.push_async_callback(first_server.aclose)
        first = await first_server.enter_async_context(serving(data_dir))
        await first.add_folder("ops")
        app = PostroomTUI(first.base_url, first.token, "main", backoff_s=FAST_BACKOFF)
        pilot = await stack.enter_async_context(app.run_test(size=(120, 40)))
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        await first.post("before the restart")
        await until(
            pilot, lambda: (GROUP, "user", "before the restart") in shown(app), "the first message"
        )
        # A turn in another chat of the folder (not GROUP: its own echo turn would end it).
        first.gateway.services.signals.typing("telegram:group/77", "main", True)
        await until(pilot, lambda: "group/77" in app.typing_text, "the typing indicator")

        await first_server.aclose()  # the server goes away while the app keeps running
        await until(pilot, lambda: app.link.state is LinkState.RECONNECTING, "the lost link")
        await until(pilot, lambda: "reconnecting in" in app.status_text, "the retry delay")
        assert app.typing_text == ""  # nobody would say when that turn ends
        # The first status says the link closed; the next failed attempt says why.
        await until(pilot, lambda: "connection refused" in app.status_text, "the reason")

        # Picking a folder while away: the next connection opens it.
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, FolderPicker), "the folder picker")
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.connection.folder == "ops", "the folder for the next link")

        second = await stack.enter_async_context(serving(data_dir, port=first.port))
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the new link")
        await until(pilot, lambda: app.folder == "ops" and not app.items(), "ops on reconnect")
        assert app.chat_jid == "tui:ops"
        assert "folder ops" in app.status_text

        # Back to main: its history, each message once, then live traffic again.
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, FolderPicker), "the folder picker")
        await pilot.press("up", "enter")
        await until(
            pilot,
            lambda: (GROUP, "user", "before the restart") in shown(app),
            "the history again",
        )
        await second.post("after the restart")
        await until(
            pilot, lambda: (GROUP, "user", "after the restart") in shown(app), "a live message"
        )
        assert shown(app).count((GROUP, "user", "before the restart")) == 1
        exit_status(app)  # connected: `postroom chat` would end normally


async def test_tui_says_why_it_cannot_connect(server: Server) -> None:
    nobody = PostroomTUI("http://127.0.0.1:9", server.token, "main", backoff_s=FAST_BACKOFF)
    async with nobody.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "reconnecting in" in nobody.status_text, "the first failure")
        assert "connection refused (is postroom serve running?)" in nobody.status_text
        assert nobody.query_one("#status").has_class("reconnecting")

    # An HTTP server without the socket at that path (here: a path prefix postroom lacks).
    elsewhere = PostroomTUI(
        f"{server.base_url}/elsewhere", server.token, "main", backoff_s=FAST_BACKOFF
    )
    async with elsewhere.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "answered HTTP" in elsewhere.status_text, "the HTTP answer")
        assert "is this postroom serve?" in elsewhere.status_text


async def test_tui_shows_the_error_the_server_answers_a_send_with(server: Server) -> None:
    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        app.query_one(Input).value = "x" * 70_000  # over the 64 KiB content limit
        await pilot.press("enter")
        await until(pilot, lambda: app.last_error is not None, "the error")
        assert app.last_error is not None
        assert "the limit is 65536" in app.last_error
        assert any("the limit is" in str(n.message) for n in app._notifications)
        assert app.items() == []
        await pilot.press("ctrl+a")
        app.query_one(Input).value = "   "
        await pilot.press("enter")  # blank: nothing is sent
        await pilot.pause(0.2)
        assert app.query_one(Input).value == "   "


def test_the_link_needs_a_delay_to_retry_with() -> None:
    async def on_frame(_frame: dict[str, Any]) -> None:
        return None

    with pytest.raises(ValueError, match="at least one delay"):
        Connection(
            url="http://h:1",
            token="t",
            folder="main",
            on_frame=on_frame,
            on_status=lambda _status: None,
            backoff_s=(),
        )


async def test_quit_keys(server: Server) -> None:
    app = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.link.state is LinkState.CONNECTED, "the connection")
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, "the app to quit")

    other = PostroomTUI(server.base_url, server.token, "main", backoff_s=FAST_BACKOFF)
    async with other.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")  # typed into the input: not a quit
        assert other.query_one(Input).value == "q"
        await pilot.press("escape", "q")  # from the message log it quits
        await until(pilot, lambda: other._exit, "the app to quit")


# --------------------------------------------------------------------------- the command


def test_chat_says_in_one_sentence_when_no_server_answers(data_dir: Path) -> None:
    result = cli(data_dir, "chat", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Cannot reach a postroom server at http://127.0.0.1:9" in lines[0]
    assert "Traceback" not in result.stderr


async def test_chat_refuses_an_unknown_folder_and_a_wrong_token(
    server: Server, data_dir: Path
) -> None:
    result = await asyncio.to_thread(
        cli, data_dir, "chat", "--folder", "nosuch", "--url", server.base_url
    )
    assert result.exit_code == 1
    assert "There is no folder nosuch on the server; the folders are main." in result.stderr

    config = data_dir / "postroom.toml"
    config.write_text(config.read_text("utf-8").replace(server.token, "wrong-token"), "utf-8")
    result = await asyncio.to_thread(cli, data_dir, "chat", "--url", server.base_url)
    assert result.exit_code == 1
    assert "refused the API token" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1

    # No token at all is refused the same way.
    config.write_text(config.read_text("utf-8").replace("wrong-token", ""), "utf-8")
    result = await asyncio.to_thread(cli, data_dir, "chat", "--url", server.base_url)
    assert result.exit_code == 1
    assert "refused the API token" in result.stderr


async def test_chat_says_when_the_address_is_not_a_postroom_server(
    server: Server, data_dir: Path
) -> None:
    result = await asyncio.to_thread(cli, data_dir, "chat", "--url", "ftp://127.0.0.1:1")
    assert result.exit_code == 1
    assert "ftp://127.0.0.1:1 is not an http:// or ws:// address" in result.stderr

    # Answering HTTP, but not postroom's API (a path prefix the server does not have).
    result = await asyncio.to_thread(
        cli, data_dir, "chat", "--url", f"ws://127.0.0.1:{server.port}/elsewhere"
    )
    assert result.exit_code == 1
    assert "answered HTTP 404 for its folder list; is it a postroom server?" in result.stderr
    assert "Traceback" not in result.stderr


async def test_postroom_chat_runs_the_ui_in_a_terminal(server: Server, data_dir: Path) -> None:
    """The real command in a pseudo-terminal: it draws the connected UI and Ctrl+C ends it
    with exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in _clean_env()}
    env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process: asyncio.subprocess.Process | None = None
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "postroom",
            "--data",
            str(data_dir),
            "chat",
            "--url",
            server.base_url,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=env,
        )
        os.close(terminal)
        terminal = -1
        screen = b""
        async with asyncio.timeout(WAIT_S * 2):
            while b"tui-user in tui:main" not in screen:
                screen += await asyncio.to_thread(_read_some, controller)
            os.write(controller, b"\x03")  # Ctrl+C, as the terminal sends it in raw mode
            while process.returncode is None:
                screen += await asyncio.to_thread(_read_some, controller)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await process.wait()
        assert process.returncode == 0, screen.decode(errors="replace")[-2000:]
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)


def _read_some(fd: int) -> bytes:
    """What the terminal has shown since the last read (b"" after a short wait for none)."""
    ready, _, _ = select.select([fd], [], [], 0.1)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the program closed its side of the terminal
        return b""


def test_server_url_reaches_a_wildcard_bind_on_loopback() -> None:
    assert server_url("0.0.0.0", 8484) == "http://127.0.0.1:8484"
    assert server_url("::", 8484) == "http://[::1]:8484"
    assert server_url("::1", 1) == "http://[::1]:1"
    assert server_url("example.org", 80) == "http://example.org:80"
    assert socket_url("http://h:1", folder="x/y") == "ws://h:1/ws/tui?folder=x%2Fy"
    assert socket_url("https://h/base/", folder="m").startswith("wss://h/base/ws/tui?")
    with pytest.raises(ValueError, match="not an http"):
        socket_url("ftp://h", folder="m")
    assert auth_headers("a b") == {"Authorization": "Bearer a b"}


def test_render_keeps_content_verbatim_and_marks_unknown_types() -> None:
    rendered = render_message(
        {
            "chat_jid": "web:main/anon-1",
            "sender": "web:anon/1",
            "sender_name": "",
            "content": "[bold]not markup[/bold]",
            "message_type": "user",
            "topic": "billing",
            "metadata": {"command": True},
        }
    )
    assert rendered.body.plain == "[bold]not markup[/bold]"
    assert rendered.kind == "user"
    assert "web:anon/1" in rendered.label.plain
    assert "#billing" in rendered.label.plain
    assert "command" in rendered.label.plain
    odd = render_message({"message_type": "weird", "content": "x", "timestamp": "garbage"})
    assert odd.kind == "user"
    assert "[weird]" in odd.label.plain
    assert odd.plain.endswith("\nx")
