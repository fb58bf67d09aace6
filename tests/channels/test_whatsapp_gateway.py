"""WhatsApp's configuration, its credential check, and the whole path: a signed webhook into a
real postroom gateway (``postroom serve`` in this loop, echo provider), the answer out through
the fake Graph API's ``/messages``; a voice note transcribed by the gateway's ``[transcriber]``
after the webhook was acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from postroom.channels.whatsapp import WEBHOOK_PATH, build
from postroom.core.errors import ConfigError, PostroomError

from channel_gateway import (
    OPEN_DMS,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)
from fake_engine_slack_whatsapp import serve
from fake_whatsapp import (
    ACCESS_TOKEN,
    ALICE,
    APP_SECRET,
    PHONE_ID,
    VERIFY_TOKEN,
    FakeWhatsApp,
    message,
    section,
    signed,
    text,
    webhook,
)
from fake_whisper import FakeWhisper
from fake_whisper import serving as serving_whisper


@pytest.fixture
async def fake() -> AsyncIterator[FakeWhatsApp]:
    fake = FakeWhatsApp()
    async with serve(fake.app()) as url:
        fake.base_url = url
        yield fake


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A directory as ``postroom init`` leaves it (the CLI runs its own loop: not in a test's)."""
    return init_data_dir(tmp_path / "data")


def whatsapp_section(fake: FakeWhatsApp) -> str:
    """``[channels.whatsapp]`` of ``postroom.toml``, pointed at the fake Graph API."""
    return f"""
[channels.whatsapp]
enabled = true
access_token = "{ACCESS_TOKEN}"
phone_number_id = "{PHONE_ID}"
app_secret = "{APP_SECRET}"
verify_token = "{VERIFY_TOKEN}"
base_url = "{fake.base_url}"
"""


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"access_token": None}, "access_token"),
        ({"phone_number_id": None}, "phone_number_id"),
        ({"app_secret": None}, "app_secret"),
        ({"verify_token": None}, "verify_token"),
        ({"phone_number_id": "+1 555 0100"}, "phone_number_id"),
        ({"access_token": "short"}, "access_token"),
        ({"api_version": "21"}, "api_version"),
        ({"base_url": "graph.facebook.com"}, "base_url"),
        ({"webhook_path": "channels/whatsapp"}, "webhook_path"),
        ({"send_timeout_s": 0}, "send_timeout_s"),
        ({"tokn": "x"}, "tokn"),
    ],
)
def test_bad_configuration_is_one_sentence_naming_the_key(
    changes: dict[str, Any], key: str
) -> None:
    config = {
        k: v
        for k, v in {**section("https://graph.facebook.com"), **changes}.items()
        if v is not None
    }
    with pytest.raises(ConfigError) as raised:
        build(config)
    message = str(raised.value)
    assert key in message and message.endswith(".") and "\n" not in message
    assert ACCESS_TOKEN not in message and APP_SECRET not in message


def test_defaults_and_the_webhook_route() -> None:
    channel = build(
        {
            "access_token": ACCESS_TOKEN,
            "phone_number_id": PHONE_ID,
            "app_secret": APP_SECRET,
            "verify_token": VERIFY_TOKEN,
        }
    )
    assert channel.config.api_url == "https://graph.facebook.com/v21.0/"
    (route,) = channel.routes()
    assert getattr(route, "path", None) == WEBHOOK_PATH == "/channels/whatsapp/webhook"
    custom = build(
        {**section("https://graph.example/"), "webhook_path": "/wa/hook", "api_version": "v23.0"}
    )
    assert custom.config.api_url == "https://graph.example/v23.0/"
    assert [getattr(r, "path", None) for r in custom.routes()] == ["/wa/hook"]


async def test_check_reads_the_number_started_or_not(fake: FakeWhatsApp) -> None:
    channel = build(section(fake.base_url))
    # postroom doctor checks without starting the channel.
    assert await channel.check() == "WhatsApp number +1 555-078-3881 (Acme Support)"
    wrong = build(section(fake.base_url, access_token="EAAG-revoked-token"))
    with pytest.raises(PostroomError, match=r"Invalid OAuth access token \(190\)"):
        await wrong.check()
    unreachable = build(section("http://127.0.0.1:9"))
    with pytest.raises(PostroomError, match="could not be reached"):
        await unreachable.check()
    assert fake.calls[0][:2] == ("GET", f"/v21.0/{PHONE_ID}")


async def test_whole_path_from_a_whatsapp_webhook_through_the_gateway_to_messages(
    fake: FakeWhatsApp, data_dir: Path
) -> None:
    data = data_dir
    configure(data, whatsapp_section(fake) + OPEN_DMS)
    baseline = set(asyncio.all_tasks())
    async with running_gateway(data) as (gateway, url):
        async with httpx.AsyncClient(base_url=url) as client:
            handshake = await client.get(
                WEBHOOK_PATH,
                params={
                    "hub.mode": "subscribe",
                    "hub.verify_token": VERIFY_TOKEN,
                    "hub.challenge": "42",
                },
            )
            assert (handshake.status_code, handshake.text) == (200, "42")
            body, headers = signed(webhook([text("echo me, please", id="wamid.GW1")]))
            forged = await client.post(
                WEBHOOK_PATH, content=body, headers={**headers, "x-hub-signature-256": "sha256=00"}
            )
            assert forged.status_code == 401
            # A non-ASCII signature is just wrong: 401, never a TypeError and a 500.
            odd = {**headers, "x-hub-signature-256": b"sha256=" + "é".encode("latin-1")}
            assert (await client.post(WEBHOOK_PATH, content=body, headers=odd)).status_code == 401
            response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
            assert response.status_code == 200, response.text
        await eventually(lambda: fake.sent, timeout=20)
        statuses = {s["name"]: s for s in gateway.channels.status()}
        assert statuses["whatsapp"]["state"] == "connected"
    (answer,) = fake.sent
    assert (answer["to"], answer["recipient_type"]) == (ALICE, "individual")
    assert answer["context"] == {"message_id": "wamid.GW1"}
    assert "echo me, please" in answer["text"]["body"]
    # The turn showed the typing indicator on the message it answered.
    assert [r["message_id"] for r in fake.reads][:1] == ["wamid.GW1"]
    assert {t for t in asyncio.all_tasks() if not t.done()} <= baseline | {asyncio.current_task()}


async def test_a_voice_note_is_answered_by_its_transcript(
    fake: FakeWhatsApp, data_dir: Path
) -> None:
    """PIPELINE §1.4: the webhook is answered once the note (audio attached) is stored; the
    gateway's transcriber turns it into ``[Voice]: …`` before the turn, which answers that."""
    fake.media["AUD1"] = (b"OggS-words", "audio/ogg")
    whisper = FakeWhisper(text="call me back")
    async with serving_whisper(whisper) as whisper_url:
        transcriber = f'[transcriber]\nbase_url = "{whisper_url}"\nmodel = "whisper-1"\n'
        configure(data_dir, transcriber + whatsapp_section(fake) + OPEN_DMS)
        voice = message(
            "audio", {"id": "AUD1", "mime_type": "audio/ogg", "voice": True}, id="wamid.V1"
        )
        async with running_gateway(data_dir) as (_gateway, url):
            body, headers = signed(webhook([voice]))
            async with httpx.AsyncClient(base_url=url) as client:
                response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
            assert response.status_code == 200, response.text
            await eventually(lambda: fake.sent, timeout=20)
    (answer,) = fake.sent
    assert answer["text"]["body"] == "[Voice]: call me back"
    assert answer["context"] == {"message_id": "wamid.V1"}
    (upload,) = whisper.bodies
    assert b"OggS-words" in upload and b"whisper-1" in upload
    ((content,),) = stored_rows(data_dir, "SELECT content FROM messages WHERE id = 'wamid.V1'")
    assert content == "[Voice]: call me back"
