"""Debian's Chromium through Playwright for the browser tests (TESTING.md: no browser download),
and the two ways a test opens the web chat: as a visitor, and as the operator signed in on the
dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"Chromium is not installed at {CHROMIUM}"
)


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_chat(browser: Browser, url: str) -> Page:
    """The web chat at *url* in a new context (a new visitor), once its socket is online."""
    page = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
    page.goto(url)
    expect(page.locator("#status")).to_have_attribute("data-state", "online", timeout=15_000)
    return page


def operator_chat(browser: Browser, url: str, token: str) -> Page:
    """The operator's chat: signed in on the dashboard, then the chat page in the same session."""
    page = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
    page.goto(url + "/dashboard")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(url + "/")
    expect(page.locator("#status")).to_have_attribute("data-state", "online", timeout=15_000)
    return page
