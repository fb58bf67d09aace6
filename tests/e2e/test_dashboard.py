"""The operator dashboard in a real browser (headless Chromium through Playwright) against a real
``postroom serve``: sign in, add a route through the form and see a message routed by it, a
malformed match refused with nothing changed, Preview listing the messages whose decision would
change, a message appearing live in the conversation view, its journey, a failed job retried with
its button, a persona edited on the folder page reaching the next run's system prompt, a priced
run in the usage chart and a folder's spend against its budget, a stranger's pairing code
appearing live on the access page and approved (the sender's next message runs a turn) or
denied, a malformed sender glob refused, a failing webhook shown red and its delivery retried —
and no request URL ever carrying the token.

The model is a fake OpenAI API in this process whose answers can be switched to fail; the
``telegram`` platform is answered through an outbound webhook that records what it gets, ``sms``
through one nobody listens to. The tests share that server and its signed-in browser, and the
later ones build on what the earlier made (the folder ``atlas`` and its route, priced runs).
With ``POSTROOM_TEST_SCREENSHOTS=DIR`` the last test also saves a screenshot of every page
under DIR (``docs/dashboard`` holds the committed ones).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from e2e_harness import ServerProcess, Sink, ThreadServer, prepare_data_dir, wait_for
from fake_openai import FlakyChatCompletions

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"Chromium is not installed at {CHROMIUM}"
)
MODEL = "e2emodel"
#: Dear on purpose: one short run costs a visible amount.
PRICE_PER_MTOK = 5000.0


class Switch:
    """The fake model's answers: 200, or 500 while ``failing``."""

    def __init__(self) -> None:
        self.failing = False

    def statuses(self) -> Iterator[int]:
        while True:
            yield 500 if self.failing else 200


@dataclass
class Rig:
    server: ServerProcess
    model: FlakyChatCompletions
    switch: Switch
    sink: Sink
    context: BrowserContext
    requested: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            self.url + path,
            headers={"Authorization": f"Bearer {self.server.token}"},
            timeout=10,
            **kwargs,
        )

    def post(self, chat: str, text: str) -> dict[str, Any]:
        answer = self.api(
            "POST", "/api/v1/messages", json={"chat_jid": chat, "sender": chat, "content": text}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def page(self, path: str = "") -> Page:
        """A new page at *path*; the pages opened before are closed (each holds a live feed,
        and a browser opens at most six connections to one server)."""
        for old in self.context.pages:
            old.close()
        page = self.context.new_page()
        if path:
            page.goto(self.url + path)
        return page


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/gone"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    switch = Switch()
    model = FlakyChatCompletions(seed=1, statuses=switch.statuses())
    model_server = ThreadServer(model.app, "fake-openai").start()
    sink = Sink()
    sink.start()
    data = prepare_data_dir(tmp_path_factory.mktemp("dashboard") / "data")
    env = {
        "POSTROOM_DEFAULTS__PROVIDER": "openai",
        "POSTROOM_DEFAULTS__MODEL": MODEL,
        "POSTROOM_PROVIDERS__OPENAI__BASE_URL": f"{model_server.url}/v1",
        "POSTROOM_PROVIDERS__OPENAI__API_KEYS": '["sk-dashboard-test"]',
        f"POSTROOM_MODELS__{MODEL.upper()}__CONTEXT_WINDOW": "128000",
        f"POSTROOM_MODELS__{MODEL.upper()}__INPUT_PER_MTOK": str(PRICE_PER_MTOK),
        f"POSTROOM_MODELS__{MODEL.upper()}__OUTPUT_PER_MTOK": str(PRICE_PER_MTOK),
        "POSTROOM_QUEUE__MAX_ATTEMPTS": "1",
        "POSTROOM_CHANNELS__HTTP__SMS__OUTBOUND_URL": _dead_url(),
        **sink.env("telegram"),
    }
    server = ServerProcess(data_dir=data, env=env).start()
    try:
        with sync_playwright() as playwright:
            browser: Browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            )
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            rig = Rig(server, model, switch, sink, context)
            context.on("request", lambda request: rig.requested.append(request.url))
            context.on("websocket", lambda socket: rig.requested.append(socket.url))
            _sign_in(rig.page("/dashboard/routes"), server.token)
            yield rig
            context.close()
            browser.close()
    finally:
        server.close()
        sink.stop()
        model_server.stop()


def _sign_in(page: Page, token: str) -> Page:
    """Sign in on the page the dashboard sent *page* to; back on the page it asked for."""
    expect(page).to_have_url(re.compile(r"/dashboard/login"))
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).not_to_have_url(re.compile(r"/dashboard/login"))
    return page


def _job_of(rig: Rig, posted: dict[str, Any]) -> dict[str, Any]:
    job_id = posted["decision"]["job_id"]
    assert job_id is not None, posted

    def settled() -> dict[str, Any] | None:
        jobs = rig.api("GET", "/api/v1/jobs", params={"limit": 1000}).json()["jobs"]
        job = next(j for j in jobs if j["id"] == job_id)
        return job if job["status"] in ("done", "failed") else None

    return wait_for(settled, what=f"job {job_id} to settle")  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ the journeys


def test_sign_in_with_a_wrong_token_says_so_and_the_right_one_opens_the_pages(rig: Rig) -> None:
    context = rig.context.browser.new_context()  # type: ignore[union-attr]
    context.on("request", lambda request: rig.requested.append(request.url))
    page = context.new_page()
    page.goto(rig.url + "/dashboard/routes")
    page.get_by_label("Token").fill("not-the-token-at-all")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text(re.compile("not the API token"))
    _sign_in(page, rig.server.token)
    expect(page.get_by_role("heading", name="Routes", exact=True)).to_be_visible()
    nav = page.get_by_role("navigation", name="Dashboard")
    for name in (
        "Overview",
        "Routes",
        "Folders",
        "Conversations",
        "Jobs",
        "Deliveries",
        "Drops",
        "Tasks",
        "Usage",
        "Access",
        "Nodes",
    ):
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    # Every control is reachable by keyboard: the first Tab lands on the skip link.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    session = next(c for c in context.cookies() if c["name"] == "postroom_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert rig.server.token not in session["value"]
    context.close()


def test_preview_lists_the_messages_a_new_route_would_change_and_save_routes_by_it(
    rig: Rig,
) -> None:
    page = rig.page("/dashboard/folders")
    page.get_by_label("Path").fill("atlas")
    page.get_by_label("Persona").fill("You are Atlas.")
    page.get_by_role("button", name="Create folder").click()
    expect(page.get_by_role("status")).to_have_text("Folder atlas created.")

    before = rig.post("telegram:7001", "where does this go")
    assert before["decision"]["folder"] == "main"
    page = rig.page("/dashboard/routes")
    page.get_by_label("Seq", exact=True).fill("5")
    page.get_by_label("Match", exact=True).fill("platform=telegram")
    page.get_by_label("Target", exact=True).fill("atlas")
    page.get_by_role("button", name="Preview").click()
    changed = page.get_by_test_id("preview-message").filter(has_text="where does this go")
    expect(changed).to_have_count(1)
    expect(changed).to_contain_text("atlas")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_have_text("Route added.")
    expect(page.get_by_test_id("route").filter(has_text="platform=telegram")).to_contain_text(
        "atlas"
    )
    after = rig.post("telegram:7002", "and now?")
    assert after["decision"]["folder"] == "atlas"
    history = rig.api("GET", "/api/v1/routes/history").json()["history"]
    assert history[0]["actor"] == "dashboard:owner" and history[0]["action"] == "add"


def test_a_malformed_match_shows_the_error_beside_the_form_and_changes_nothing(
    rig: Rig,
) -> None:
    routes_before = rig.api("GET", "/api/v1/routes").json()["routes"]
    page = rig.page("/dashboard/routes")
    page.get_by_label("Seq", exact=True).fill("1")
    page.get_by_label("Match", exact=True).fill("platform")
    page.get_by_label("Target", exact=True).fill("main")
    page.get_by_role("button", name="Add route").click()
    error = page.locator("#route-form").get_by_role("alert")
    expect(error).to_be_visible()
    text = error.inner_text()
    assert text.endswith(".") and text.count(". ") == 0 and "Traceback" not in text
    expect(page.get_by_label("Match", exact=True)).to_have_value("platform")
    assert page.get_by_role("button", name="Save").count() == 0
    assert rig.api("GET", "/api/v1/routes").json()["routes"] == routes_before


def test_explain_answers_a_hypothetical_message(rig: Rig) -> None:
    page = rig.page("/dashboard/routes")
    page.get_by_label("Chat", exact=True).fill("telegram:9")
    page.get_by_label("Sender", exact=True).fill("telegram:9")
    page.get_by_label("Text", exact=True).fill("hi")
    page.get_by_role("button", name="Explain").click()
    expect(page.get_by_test_id("decision")).to_contain_text("atlas")


def test_a_message_appears_live_and_its_journey_shows_decision_job_run_and_delivery(
    rig: Rig,
) -> None:
    page = rig.page("/dashboard/conversations?folder=atlas")
    expect(page.get_by_role("heading", name="Conversations")).to_be_visible()
    # The live feed is connected before the message is posted: the row arrives without a reload.
    wait_for(
        lambda: (
            page.evaluate("document.body['htmx-internal-data']?.sseEventSource?.readyState") == 1
        ),
        what="the live feed",
    )
    posted = rig.post("telegram:7003", "follow me **please**")
    row = page.get_by_test_id("message").filter(has_text="follow me")
    expect(row.first).to_be_visible(timeout=10_000)
    answer = page.locator('[data-testid="message"][data-type="assistant"]').filter(
        has_text="follow me"
    )
    expect(answer.first).to_be_visible(timeout=15_000)
    expect(answer.first.locator("strong", has_text="please")).to_be_visible()  # Markdown
    _job_of(rig, posted)
    wait_for(lambda: rig.sink.for_chat("telegram:7003"), what="the answer's delivery")

    row.first.get_by_role("link", name="Journey").click()
    expect(page.get_by_role("heading", name="Journey of a message")).to_be_visible()
    decision = page.get_by_test_id("journey-decision")
    expect(decision).to_contain_text("atlas")
    expect(decision).to_contain_text("platform=telegram")
    expect(page.get_by_test_id("journey-job")).to_contain_text("done")
    expect(page.get_by_test_id("journey-run")).to_contain_text(MODEL)
    expect(page.get_by_test_id("journey-delivery").first).to_contain_text("sent")


def test_a_job_failed_by_a_failing_provider_is_retried_with_its_button(rig: Rig) -> None:
    rig.switch.failing = True
    posted = rig.post("telegram:7004", "try me twice")
    job = _job_of(rig, posted)
    assert job["status"] == "failed", job
    rig.switch.failing = False
    page = rig.page("/dashboard/jobs?status=failed")
    row = page.locator(f'[data-testid="job"][data-id="{job["id"]}"]')
    expect(row).to_contain_text("failed")
    row.get_by_role("button", name="Retry").click()

    def done() -> bool:
        jobs = rig.api("GET", "/api/v1/jobs", params={"status": "done"}).json()["jobs"]
        return any(j["id"] == job["id"] for j in jobs)

    wait_for(done, what="the retried job to finish")
    page.goto(rig.url + "/dashboard/jobs?status=done")
    expect(page.locator(f'[data-testid="job"][data-id="{job["id"]}"]')).to_contain_text("done")


def test_a_persona_edited_on_the_folder_page_reaches_the_next_runs_system_prompt(
    rig: Rig,
) -> None:
    page = rig.page("/dashboard/folders")
    page.get_by_role("link", name="atlas", exact=True).click()
    page.get_by_label("Persona").fill("You are Atlas, and you answer in haiku.")
    page.get_by_label("Model").fill(MODEL)
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    calls = len(rig.model.calls)
    _job_of(rig, rig.post("telegram:7005", "a poem please"))
    system = [m for m in rig.model.calls[calls].messages if m.get("role") == "system"]
    assert "you answer in haiku" in str(system[0]["content"])
    folder = rig.api("GET", "/api/v1/folders/atlas").json()
    assert folder["persona"] == "You are Atlas, and you answer in haiku."


def test_a_bad_setting_is_refused_beside_the_folder_form(rig: Rig) -> None:
    page = rig.page("/dashboard/folders/atlas")
    page.get_by_label("Engagement TTL").fill("forever")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("engagement_ttl")
    assert rig.api("GET", "/api/v1/folders/atlas").json()["engagement_ttl"] is None


def test_the_usage_chart_shows_a_priced_run(rig: Rig) -> None:
    page = rig.page("/dashboard/usage")
    chart = page.get_by_role("img", name=re.compile("Cost per model"))
    expect(chart).to_be_visible()
    bar = chart.locator(".bar", has_text=MODEL)
    expect(bar).to_have_count(1)
    cost = bar.locator(".chart-value").text_content() or ""
    assert re.match(r"\$\d", cost) and not cost.startswith("$0.0000"), cost
    expect(page.get_by_test_id("usage-row").filter(has_text=MODEL).first).to_contain_text("$")


def _dm(rig: Rig, sender: str, text: str) -> dict[str, Any]:
    """A direct message from *sender* in its own chat (telegram is under ``dm_policy =
    pairing``, the default)."""
    answer = rig.api(
        "POST",
        "/api/v1/messages",
        json={"chat_jid": sender, "sender": sender, "content": text, "is_dm": True},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _pending(rig: Rig) -> list[dict[str, Any]]:
    return rig.api("GET", "/api/v1/access/pending").json()["pending"]  # type: ignore[no-any-return]


def _principals(rig: Rig) -> list[dict[str, Any]]:
    return rig.api("GET", "/api/v1/access").json()["principals"]  # type: ignore[no-any-return]


def test_a_strangers_code_appears_live_and_approve_lets_the_next_message_fire_a_turn(
    rig: Rig,
) -> None:
    page = rig.page("/dashboard/access")
    expect(page.get_by_role("heading", name="Access", exact=True)).to_be_visible()
    wait_for(
        lambda: (
            page.evaluate("document.body['htmx-internal-data']?.sseEventSource?.readyState") == 1
        ),
        what="the live feed",
    )
    stranger = "telegram:8001"
    refused = _dm(rig, stranger, "hello? who is there")
    assert refused["decision"]["job_id"] is None, refused
    (request,) = [r for r in _pending(rig) if r["sender"] == stranger]
    # The request shows up without a reload (the page follows the live feed).
    row = page.locator(f'[data-testid="pairing"][data-code="{request["code"]}"]')
    expect(row).to_contain_text(stranger, timeout=10_000)
    row.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    expect(page.locator('[data-testid="pairing"]').filter(has_text=stranger)).to_have_count(0)
    member = page.get_by_test_id("principal").filter(has_text=stranger)
    expect(member).to_contain_text("member")
    expect(member).to_contain_text("dashboard:owner")
    (principal,) = [p for p in _principals(rig) if p["pattern"] == stranger]
    assert principal["role"] == "member" and principal["created_by"] == "dashboard:owner"
    assert not [r for r in _pending(rig) if r["sender"] == stranger]
    job = _job_of(rig, _dm(rig, stranger, "and now, a question"))
    assert job["status"] == "done", job


def test_deny_removes_a_pairing_request(rig: Rig) -> None:
    stranger = "telegram:8002"
    _dm(rig, stranger, "let me in")
    (request,) = [r for r in _pending(rig) if r["sender"] == stranger]
    page = rig.page("/dashboard/access")
    row = page.locator(f'[data-testid="pairing"][data-code="{request["code"]}"]')
    row.get_by_role("button", name="Deny", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("denied")
    expect(page.locator('[data-testid="pairing"]').filter(has_text=stranger)).to_have_count(0)
    assert not [r for r in _pending(rig) if r["sender"] == stranger]
    assert not [p for p in _principals(rig) if p["pattern"] == stranger]


def test_a_malformed_glob_shows_the_error_beside_the_principal_form_and_changes_nothing(
    rig: Rig,
) -> None:
    before = _principals(rig)
    page = rig.page("/dashboard/access")
    page.get_by_label("Sender pattern").fill("telegram:[abc")
    page.get_by_label("Role").select_option("blocked")
    page.get_by_role("button", name="Add principal").click()
    error = page.locator("#principal-form").get_by_role("alert")
    expect(error).to_contain_text("telegram:[abc")
    text = error.inner_text()
    assert text.endswith(".") and text.count(". ") == 0 and "Traceback" not in text
    expect(page.get_by_label("Sender pattern")).to_have_value("telegram:[abc")
    assert _principals(rig) == before


def test_a_principal_added_and_removed_on_the_access_page(rig: Rig) -> None:
    page = rig.page("/dashboard/access")
    page.get_by_label("Sender pattern").fill("sms:*")
    page.get_by_label("Role").select_option("blocked")
    page.get_by_label("Note").fill("no texts")
    page.get_by_role("button", name="Add principal").click()
    row = page.get_by_test_id("principal").filter(has_text="sms:*")
    expect(row).to_contain_text("blocked")
    expect(row).to_contain_text("no texts")
    assert any(p["pattern"] == "sms:*" and p["role"] == "blocked" for p in _principals(rig))
    row.get_by_role("button", name="Remove", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("removed")
    expect(page.get_by_test_id("principal").filter(has_text="sms:*")).to_have_count(0)
    assert not any(p["pattern"] == "sms:*" for p in _principals(rig))


def test_the_usage_page_shows_spend_against_a_folders_budget(rig: Rig) -> None:
    answer = rig.api("PATCH", "/api/v1/folders/atlas", json={"budget_per_day": 5000})
    assert answer.status_code == 200, answer.text
    (budget,) = rig.api("GET", "/api/v1/budgets").json()["budgets"]
    assert budget["spent_today"] > 0, budget
    page = rig.page("/dashboard/usage")
    row = page.locator('[data-testid="budget"][data-folder="atlas"]')
    expect(row).to_contain_text("$5,000.00")
    expect(row).to_contain_text(re.compile(r"\$\d"))
    used = min(round(budget["spent_today"] / 5000 * 100), 100)
    expect(row.get_by_role("meter")).to_have_attribute("aria-valuenow", str(used))


def test_a_failing_webhook_is_red_on_the_overview_and_its_delivery_is_retried(rig: Rig) -> None:
    routes = rig.api("GET", "/api/v1/routes").json()["routes"]
    assert any(r["match"] == "" for r in routes)  # sms chats reach main by the catch-all
    rig.post("sms:555", "text me back")

    def failing() -> list[dict[str, Any]]:
        return rig.api("GET", "/api/v1/deliveries", params={"status": "failed"}).json()[
            "deliveries"
        ]

    (delivery,) = wait_for(failing, what="a refused delivery", timeout=30)
    page = rig.page("/dashboard")
    health = page.get_by_test_id("health").filter(has_text="sms webhook")
    expect(health).to_have_attribute("data-state", "failing")
    expect(health).to_contain_text("unreachable")
    page = rig.page("/dashboard/deliveries?status=failed")
    row = page.locator(f'[data-testid="delivery"][data-id="{delivery["id"]}"]')
    row.get_by_role("button", name="Retry").click()
    expect(page).to_have_url(re.compile(r"/dashboard/deliveries"))
    assert page.get_by_role("alert").count() == 0


def test_the_nodes_page_shows_this_server_as_the_only_node_on_sqlite_and_refreshes(
    rig: Rig,
) -> None:
    page = rig.page("/dashboard/nodes")
    (listed,) = rig.api("GET", "/api/v1/nodes").json()["nodes"]
    row = page.get_by_test_id("node")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-id", listed["id"])
    expect(row).to_contain_text("this node")
    expect(row).to_contain_text("alive")
    expect(row).to_contain_text(f"127.0.0.1:{rig.server.port}")
    expect(row).to_contain_text(f"pid {listed['pid']}")
    expect(page.get_by_test_id("single-node")).to_contain_text("SQLite")
    # The table reloads itself (a heartbeat is due every 5 s): its "as of" time moves on.
    as_of = page.get_by_text(re.compile(r"^As of "))
    before = as_of.text_content() or ""
    expect(as_of).not_to_have_text(before, timeout=15_000)


def test_pages_work_at_375_px_in_the_dark(rig: Rig) -> None:
    page = rig.page()
    page.set_viewport_size({"width": 375, "height": 800})
    page.emulate_media(color_scheme="dark")
    for _, path in PAGES:
        page.goto(rig.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, (path, width)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(17, 19, 24)", background


def test_sign_out_ends_the_session(rig: Rig) -> None:
    context = rig.context.browser.new_context()  # type: ignore[union-attr]
    context.on("request", lambda request: rig.requested.append(request.url))
    page = context.new_page()
    page.goto(rig.url + "/dashboard")
    page.get_by_label("Token").fill(rig.server.token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    page.goto(rig.url + "/dashboard/jobs")
    expect(page).to_have_url(re.compile(r"/dashboard/login"))
    context.close()


def test_a_write_without_the_csrf_token_is_refused(rig: Rig) -> None:
    cookie = next(c for c in rig.context.cookies() if c["name"] == "postroom_session")
    answer = httpx.post(
        rig.url + "/dashboard/folders",
        data={"path": "forged"},
        cookies={"postroom_session": cookie["value"]},
        timeout=10,
    )
    assert answer.status_code == 403 and "CSRF" in answer.text
    assert rig.api("GET", "/api/v1/folders/forged").status_code == 404


def test_no_request_url_ever_carried_the_token(rig: Rig) -> None:
    assert len(rig.requested) > 20
    leaked = [url for url in rig.requested if rig.server.token in url]
    assert not leaked, leaked
    assert not [line for line in rig.server.lines if rig.server.token in line]


# ------------------------------------------------------------------------------ screenshots

PAGES = (
    ("overview", "/dashboard"),
    ("routes", "/dashboard/routes"),
    ("folders", "/dashboard/folders"),
    ("folder", "/dashboard/folders/atlas"),
    ("conversations", "/dashboard/conversations"),
    ("jobs", "/dashboard/jobs"),
    ("deliveries", "/dashboard/deliveries?status=all"),
    ("drops", "/dashboard/drops"),
    ("tasks", "/dashboard/tasks"),
    ("usage", "/dashboard/usage"),
    ("access", "/dashboard/access"),
    ("nodes", "/dashboard/nodes"),
)


@pytest.mark.skipif(
    not os.environ.get("POSTROOM_TEST_SCREENSHOTS"),
    reason="screenshots are made on request: POSTROOM_TEST_SCREENSHOTS=docs/dashboard",
)
def test_screenshots_of_every_page(rig: Rig) -> None:
    out = Path(os.environ["POSTROOM_TEST_SCREENSHOTS"])
    out.mkdir(parents=True, exist_ok=True)
    routes = rig.api("GET", "/api/v1/routes").json()["routes"]
    catch_all = next(r for r in routes if r["match"] == "")
    rig.api("DELETE", f"/api/v1/routes/{catch_all['id']}")
    rig.post("whatsapp:31600000000", "hello, is anyone there?")  # no route now: a drop
    rig.api("POST", "/api/v1/routes", json={"seq": 9999, "match": "", "target": "main"})
    for path in ("atlas/content", "atlas/social", "support"):
        rig.api("POST", "/api/v1/folders", json={"path": path})
    rig.api(
        "POST",
        "/api/v1/tasks",
        json={
            "folder": "atlas",
            "chat_jid": "telegram:7001",
            "schedule": "0 9 * * 1-5",
            "prompt": "Summarize yesterday's messages",
            "tz": "Europe/Berlin",
        },
    )
    _dm(rig, "telegram:8101", "hi, can I talk to the bot?")
    _dm(rig, "whatsapp:31611111111", "hello")
    rig.api("POST", "/api/v1/access", json={"pattern": "telegram:8*", "role": "member"})
    blocked = {"pattern": "sms:555", "role": "blocked", "note": "spam"}
    rig.api("POST", "/api/v1/access", json=blocked)
    for folder, budget in (("atlas", 1.0), ("main", 0.25)):  # one in hand, one used up
        rig.api("PATCH", f"/api/v1/folders/{folder}", json={"budget_per_day": budget})
    page = rig.page()
    for name, path in PAGES:
        page.goto(rig.url + path)
        page.evaluate("window.scrollTo(0, 0)")  # the sticky bar on top, where it belongs
        page.screenshot(path=str(out / f"{name}.png"), full_page=True)
    page.goto(rig.url + "/dashboard/routes")
    page.get_by_label("Seq", exact=True).fill("1")
    page.get_by_label("Match", exact=True).fill("platform=sms")
    page.get_by_label("Target", exact=True).fill("atlas")
    page.get_by_role("button", name="Preview").click()
    page.screenshot(path=str(out / "routes-preview.png"), full_page=True)
    page.goto(
        rig.url + "/dashboard/journey?chat=telegram:7003&id=" + _first_id(rig, "telegram:7003")
    )
    page.screenshot(path=str(out / "journey.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    page.goto(rig.url + "/dashboard")
    page.screenshot(path=str(out / "overview-dark.png"), full_page=True)
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(rig.url + "/dashboard/routes")
    page.screenshot(path=str(out / "routes-375.png"), full_page=True)


def _first_id(rig: Rig, chat: str) -> str:
    messages = rig.api("GET", "/api/v1/messages", params={"chat_jid": chat}).json()["messages"]
    return str(messages[0]["id"])
