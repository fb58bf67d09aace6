"""Pictures and files in a model's context (MESSAGES §4), through each real SDK against a fake
server on a loopback port: the exact request shape Anthropic, OpenAI (and a server speaking its
protocol), Gemini and Ollama receive for a message that carries an image, a PDF, a text file and
an archive — and what a model that cannot see is sent instead."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from postroom.core.attachments import AttachmentPolicy, AttachmentRef, Blob
from postroom.core.context import ContextMessage, attachment_hashes, format_messages_for_sdk
from postroom.core.messages import MessageType, StoredMessage
from postroom.llm.anthropic import AnthropicProvider
from postroom.llm.base import ModelRequest
from postroom.llm.gemini import GeminiProvider
from postroom.llm.ollama import OllamaProvider
from postroom.llm.openai import OpenAIProvider

from fake_llm_servers import FakeServer, json_reply, serve_fake

PNG = b"\x89PNG\r\n\x1a\n" + b"picture-bytes" * 3
PDF = b"%PDF-1.7\n" + b"invoice " * 4
CSV = b"day,amount\nmon,3\ntue,4\n"
ZIP = b"PK\x03\x04 archive"
BLOBS = {b.sha256: b for b in (Blob.of(PNG, "image/png"), Blob.of(PDF, "application/pdf"))}
BLOBS |= {b.sha256: b for b in (Blob.of(CSV, "text/csv"), Blob.of(ZIP, "application/zip"))}
SHA = {blob.data: sha for sha, blob in BLOBS.items()}
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
CSV_INLINE = "[file: days.csv, text/csv]\nday,amount\nmon,3\ntue,4\n"
PDF_LINE = f"[attachment: invoice.pdf, application/pdf, {len(PDF)} bytes]"
ZIP_LINE = f"[attachment: old.zip, application/zip, {len(ZIP)} bytes]"
PNG_LINE = f"[attachment: screen.png, image/png, {len(PNG)} bytes]"


def row(seq: int, content: str, *refs: AttachmentRef) -> StoredMessage:
    return StoredMessage(
        id=f"m{seq}",
        chat_jid="telegram:42",
        seq=seq,
        sender="telegram:42",
        sender_name="Ada",
        content=content,
        timestamp=datetime(2026, 1, 5, 12, seq, tzinfo=UTC),
        is_from_me=False,
        message_type=MessageType.USER,
        metadata={"attachments": [r.to_dict() for r in refs]},
    )


def ref(kind: str, mime: str, name: str, data: bytes) -> AttachmentRef:
    return AttachmentRef(kind, mime, name, len(data), SHA[data])


HISTORY = [
    row(
        1,
        "What is on this?",
        ref("image", "image/png", "screen.png", PNG),
        ref("file", "application/pdf", "invoice.pdf", PDF),
        ref("file", "text/csv", "days.csv", CSV),
        ref("file", "application/zip", "old.zip", ZIP),
    )
]


def context(*, vision: bool = True) -> list[ContextMessage]:
    policy = AttachmentPolicy(vision=vision)
    wanted = attachment_hashes(HISTORY, policy)
    blobs = {sha: blob for sha, blob in BLOBS.items() if sha in wanted}
    return format_messages_for_sdk(HISTORY, blobs=blobs, policy=policy)


def ask(messages: list[ContextMessage], model: str) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=messages, model=model)


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[FakeServer]:
    async with serve_fake() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeServer) -> Iterator[FakeServer]:
    server.requests.clear()
    server.replies.clear()
    yield server
    assert not server.replies, "the test scripted replies nobody asked for"


async def test_context_sends_media_inlines_text_and_names_the_rest() -> None:
    (message,) = context()
    assert message.content == f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}"
    assert [(p.as_kind, p.mime, p.data) for p in message.media] == [
        ("image", "image/png", PNG),
        ("document", "application/pdf", PDF),
    ]
    # The run record names the files by hash; their bytes never enter it.
    record = message.to_dict()
    assert record["attachments"] == [
        {"sent_as": "image", "sha256": SHA[PNG], "mime": "image/png", "name": "screen.png"},
        {
            "sent_as": "document",
            "sha256": SHA[PDF],
            "mime": "application/pdf",
            "name": "invoice.pdf",
        },
    ]
    assert B64_PNG not in str(record)


async def test_a_model_without_vision_gets_a_line_for_the_picture() -> None:
    (message,) = context(vision=False)
    assert message.content == f"What is on this?\n{PNG_LINE}\n{CSV_INLINE}\n{ZIP_LINE}"
    assert [p.as_kind for p in message.media] == ["document"]
    # The picture's bytes are not even read for such a model.
    assert SHA[PNG] not in attachment_hashes(HISTORY, AttachmentPolicy(vision=False))


async def test_only_the_newest_rows_send_their_images() -> None:
    rows = [row(i, f"photo {i}", ref("image", "image/png", "screen.png", PNG)) for i in (1, 2, 3)]
    policy = AttachmentPolicy(max_images=2)
    messages = format_messages_for_sdk(rows, blobs=BLOBS, policy=policy)
    assert [len(m.media) for m in messages] == [0, 1, 1]
    assert messages[0].content == f"photo 1\n{PNG_LINE}"


async def test_anthropic_gets_image_and_document_blocks(fake: FakeServer) -> None:
    fake.script(
        json_reply(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "A screenshot."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 30, "output_tokens": 4},
            }
        )
    )
    provider = AnthropicProvider(api_key="sk-ant-test", account="a", base_url=fake.base_url)
    try:
        response = await provider.complete(ask(context(), "claude-sonnet-4-6"))
    finally:
        await provider.aclose()
    assert response.text == "A screenshot."
    (body,) = fake.bodies()
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
                },
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
                },
                {"type": "text", "text": f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}"},
            ],
        }
    ]


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
    }


async def test_openai_gets_image_url_and_file_parts(fake: FakeServer) -> None:
    fake.script(json_reply(_completion("A screenshot.")))
    provider = OpenAIProvider(api_key="sk-test", account="a", base_url=f"{fake.base_url}/v1")
    try:
        await provider.complete(ask(context(), "gpt-4o-mini"))
    finally:
        await provider.aclose()
    (body,) = fake.bodies()
    assert body["messages"][1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            {
                "type": "file",
                "file": {
                    "filename": "invoice.pdf",
                    "file_data": f"data:application/pdf;base64,{B64_PDF}",
                },
            },
        ],
    }


async def test_a_server_speaking_openai_gets_the_image_and_a_line_for_the_pdf(
    fake: FakeServer,
) -> None:
    fake.script(json_reply(_completion("ok")))
    provider = OpenAIProvider(
        api_key="none", account="a", base_url=f"{fake.base_url}/v1", name="vllm"
    )
    try:
        await provider.complete(ask(context(), "qwen2.5vl"))
    finally:
        await provider.aclose()
    (body,) = fake.bodies()
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}\n{PDF_LINE}"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
    ]


async def test_gemini_gets_inline_data(fake: FakeServer) -> None:
    fake.script(
        json_reply(
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": "A screenshot."}]},
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 4},
                "modelVersion": "gemini-2.5-flash",
            }
        )
    )
    provider = GeminiProvider(api_key="AIza-test", account="a", base_url=fake.base_url)
    try:
        await provider.complete(ask(context(), "gemini-2.5-flash"))
    finally:
        await provider.aclose()
    (body,) = fake.bodies()
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                # (google-genai writes the MIME type's key in snake case on the wire.)
                {"inlineData": {"mime_type": "image/png", "data": B64_PNG}},
                {"inlineData": {"mime_type": "application/pdf", "data": B64_PDF}},
                {"text": f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}"},
            ],
        }
    ]


async def test_ollama_gets_images_and_a_line_for_the_pdf(fake: FakeServer) -> None:
    fake.script(
        json_reply(
            {
                "model": "llava",
                "created_at": "2026-01-05T12:00:00.000000Z",
                "message": {"role": "assistant", "content": "A screenshot."},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 30,
                "eval_count": 4,
            }
        )
    )
    provider = OllamaProvider(base_url=fake.base_url)
    try:
        await provider.complete(ask(context(), "llava"))
    finally:
        await provider.aclose()
    (body,) = fake.bodies()
    assert body["messages"][1] == {
        "role": "user",
        "content": f"What is on this?\n{CSV_INLINE}\n{ZIP_LINE}\n{PDF_LINE}",
        "images": [B64_PNG],
    }
