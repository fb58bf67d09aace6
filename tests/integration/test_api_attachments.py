"""Pictures and files through the HTTP API (INTERFACES §4): ``POST /api/v1/messages`` with
``attachments`` (base64 ``data`` or a ``url`` the server fetches), the refusals in one sentence,
``GET /api/v1/blobs/{sha256}``, and the whole way to the model: the gateway that ``postroom
serve`` builds, the real Anthropic SDK against a fake Messages API, and ``runs show``."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from postroom.api.uploads import UrlFetcher
from postroom.app.gateway import Gateway
from postroom.cli.main import app as cli_app
from postroom.config import Config
from postroom.core.errors import InvalidInput
from postroom.engine.folders import FolderSpec
from postroom.llm.anthropic import AnthropicProvider

from fake_llm_servers import FakeServer, json_reply, serve_fake
from gateway_support import new_data_dir, serving
from support import cli_env, eventually, logging_kept, queue_idle

TOKEN = "test-token-0123456789abcdef"
PNG = b"\x89PNG\r\n\x1a\n" + b"pixels" * 10
B64 = base64.b64encode(PNG).decode()
SHA = hashlib.sha256(PNG).hexdigest()
REMOTE = "https://pictures.example/cat.png"


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 4},
    }


async def allow_any_host(host: str) -> None:
    """The tests' stand-in for the public-address check (their 'internet' is in-process)."""


def remote_files(request: httpx.Request) -> httpx.Response:
    if request.url == httpx.URL(REMOTE):
        return httpx.Response(200, content=PNG, headers={"content-type": "image/png"})
    return httpx.Response(404)


@dataclass
class Served:
    gateway: Gateway
    url: str
    llm: FakeServer
    data_dir: Path

    def client(self, *, token: str | None = TOKEN) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = Config.model_validate(
        {"api": {"token": TOKEN}, "limits": {"image_bytes": 200, "file_bytes": 400}}
    )
    data_dir = await new_data_dir(tmp_path / "data")
    (data_dir / "postroom.toml").write_text(
        f'[api]\ntoken = "{TOKEN}"\n[limits]\nimage_bytes = 200\nfile_bytes = 400\n'
    )
    async with serve_fake() as llm:
        provider = AnthropicProvider(api_key="sk-ant-test", account="a", base_url=llm.base_url)
        fetcher = UrlFetcher(transport=httpx.MockTransport(remote_files), check_host=allow_any_host)
        gateway = await Gateway.build(
            data_dir, config, providers={"anthropic": provider}, fetcher=fetcher
        )
        services = gateway.services
        await services.folders.add_folder(
            "main", FolderSpec(provider="anthropic", model="claude-sonnet-4-6"), actor="test"
        )
        await services.routes.add_route(9999, "", "main", actor="test")
        async with serving(gateway) as url:
            yield Served(gateway, url, llm, data_dir)


def message(*attachments: dict[str, Any], text: str = "What is this?") -> dict[str, Any]:
    return {
        "chat_jid": "hook:pics",
        "sender": "hook:user/7",
        "content": text,
        "attachments": list(attachments),
    }


async def test_a_picture_reaches_the_model_and_runs_show_names_it(served: Served) -> None:
    served.llm.script(json_reply(answer("A cat.")))
    async with served.client() as http:
        response = await http.post(
            "/api/v1/messages",
            json=message({"kind": "image", "mime": "image/png", "name": "cat.png", "data": B64}),
        )
        assert response.status_code == 200, response.text
        await eventually(lambda: queue_idle(served.gateway.services), "the turn to finish")
        stored = (await http.get("/api/v1/messages", params={"chat_jid": "hook:pics"})).json()
    first = stored["messages"][0]
    assert first["metadata"]["attachments"] == [
        {"kind": "image", "mime": "image/png", "name": "cat.png", "size": len(PNG), "sha256": SHA}
    ]
    (request,) = served.llm.bodies()
    assert request["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
        {"type": "text", "text": "What is this?"},
    ]
    with logging_kept():
        # (The CLI runs its own event loop: in a thread, beside the server's.)
        shown = await asyncio.to_thread(
            CliRunner().invoke,
            cli_app,
            ["--data", str(served.data_dir), "runs", "show", "1"],
            env=cli_env(),
        )
    assert shown.exit_code == 0, shown.output
    assert f"sent image cat.png (image/png, sha256 {SHA[:12]})" in shown.output
    assert B64 not in shown.output


async def test_a_url_is_fetched_within_the_caps(served: Served) -> None:
    served.llm.script(json_reply(answer("A cat.")))
    async with served.client() as http:
        response = await http.post(
            "/api/v1/messages", json=message({"kind": "image", "mime": "", "url": REMOTE})
        )
        assert response.status_code == 200, response.text
        await eventually(lambda: queue_idle(served.gateway.services), "the turn to finish")
        blob = await http.get(f"/api/v1/blobs/{SHA}")
    assert blob.status_code == 200
    assert (blob.content, blob.headers["content-type"]) == (PNG, "image/png")
    assert blob.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("attachment", "status", "sentence"),
    [
        (
            {"kind": "image", "mime": "image/png", "name": "a.png", "data": "no base64!"},
            400,
            "The attachment 'a.png' has data that is not valid base64.",
        ),
        (
            {"kind": "image", "mime": "image/png", "data": base64.b64encode(b"x" * 201).decode()},
            413,
            "An attachment is 201 bytes; the limit is 200.",
        ),
        (
            {"kind": "file", "mime": "text/plain", "data": base64.b64encode(b"x" * 999).decode()},
            413,
            "An attachment is larger than the limit of 400 bytes.",
        ),
        (
            {"kind": "image", "mime": "png", "data": B64},
            400,
            "An attachment has MIME type 'png'; send a type of the form type/subtype, "
            "such as image/png.",
        ),
        (
            {"kind": "image", "mime": "text/html", "data": B64},
            400,
            "An attachment is an image but its MIME type is 'text/html'.",
        ),
        (
            {"kind": "sticker", "mime": "image/png", "data": B64},
            400,
            "An attachment has kind 'sticker'; the kinds are audio, file, image, video, voice.",
        ),
        (
            {"kind": "image", "mime": "image/png", "url": "https://pictures.example/none.png"},
            400,
            "An attachment could not be fetched: its URL answered HTTP 404.",
        ),
        (
            {"kind": "image", "mime": "image/png", "url": "file:///etc/passwd"},
            400,
            "An attachment has a url that is not an http(s) URL.",
        ),
    ],
)
async def test_bad_attachments_are_refused_in_one_sentence(
    served: Served, attachment: dict[str, Any], status: int, sentence: str
) -> None:
    async with served.client() as http:
        response = await http.post("/api/v1/messages", json=message(attachment))
        assert (response.status_code, response.json()) == (status, {"error": sentence})
        stored = (await http.get("/api/v1/messages", params={"chat_jid": "hook:pics"})).json()
    assert stored == {"messages": []}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.1.2.3", "[::1]", "169.254.169.254"])
async def test_a_url_on_a_private_address_is_never_fetched(host: str) -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=PNG)

    fetcher = UrlFetcher(transport=httpx.MockTransport(record))
    with pytest.raises(InvalidInput, match="is not a public address"):
        await fetcher.fetch(f"http://{host}/a.png", cap_bytes=1000, label="An attachment")
    assert not seen


async def test_blobs_need_a_token_and_a_file_is_never_served_as_a_page(served: Served) -> None:
    page = b"<script>alert(1)</script>"
    async with served.client() as http:
        sent = await http.post(
            "/api/v1/messages",
            json=message(
                {
                    "kind": "file",
                    "mime": "text/html",
                    "name": "x.html",
                    "data": base64.b64encode(page).decode(),
                }
            ),
        )
        assert sent.status_code == 200, sent.text
        served_page = await http.get(f"/api/v1/blobs/{hashlib.sha256(page).hexdigest()}")
        missing = await http.get(f"/api/v1/blobs/{'0' * 64}")
    assert served_page.content == page
    assert served_page.headers["content-type"] == "application/octet-stream"
    assert served_page.headers["content-disposition"] == "attachment"
    assert (missing.status_code, missing.json()) == (
        404,
        {"error": f"There is no attachment {'0' * 64!r}."},
    )
    async with served.client(token=None) as anonymous:
        refused = await anonymous.get(f"/api/v1/blobs/{hashlib.sha256(page).hexdigest()}")
    assert (refused.status_code, refused.json()) == (
        401,
        {"error": "Missing or wrong bearer token."},
    )


async def test_the_operator_signed_in_on_the_dashboard_reads_blobs_without_a_token(
    served: Served,
) -> None:
    """The operator view of the web chat holds no token: its session cookie reads any chat's
    files (a GET, no CSRF); a session of a token confined to a folder is no operator's."""
    async with served.client() as http:
        sent = await http.post(
            "/api/v1/messages",
            json=message({"kind": "image", "mime": "image/png", "name": "cat.png", "data": B64}),
        )
        assert sent.status_code == 200, sent.text
    confined = await served.gateway.services.tokens.add("team", folder="main", actor="test")
    path = f"/api/v1/blobs/{SHA}?channel=elsewhere"
    async with served.client(token=None) as browser:
        assert (await browser.get(path)).status_code == 401
        signed = await browser.post("/dashboard/login", data={"token": TOKEN})
        assert signed.status_code == 303
        picture = await browser.get(path)
    assert (picture.status_code, picture.content) == (200, PNG)
    async with served.client(token=None) as browser:
        assert (
            await browser.post("/dashboard/login", data={"token": confined.secret})
        ).status_code == 303
        refused = await browser.get(path)
    assert refused.status_code == 401
