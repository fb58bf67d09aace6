"""No secret in a log line (INTERFACES §1): the redacting processor on every line, structlog's
and the standard library's (uvicorn) alike, exceptions included."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
import structlog

from postroom.logs import REDACTED, Redactor, configure_logging

TOKEN = "tok-9f2c1b7e5d3a4f60"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging(level="debug", stream=stream, secrets=[TOKEN, "short"])
    try:
        yield stream
    finally:
        structlog.configure(**config)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize(
    "text",
    [
        f"GET /ws/chat/main?token={TOKEN}&x=1",
        f"query_string: b'token={TOKEN}'",
        f"[(b'host', b'h'), (b'authorization', b'Bearer {TOKEN}')]",
        f"Authorization: Bearer {TOKEN}",
        f"{{'cookie': 'pr_visitor={TOKEN}'}}",
        f"X-Postroom-Signature: t=1,v1={TOKEN}",
        f"(b'sec-websocket-protocol', b'postroom, postroom.token.{TOKEN.encode().hex()}')",
        f"something mentions {TOKEN} plainly",
    ],
)
def test_secrets_are_taken_out_of_text(text: str) -> None:
    redactor = Redactor([TOKEN])
    out = redactor.redact(text)
    assert TOKEN not in out and TOKEN.encode().hex() not in out
    assert REDACTED in out


def test_ordinary_values_are_left_alone() -> None:
    redactor = Redactor([TOKEN, "short"])
    for text in ("chat_jid=telegram:group/5", "a short reply", "layer=route folder=main"):
        assert redactor.redact(text) == text


def test_every_line_is_redacted(captured: io.StringIO) -> None:
    log = structlog.get_logger("test")
    # As uvicorn configures its loggers when started without log_config=None.
    logging.getLogger("uvicorn").propagate = False
    logging.getLogger("uvicorn").addHandler(logging.StreamHandler(io.StringIO()))
    configure_logging(level="debug", stream=captured, secrets=[TOKEN, "short"])
    log.info("request", path=f"/ws/chat/main?token={TOKEN}", token=TOKEN, n=1)
    log.info("scope", scope={"query_string": f"token={TOKEN}".encode()})
    logging.getLogger("uvicorn.error").warning("headers %s", [(b"authorization", TOKEN.encode())])
    try:
        scope = {"query_string": f"token={TOKEN}"}  # a local variable a rich traceback shows
        raise RuntimeError(f"failed for {scope}")
    except RuntimeError:
        log.exception("boom")
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    out = captured.getvalue()
    assert TOKEN not in out, out
    assert out.count(REDACTED) >= 5
    assert "Traceback" in out  # the exception is still shown, plainly
