"""Voice notes transcribed before the turn runs (PIPELINE §1.4): the real HTTP transcriber
against a local OpenAI-compatible ``/audio/transcriptions`` server, over a real store."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from postroom.core.messages import Attachment
from postroom.engine import FolderSpec, Services
from postroom.engine.enrich import VOICE_PLACEHOLDER, Enricher
from postroom.llm.transcriber import HttpTranscriber

from fake_whisper import FakeWhisper, serving
from fakeclock import FakeClock
from support import inbound, open_services

CHAT = "telegram:user/42"
AUDIO = b"OggS\x00fake-opus-bytes"


@pytest.fixture
async def services(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Services]:
    engine = await open_services(tmp_path, clock)
    await engine.folders.add_folder("main", FolderSpec(), actor="test")
    await engine.routes.add_route(seq=9999, match="", target="main", actor="test")
    yield engine
    await engine.close()


async def voice_turn(services: Services, *, attach: bool = True) -> tuple[str, int]:
    """Ingest a voice note as an adapter does; return its id and the turn's job id."""
    message = dataclasses.replace(
        inbound(CHAT, VOICE_PLACEHOLDER, id="voice-1"),
        attachments=(
            Attachment(kind="voice", mime="audio/ogg", data=base64.b64encode(AUDIO).decode()),
        )
        if attach
        else (),
    )
    result = await services.ingest.ingest(message)
    assert result.decision.job_id is not None
    return message.id, result.decision.job_id


async def content_of(services: Services, message_id: str) -> str:
    async with services.store.read() as tx:
        message = await tx.get_message(message_id, CHAT)
    assert message is not None
    return message.content


async def test_a_voice_note_becomes_its_transcript_before_the_turn(services: Services) -> None:
    fake = FakeWhisper()
    async with serving(fake) as base_url, httpx.AsyncClient() as client:
        transcriber = HttpTranscriber(
            base_url=base_url, model="whisper-1", api_key="sk-voice-key", client=client
        )
        enricher = Enricher(store=services.store, transcribe=transcriber)
        message_id, job_id = await voice_turn(services)
        job = await services.turns.get_job(job_id)
        assert await enricher.enrich(job) == 1
        assert await enricher.enrich(job) == 0  # already transcribed: never sent twice
    assert await content_of(services, message_id) == "[Voice]: meet me at noon"
    (body,) = fake.bodies
    assert AUDIO in body and b'name="model"' in body and b"whisper-1" in body
    assert b'filename="voice.ogg"' in body
    assert fake.auth == ["Bearer sk-voice-key"]


@pytest.mark.parametrize("status", [500, 429])
async def test_a_failed_transcription_leaves_the_placeholder(
    services: Services, status: int
) -> None:
    fake = FakeWhisper(status=status)
    async with serving(fake) as base_url, httpx.AsyncClient() as client:
        transcriber = HttpTranscriber(
            base_url=base_url, model="whisper-1", api_key=None, client=client
        )
        enricher = Enricher(store=services.store, transcribe=transcriber)
        message_id, job_id = await voice_turn(services)
        assert await enricher.enrich(await services.turns.get_job(job_id)) == 0
    assert await content_of(services, message_id) == VOICE_PLACEHOLDER
    assert fake.auth == [""]  # no key configured: no Authorization header


async def test_an_unreachable_transcriber_or_none_configured_changes_nothing(
    services: Services,
) -> None:
    async with httpx.AsyncClient() as client:
        transcriber = HttpTranscriber(
            base_url="http://127.0.0.1:9/v1", model="whisper-1", api_key=None, client=client
        )
        message_id, job_id = await voice_turn(services)
        job = await services.turns.get_job(job_id)
        assert await Enricher(store=services.store, transcribe=transcriber).enrich(job) == 0
        assert await Enricher(store=services.store, transcribe=None).enrich(job) == 0
    assert await content_of(services, message_id) == VOICE_PLACEHOLDER


async def test_a_message_without_audio_is_left_alone(services: Services) -> None:
    fake = FakeWhisper()
    async with serving(fake) as base_url, httpx.AsyncClient() as client:
        transcriber = HttpTranscriber(base_url=base_url, model="w", api_key=None, client=client)
        message_id, job_id = await voice_turn(services, attach=False)
        enricher = Enricher(store=services.store, transcribe=transcriber)
        assert await enricher.enrich(await services.turns.get_job(job_id)) == 0
    assert fake.bodies == []
    assert await content_of(services, message_id) == VOICE_PLACEHOLDER
