"""The built-in hook channel (ROUTING §1, INTERFACES §4), ``postroom channels`` and the channel
lines of ``postroom doctor``, against a real gateway."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from postroom.channels.hook import build, render_payload
from postroom.core.errors import ConfigError

from channel_gateway import (
    cli,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)

SECRET = "hook-secret-0123456789"


def sign(
    body: bytes, path: str = "/hooks/acme/github", secret: str = SECRET, *, at: float | None = None
) -> str:
    """INTERFACES §4, written out here rather than through postroom's helper."""
    t = int(time.time() if at is None else at)
    mac = hmac.new(secret.encode(), f"{t}.{path}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hook_data(tmp_path: Path, *, port: int | None = None) -> Path:
    data = init_data_dir(tmp_path / "data")
    server = f"\n[server]\nport = {port}\n" if port else ""
    configure(data, f'[channels.hook]\nsecret = "{SECRET}"\n' + server)
    if port:
        # The template's commented [server] section stays; the appended one is the real one.
        text = (data / "postroom.toml").read_text("utf-8")
        assert text.count("\n[server]\n") == 2
        (data / "postroom.toml").write_text(
            text.replace("[server]\n# host", "# [server]\n# host", 1), "utf-8"
        )
    return data


def messages_in(data: Path, chat: str) -> list[tuple[str, str, str, str]]:
    return [
        (str(r[0]), str(r[1]), str(r[2]), str(r[3]))
        for r in stored_rows(
            data,
            "SELECT sender, message_type, content, id FROM messages WHERE chat_jid = ? "
            "ORDER BY seq",
            chat,
        )
    ]


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({}, "secret is required"),
        ({"secret": "short"}, "secret"),
        ({"secret": SECRET, "sekret": "x"}, "unknown key 'sekret'"),
        ({"secret": SECRET, "max_body_bytes": 10}, "max_body_bytes"),
    ],
)
def test_bad_configuration_names_the_key(section: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build(section)


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b"deploy finished", "text/plain", "deploy finished"),
        (b'{"text": "build 42 is green"}', "application/json", "build 42 is green"),
        (
            b'{"summary": "  "}',
            "application/json",
            'ci event:\n```json\n{\n  "summary": "  "\n}\n```',
        ),
        (b"[1, 2]", "", "ci event:\n```json\n[\n  1,\n  2\n]\n```"),
        (b"{not json", "application/json", "{not json"),
        (b"\xff\xfeoops", "text/plain", "\ufffd\ufffdoops"),
    ],
)
def test_a_payload_becomes_its_text_field_or_the_json_itself(
    body: bytes, content_type: str, expected: str
) -> None:
    assert render_payload("ci", body, content_type) == expected


# --------------------------------------------------------------------------- through serve


async def test_a_signed_hook_is_stored_routed_and_answered_once(tmp_path: Path) -> None:
    data = await asyncio.to_thread(hook_data, tmp_path)
    body = json.dumps({"text": "deploy of api finished"}).encode()
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        headers = {
            "X-Postroom-Signature": sign(body, "/hooks/acme/eng/github"),
            "Content-Type": "application/json",
        }
        first = await http.post("/hooks/acme/eng/github", content=body, headers=headers)
        again = await http.post("/hooks/acme/eng/github", content=body, headers=headers)
        assert first.status_code == 200, first.text
        assert again.status_code == 200, again.text
        assert first.json()["duplicate"] is False and again.json()["duplicate"] is True
        # The echo provider answers the hook chat; the answer is stored in the same chat.
        await eventually(
            lambda: any(
                t == "assistant" for _, t, _, _ in messages_in(data, "hook:acme/eng/github")
            )
        )
    rows = messages_in(data, "hook:acme/eng/github")
    users = [r for r in rows if r[1] == "user"]
    assert [(s, c) for s, _, c, _ in users] == [("hook:github", "deploy of api finished")]


_HI = b'{"text": "hi"}'


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="unsigned"),
        pytest.param({"X-Postroom-Signature": "sha256=" + "0" * 64}, id="old-format"),
        pytest.param(
            {
                "X-Postroom-Signature": "sha256="
                + hmac.new(SECRET.encode(), _HI, "sha256").hexdigest()
            },
            id="old-format-correct-body-mac",
        ),
        pytest.param({"X-Postroom-Signature": sign(b"another body")}, id="another-body"),
        pytest.param({"X-Postroom-Signature": sign(_HI, "/hooks/acme/other")}, id="another-path"),
        pytest.param({"X-Postroom-Signature": sign(_HI, secret="not-the-secret-0000")}, id="key"),
        pytest.param("stale", id="stale"),
        pytest.param("future", id="future"),
        pytest.param({"X-Postroom-Signature": "t=1,v1=zz"}, id="malformed"),
        pytest.param(
            {"X-Postroom-Signature": sign(_HI)[:-1].encode() + "é".encode("latin-1")},
            id="non-ascii",
        ),
    ],
)
async def test_a_forged_or_unsigned_hook_is_refused_and_nothing_is_stored(
    tmp_path: Path, headers: dict[str, str | bytes] | str
) -> None:
    data = await asyncio.to_thread(hook_data, tmp_path)
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        if isinstance(headers, str):  # signed now, just outside the 5-minute window
            offset = 310 if headers == "future" else -310
            headers = {"X-Postroom-Signature": sign(_HI, at=time.time() + offset)}
        response = await http.post("/hooks/acme/github", content=_HI, headers=headers)
        assert response.status_code == 401
        assert "X-Postroom-Signature" in response.json()["error"]
    assert stored_rows(data, "SELECT COUNT(*) FROM messages WHERE chat_jid LIKE 'hook:%'") == [(0,)]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/hooks/github", 404),  # a source alone: no path
        ("/hooks/Acme/github", 404),  # upper case is not a segment
        ("/hooks/acme/../github", 404),
        ("/hooks/acme/git%20hub", 404),
    ],
)
async def test_a_hook_path_outside_the_grammar_is_refused(
    tmp_path: Path, path: str, status: int
) -> None:
    data = await asyncio.to_thread(hook_data, tmp_path)
    body = b"x"
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        signature = sign(body, path)
        response = await http.post(path, content=body, headers={"X-Postroom-Signature": signature})
        assert response.status_code == status
    assert stored_rows(data, "SELECT COUNT(*) FROM messages WHERE chat_jid LIKE 'hook:%'") == [(0,)]


async def test_an_oversized_hook_is_refused_before_its_signature_is_checked(
    tmp_path: Path,
) -> None:
    data = await asyncio.to_thread(init_data_dir, tmp_path / "data")
    configure(data, f'[channels.hook]\nsecret = "{SECRET}"\nmax_body_bytes = 2048\n')
    body = b"a" * 4096
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        response = await http.post(
            "/hooks/acme/big",
            content=body,
            headers={"X-Postroom-Signature": sign(body, "/hooks/acme/big")},
        )
        assert response.status_code == 413
    assert stored_rows(data, "SELECT COUNT(*) FROM messages WHERE chat_jid LIKE 'hook:%'") == [(0,)]


async def test_the_idempotency_key_names_the_delivery(tmp_path: Path) -> None:
    data = await asyncio.to_thread(hook_data, tmp_path)
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        for n, key in enumerate(("delivery-1", "delivery-1", "delivery-2")):
            body = f"event {n}".encode()
            response = await http.post(
                "/hooks/ops/pager",
                content=body,
                headers={
                    "X-Postroom-Signature": sign(body, "/hooks/ops/pager"),
                    "Idempotency-Key": key,
                },
            )
            assert response.status_code == 200
    users = [r for r in messages_in(data, "hook:ops/pager") if r[1] == "user"]
    assert [(c, i) for _, _, c, i in users] == [
        ("event 0", "delivery-1"),
        ("event 2", "delivery-2"),
    ]


# --------------------------------------------------------------------------- channels, doctor


def test_channels_without_a_server_lists_the_enabled_adapters(tmp_path: Path) -> None:
    data = hook_data(tmp_path, port=free_port())
    result = cli(data, "channels", "--json")
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert listing["running"] is False
    assert [(c["name"], c["state"]) for c in listing["channels"]] == [("hook", "not running")]
    text = cli(data, "channels")
    assert "is not running" in text.stdout and "hook" in text.stdout


def test_channels_with_nothing_enabled_says_how_to_enable_one(tmp_path: Path) -> None:
    data = init_data_dir(tmp_path / "data")
    configure(data, '[channels.telegram]\nenabled = false\ntoken = "1:x"\n')
    result = cli(data, "channels")
    assert result.exit_code == 0, result.output
    assert "No channel adapter is enabled" in result.stdout
    assert json.loads(cli(data, "channels", "--json").stdout)["channels"] == []


async def test_channels_asks_the_running_server_for_each_adapters_state(tmp_path: Path) -> None:
    port = free_port()
    data = await asyncio.to_thread(hook_data, tmp_path, port=port)
    async with running_gateway(data, port=port) as (gateway, _url):
        listing = json.loads((await asyncio.to_thread(cli, data, "channels", "--json")).stdout)
        text = (await asyncio.to_thread(cli, data, "channels")).stdout
        assert gateway.channels.status() == listing["channels"]
    assert gateway.channels.status()[0]["state"] == "stopped"  # after serve stopped
    assert listing["running"] is True
    (hook,) = listing["channels"]
    assert (hook["name"], hook["state"], hook["last_error"]) == ("hook", "connected", None)
    assert "connected" in text and "not running" not in text


def test_doctor_checks_each_enabled_channel(tmp_path: Path) -> None:
    data = hook_data(tmp_path)
    result = cli(data, "doctor", "--json")
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(result.stdout)}
    assert checks["channel hook"] == ("ok", "inbound webhooks at /hooks/<path>/<source> (signed)")


def test_doctor_reports_a_channel_configuration_error_in_one_line(tmp_path: Path) -> None:
    data = init_data_dir(tmp_path / "data")
    configure(data, '[channels.hook]\nsecret = "short"\n')
    result = cli(data, "doctor", "--json")
    assert result.exit_code == 1
    checks = {c["check"]: (c["status"], c["detail"]) for c in json.loads(result.stdout)}
    status, detail = checks["channels"]
    assert status == "error" and detail.startswith("[channels.hook]: secret")


async def test_a_replay_inside_the_window_is_a_duplicate(tmp_path: Path) -> None:
    data = await asyncio.to_thread(hook_data, tmp_path)
    headers = {"X-Postroom-Signature": sign(_HI)}
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        first = await http.post("/hooks/acme/github", content=_HI, headers=headers)
        replay = await http.post("/hooks/acme/github", content=_HI, headers=headers)
    assert first.status_code == replay.status_code == 200
    assert (first.json()["duplicate"], replay.json()["duplicate"]) == (False, True)


async def test_hooks_without_a_secret_are_disabled(tmp_path: Path) -> None:
    data = await asyncio.to_thread(init_data_dir, tmp_path / "data")
    async with running_gateway(data) as (_gateway, url), httpx.AsyncClient(base_url=url) as http:
        response = await http.post(
            "/hooks/acme/github", content=_HI, headers={"X-Postroom-Signature": sign(_HI)}
        )
    assert response.status_code == 403
    assert response.json() == {"error": "webhooks are disabled: set [channels.hook] secret"}
    assert stored_rows(data, "SELECT COUNT(*) FROM messages WHERE chat_jid LIKE 'hook:%'") == [(0,)]
