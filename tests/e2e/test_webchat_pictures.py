"""Pictures and files in the web chat, in a real browser (headless Chromium through Playwright)
against a real ``postroom serve``: a visitor adds a picture with the button, by pasting and by
dropping it, sees a preview, sends it, sees it in the conversation (read back through
``GET /api/v1/blobs/…``) and an answer that knows it is there; the operator view (signed in on
the dashboard, no token in the page) shows the picture too; another visitor cannot read it."""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterator

import pytest
from chromium import chromium, needs_chromium, open_chat, operator_chat
from playwright.sync_api import Browser, Page, Request, expect

from e2e_harness import ServerProcess, prepare_data_dir

pytestmark = needs_chromium


def png(width: int, height: int) -> bytes:
    """A real (decodable) PNG of one colour, so the browser reports its size once loaded."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    rows = b"".join(b"\x00" + b"\x20\x80\xe0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


DOT = png(24, 16)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        data_dir=prepare_data_dir(tmp_path_factory.mktemp("pictures") / "data"), env={}
    ).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def _loaded(page: Page, selector: str) -> None:
    """Every picture matched by *selector* was read back and decoded by the browser."""
    page.wait_for_function(
        """(sel) => { const all = [...document.querySelectorAll(sel)];
           return all.length > 0 && all.every((i) => i.complete && i.naturalWidth > 0); }""",
        arg=selector,
        timeout=15_000,
    )


# A file made in the page, handed over as the platform's clipboard or drag and drop would.
_MAKE_FILE = """([bytes, name, type]) => {
  const file = new File([new Uint8Array(bytes)], name, { type });
  const transfer = new DataTransfer();
  transfer.items.add(file);
  return transfer;
}"""


# A paste as the browser fires it when a picture is on the clipboard.
_PASTE = """([bytes, name, type]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([new Uint8Array(bytes)], name, { type }));
  const event = new ClipboardEvent(
    'paste', { clipboardData: transfer, bubbles: true, cancelable: true });
  document.querySelector('#composer').dispatchEvent(event);
}"""


@pytest.mark.timeout(120)
def test_a_picture_is_previewed_sent_shown_and_seen_by_the_model(
    server: ServerProcess, browser: Browser
) -> None:
    page = open_chat(browser, server.url + "/")
    page.set_input_files(
        '[data-testid="file-input"]',
        files=[{"name": "dot.png", "mimeType": "image/png", "buffer": DOT}],
    )
    preview = page.locator('[data-testid="attach-preview"]')
    expect(preview).to_have_count(1)
    expect(preview).to_contain_text("dot.png")
    _loaded(page, '[data-testid="attach-preview"] img')
    expect(page.locator("#send")).to_be_enabled()  # a picture alone may be sent

    page.locator("#composer").fill("what is this?")
    page.locator("#send").click()
    expect(preview).to_have_count(0)
    mine = page.locator('[data-testid="message"][data-type="user"]')
    expect(mine).to_have_count(1, timeout=15_000)
    expect(mine).to_contain_text("what is this?")
    _loaded(page, '[data-testid="message"][data-type="user"] [data-testid="attachment-image"] img')
    size = page.locator('[data-testid="attachment-image"] img').evaluate(
        "(img) => [img.naturalWidth, img.naturalHeight]"
    )
    assert size == [24, 16]
    # The echo model answers with what it was given: it knows a picture is there.
    answer = page.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_contain_text("what is this?", timeout=15_000)
    expect(answer).to_contain_text("dot.png")

    # The operator view shows the visitor's picture too, read with the dashboard session's
    # cookie: the page holds no token, and no request carries one.
    sha = hashlib.sha256(DOT).hexdigest()
    operator = operator_chat(browser, server.url, server.token)
    expect(operator.locator("#operator")).to_be_visible()
    _loaded(operator, '[data-testid="attachment-image"] img')
    requests: list[Request] = []
    operator.on("request", lambda request: requests.append(request))
    operator.reload()
    _loaded(operator, '[data-testid="attachment-image"] img')
    blobs = [r for r in requests if "/api/v1/blobs/" in r.url]
    assert blobs and all("authorization" not in r.headers for r in blobs)
    assert server.token not in operator.content()
    signed_in = operator.evaluate(
        "async (sha) => (await fetch(`/api/v1/blobs/${sha}?channel=elsewhere`)).status", sha
    )
    assert signed_in == 200  # the operator reads every chat's files

    # Another visitor cannot read it; the one who sent it can.
    stranger = open_chat(browser, server.url + "/")
    status = stranger.evaluate(
        "async (sha) => (await fetch(`/api/v1/blobs/${sha}?channel=main`)).status", sha
    )
    assert status == 404
    own = page.evaluate(
        "async (sha) => (await fetch(`/api/v1/blobs/${sha}?channel=main`)).status", sha
    )
    assert own == 200


@pytest.mark.timeout(120)
def test_pasting_and_dropping_add_files_and_each_can_be_removed(
    server: ServerProcess, browser: Browser
) -> None:
    page = open_chat(browser, server.url + "/chat/paste")
    composer = page.locator("#composer")
    composer.focus()
    page.evaluate(_PASTE, [list(DOT), "pasted.png", "image/png"])
    dropped = page.evaluate_handle(
        _MAKE_FILE, [list(b"day,amount\nmon,3\n"), "days.csv", "text/csv"]
    )
    page.locator("#app").dispatch_event("drop", {"dataTransfer": dropped})
    previews = page.locator('[data-testid="attach-preview"]')
    expect(previews).to_have_count(2)
    expect(previews.nth(0)).to_contain_text("pasted.png")
    expect(previews.nth(1)).to_contain_text("days.csv")
    previews.nth(0).get_by_role("button").click()
    expect(previews).to_have_count(1)

    page.locator("#send").click()
    mine = page.locator('[data-testid="message"][data-type="user"]')
    expect(mine.locator('[data-testid="attachment-file"]')).to_contain_text(
        "days.csv", timeout=15_000
    )
    # A text file is inlined for the model: the echo answer holds its lines.
    answer = page.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_contain_text("mon,3", timeout=15_000)
