"""A photo and a PDF sent to the Telegram bot reach the model (MESSAGES §4, seed 004 steps 1
and 7), end to end: the fake Bot API → the real python-telegram-bot adapter → a gateway built
from a ``postroom init`` data directory → the real Anthropic SDK against a fake Messages API,
and the answers back at ``sendMessage``. The bytes are stored once, as blobs."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from channel_gateway import (
    OPEN_DMS,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)
from fake_llm_servers import FakeServer, json_reply, serve_fake
from fake_telegram import TOKEN, FakeTelegram, private_message, serve_fake_telegram

PHOTO = b"\xff\xd8\xff\xe0" + b"jpeg" * 50
PDF = b"%PDF-1.7\n" + b"invoice " * 20


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


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with serve_fake_telegram() as server:
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeServer]:
    async with serve_fake() as server:
        yield server


async def test_a_photo_and_a_pdf_reach_the_model(
    fake: FakeTelegram, llm: FakeServer, tmp_path: Path
) -> None:
    data = await asyncio.to_thread(init_data_dir, tmp_path / "data")
    configure(
        data,
        "[channels.telegram]\nenabled = true\n"
        f'token = "{TOKEN}"\nbase_url = "{fake.url}"\npoll_timeout = 1\n'
        "[providers.anthropic]\n"
        f'base_url = "{llm.base_url}"\napi_keys = ["sk-ant-test-key"]\n' + OPEN_DMS,
        model="claude-sonnet-4-6",
    )
    config = data / "postroom.toml"
    config.write_text(config.read_text().replace('provider = "echo"', 'provider = "anthropic"'))
    fake.files["photo-1"] = PHOTO
    fake.files["doc-1"] = PDF
    photo = [
        {
            "file_id": "photo-1",
            "file_unique_id": "u1",
            "width": 320,
            "height": 200,
            "file_size": len(PHOTO),
        }
    ]
    document = {
        "file_id": "doc-1",
        "file_unique_id": "u2",
        "file_name": "invoice.pdf",
        "mime_type": "application/pdf",
        "file_size": len(PDF),
    }
    llm.script(json_reply(answer("A photo of a receipt.")), json_reply(answer("It is an invoice.")))
    async with running_gateway(data):
        fake.push(private_message(None, message_id=401, photo=photo, caption="what is this?"))
        await eventually(lambda: len(fake.called("sendMessage")) >= 1, timeout=30)
        fake.push(private_message(None, message_id=402, document=document))
        await eventually(lambda: len(fake.called("sendMessage")) >= 2, timeout=30)
    first, second = llm.bodies()
    photo_b64, pdf_b64 = base64.b64encode(PHOTO).decode(), base64.b64encode(PDF).decode()
    assert first["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": photo_b64},
                },
                {"type": "text", "text": "what is this?"},
            ],
        }
    ]
    # The second turn sees the first exchange, the photo again (one of the newest rows with
    # pictures), and the PDF as a document block.
    latest = second["messages"][-1]["content"]
    assert latest == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf_b64},
        },
        {"type": "text", "text": "[File: invoice.pdf]"},
    ]
    assert [call["text"] for call in fake.called("sendMessage")] == [
        "A photo of a receipt.",
        "It is an invoice.",
    ]
    blobs = stored_rows(data, "SELECT sha256, mime, size FROM blobs ORDER BY size")
    assert blobs == [
        (hashlib.sha256(PDF).hexdigest(), "application/pdf", len(PDF)),
        (hashlib.sha256(PHOTO).hexdigest(), "image/jpeg", len(PHOTO)),
    ]
    (metadata,) = stored_rows(data, "SELECT metadata FROM messages WHERE id = '402'")[0]
    assert pdf_b64 not in metadata and TOKEN not in metadata
