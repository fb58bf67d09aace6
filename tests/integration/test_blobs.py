"""Attachments stored once, by their SHA-256 (MESSAGES §4): ingest keeps the bytes in ``blobs``
and only ``{kind, mime, name, size, sha256}`` in the row, and the migration moves the base64
data older releases kept inside message metadata there as well."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from postroom.core.errors import NotFound
from postroom.core.messages import Attachment, InboundMessage
from postroom.engine import Services
from postroom.engine.attachments import AttachmentLimits
from postroom.engine.enrich import Enricher
from postroom.engine.folders import FolderSpec
from postroom.store import SqliteStore
from postroom.store.sqlite.base import sha256 as text_sha256
from postroom.store.sqlite.migrate import available_migrations

from support import inbound, open_services

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PHOTO = b"\xff\xd8\xff\xe0 a jpeg photo"
VOICE = b"OggS a voice note"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def routed_services(tmp_path: Path, clock: Any) -> Services:
    services = await open_services(tmp_path, clock)
    await services.folders.add_folder("main", FolderSpec(), actor="test")
    await services.routes.add_route(9999, "", "main", actor="test")
    return services


def with_files(chat: str, text: str, msg_id: str, *files: Attachment) -> InboundMessage:
    return replace(inbound(chat, text, id=msg_id), attachments=files)


def blob_rows(path: Path) -> list[tuple[str, str, int, bytes]]:
    with sqlite3.connect(path) as db:
        return list(db.execute("SELECT sha256, mime, size, data FROM blobs ORDER BY sha256"))


async def test_ingest_stores_each_distinct_file_once(tmp_path: Path, clock: Any) -> None:
    services = await routed_services(tmp_path, clock)
    try:
        photo = Attachment("image", "image/jpeg", "a.jpg", 0, data=b64(PHOTO))
        for index, chat in enumerate(("telegram:1", "telegram:2", "telegram:1")):
            await services.ingest.ingest(with_files(chat, f"look {index}", f"m{index}", photo))
        found = await services.history.messages(chat_jid="telegram:1")
    finally:
        await services.store.close()
    assert found[0].metadata["attachments"] == [
        {
            "kind": "image",
            "mime": "image/jpeg",
            "name": "a.jpg",
            "size": len(PHOTO),
            "sha256": sha(PHOTO),
        }
    ]
    assert blob_rows(tmp_path / "postroom.db") == [(sha(PHOTO), "image/jpeg", len(PHOTO), PHOTO)]
    with sqlite3.connect(tmp_path / "postroom.db") as db:
        held = sorted(db.execute("SELECT chat_jid, message_id FROM message_blobs"))
        metadata = [row[0] for row in db.execute("SELECT metadata FROM messages")]
    assert held == [("telegram:1", "m0"), ("telegram:1", "m2"), ("telegram:2", "m1")]
    assert not any(b64(PHOTO) in text for text in metadata)


async def test_a_blob_is_found_for_its_chat_only(tmp_path: Path, clock: Any) -> None:
    services = await routed_services(tmp_path, clock)
    try:
        photo = Attachment("image", "image/jpeg", "a.jpg", data=b64(PHOTO))
        await services.ingest.ingest(with_files("web:main/anon-1", "look", "m1", photo))
        blob = await services.history.blob(sha(PHOTO), chat_jid="web:main/anon-1")
        assert (blob.mime, blob.data) == ("image/jpeg", PHOTO)
        assert (await services.history.blob(sha(PHOTO))).data == PHOTO  # a token: any chat
        with pytest.raises(NotFound) as refused:
            await services.history.blob(sha(PHOTO), chat_jid="web:main/anon-2")
        assert str(refused.value) == f"There is no attachment {sha(PHOTO)!r}."
    finally:
        await services.store.close()


async def test_a_file_left_for_later_is_fetched_before_the_turn_runs(
    tmp_path: Path, clock: Any
) -> None:
    """PIPELINE §1.4: an adapter acknowledges at once and leaves a slow download for later;
    the turn's enrichment fetches it (through the chat's adapter) and stores the blob."""
    services = await routed_services(tmp_path, clock)
    pdf = b"%PDF-1.7 late"
    asked: list[tuple[str, str, int]] = []

    async def fetch(chat_jid: str, url: str, cap_bytes: int) -> bytes | None:
        asked.append((chat_jid, url, cap_bytes))
        return pdf if url.endswith("/ok.pdf") else None

    try:
        late = Attachment(
            "file", "application/pdf", "ok.pdf", 13, url="https://f.example/ok.pdf", deferred=True
        )
        gone = Attachment(
            "file",
            "application/pdf",
            "gone.pdf",
            9,
            url="https://f.example/gone.pdf",
            deferred=True,
        )
        result = await services.ingest.ingest(
            with_files("slack:C1", "read these", "m1", late, gone)
        )
        (stored,) = await services.history.messages(chat_jid="slack:C1")
        assert [a.get("fetch_url") for a in stored.metadata["attachments"]] == [late.url, gone.url]
        async with services.store.read() as tx:
            job = await tx.get_job(int(result.decision.job_id or 0))
        assert job is not None
        enricher = Enricher(
            store=services.store,
            transcribe=None,
            fetch=fetch,
            limits=AttachmentLimits(file_bytes=1000),
        )
        await enricher.enrich(job)
        await enricher.enrich(job)  # done once: nothing is fetched again
        (stored,) = await services.history.messages(chat_jid="slack:C1")
        blob = await services.history.blob(sha(pdf), chat_jid="slack:C1")
    finally:
        await services.store.close()
    assert stored.metadata["attachments"] == [
        {
            "kind": "file",
            "mime": "application/pdf",
            "name": "ok.pdf",
            "size": len(pdf),
            "sha256": sha(pdf),
        },
        {"kind": "file", "mime": "application/pdf", "name": "gone.pdf", "size": 9},
    ]
    assert blob.data == pdf
    assert asked == [("slack:C1", late.url, 1000), ("slack:C1", gone.url, 1000)]


def database_before_blobs(path: Path) -> None:
    """A database at the schema before blobs, as the previous release left it."""
    blobs = next(m for m in available_migrations() if m.name == "blobs")
    with sqlite3.connect(path) as db:
        db.create_function("sha256", 1, text_sha256, deterministic=True)
        db.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TEXT NOT NULL)"
        )
        for migration in available_migrations():
            if migration.version >= blobs.version:
                break
            for statement in migration.statements():
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                (migration.version, migration.name, T.isoformat()),
            )


def old_row(db: sqlite3.Connection, seq: int, chat: str, metadata: dict[str, Any]) -> None:
    db.execute(
        "INSERT INTO messages (id, chat_jid, seq, sender, sender_name, content, timestamp, "
        "is_from_me, message_type, metadata) VALUES (?, ?, ?, ?, '', 'hi', ?, 0, 'user', ?)",
        (f"m{seq}", chat, seq, chat, T.isoformat(), json.dumps(metadata)),
    )


async def test_the_migration_moves_inline_data_into_blobs(tmp_path: Path) -> None:
    path = tmp_path / "postroom.db"
    database_before_blobs(path)
    photo = {
        "kind": "image",
        "mime": "image/jpeg",
        "name": "",
        "size": 99,
        "url": "",
        "data": b64(PHOTO),
    }
    voice = {
        "kind": "voice",
        "mime": "audio/ogg",
        "name": "v.ogg",
        "size": 17,
        "url": "",
        "data": b64(VOICE),
    }
    too_big = {
        "kind": "file",
        "mime": "application/pdf",
        "name": "big.pdf",
        "size": 9e9,
        "url": "https://x/big.pdf",
        "data": "",
    }
    broken = {
        "kind": "image",
        "mime": "image/png",
        "name": "b.png",
        "size": 3,
        "url": "",
        "data": "not base64!",
    }
    with sqlite3.connect(path) as db:
        old_row(db, 1, "telegram:1", {"attachments": [photo, voice], "is_dm": True})
        old_row(db, 2, "telegram:2", {"attachments": [photo]})
        old_row(db, 3, "telegram:3", {"attachments": [too_big, broken]})
        old_row(db, 4, "telegram:4", {"mentioned": True})
    async with await SqliteStore.open(path) as store, store.read() as tx:
        rows = {m.id: m for m in await tx.recent_inbound(limit=10)}
        blobs = await tx.get_blobs([sha(PHOTO), sha(VOICE)])
        assert await tx.chat_holds_blob("telegram:2", sha(PHOTO))
        assert not await tx.chat_holds_blob("telegram:3", sha(PHOTO))
    assert rows["m1"].metadata == {
        "attachments": [
            {
                "kind": "image",
                "mime": "image/jpeg",
                "name": "",
                "size": len(PHOTO),
                "sha256": sha(PHOTO),
            },
            {
                "kind": "voice",
                "mime": "audio/ogg",
                "name": "v.ogg",
                "size": len(VOICE),
                "sha256": sha(VOICE),
            },
        ],
        "is_dm": True,
    }
    assert rows["m2"].metadata["attachments"] == rows["m1"].metadata["attachments"][:1]
    # What had no bytes (or bytes that were not base64) keeps its reference without a hash.
    assert rows["m3"].metadata["attachments"] == [
        {"kind": "file", "mime": "application/pdf", "name": "big.pdf", "size": 9e9},
        {"kind": "image", "mime": "image/png", "name": "b.png", "size": 3},
    ]
    assert rows["m4"].metadata == {"mentioned": True}
    assert {k: (b.mime, b.data) for k, b in blobs.items()} == {
        sha(PHOTO): ("image/jpeg", PHOTO),
        sha(VOICE): ("audio/ogg", VOICE),
    }
    assert len(blob_rows(path)) == 2
