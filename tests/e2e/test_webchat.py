"""The web chat in a real browser (headless Chromium through Playwright) against a real
``postroom serve``: type and see the answer, see a host notice rendered as one, see the typing
indicator, watch a message from another chat appear live in the operator view, see an answer's
Markdown, and watch a streamed answer grow before the stored one replaces it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from chromium import chromium, needs_chromium, open_chat, operator_chat
from playwright.sync_api import Browser, Page, expect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from e2e_harness import ServerProcess, Sink, ThreadServer, prepare_data_dir, wait_for
from fake_openai import FlakyChatCompletions

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = prepare_data_dir(tmp_path_factory.mktemp("webchat") / "data")
    env = {"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "1500", "POSTROOM_SCHEDULER__TICK": "1s"}
    # Debug level: every line the server can write is captured, for the secrets test.
    server = ServerProcess(data_dir=data, env=env, options=("--log-level", "debug")).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def _send(page: Page, text: str) -> None:
    page.locator("#composer").fill(text)
    page.locator("#send").click()


@pytest.mark.timeout(120)
def test_type_see_answer_typing_and_host_notice(server: ServerProcess, browser: Browser) -> None:
    page = open_chat(browser, server.url + "/")
    assert page.locator("#operator").count() == 0
    _send(page, "hello from the browser")
    # The echo runner takes 1.5 s: the typing indicator shows meanwhile.
    expect(page.locator("#typing")).to_be_visible(timeout=10_000)
    answer = page.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_have_count(1, timeout=15_000)
    expect(answer).to_contain_text("hello from the browser")
    expect(page.locator("#typing")).to_be_hidden(timeout=10_000)
    mine = page.locator('[data-testid="message"][data-type="user"]')
    expect(mine).to_contain_text("hello from the browser")
    chat = mine.first.get_attribute("data-chat")
    assert chat is not None and re.fullmatch(r"web:main/anon-[0-9a-f]+", chat)

    # A visitor sees what a platform chat shows (MESSAGES §5): no set-up hint for the operator,
    # no run details or traces, no folder names.
    assert page.locator('[data-testid="message"][data-id="setup-hint"]').count() == 0
    assert page.locator('[data-testid="message"][data-type="trace"]').count() == 0
    assert answer.locator(".folder").count() == 0
    assert "ANTHROPIC_API_KEY" not in page.locator("#messages").inner_text()

    # A steering command is answered with a host notice, rendered as one.
    _send(page, "#support")
    notice = page.locator('[data-testid="message"][data-type="host"]', has_text="topic → support")
    expect(notice).to_have_count(1, timeout=10_000)
    expect(notice).to_contain_text("topic → support")
    expect(notice).to_contain_text("🏠")

    # The history survives a reload (same visitor cookie, same chat).
    page.reload()
    expect(page.locator('[data-testid="message"][data-type="assistant"]')).to_have_count(
        1, timeout=10_000
    )
    assert page.locator('[data-testid="message"]').first.get_attribute("data-chat") == chat


@pytest.mark.timeout(120)
def test_an_answer_renders_its_markdown_and_never_runs_html(
    server: ServerProcess, browser: Browser
) -> None:
    page = open_chat(browser, server.url + "/chat/markdown")
    # The echo provider answers with the text it was sent: the answer is this Markdown.
    _send(
        page,
        "Steps:\n\n- first **step**\n- second\n\n1. one\n2. two\n\nthen\n\n3. three\n\n"
        "```python\nprint(1 < 2)\n```\n\n"
        "See [the docs](https://example.org/docs) or [local](/etc/passwd).\n\n"
        "<script>window.injected = 1</script> <img src=x onerror=window.injected=2>",
    )
    answer = page.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_have_count(1, timeout=15_000)
    body = answer.locator(".md")
    expect(body.locator("ul > li")).to_have_count(2)
    expect(body.locator("ul > li").first.locator("strong")).to_have_text("step")
    numbered = body.locator("ol")
    expect(numbered).to_have_count(2)
    assert numbered.first.get_attribute("start") is None
    expect(numbered.nth(1)).to_have_attribute("start", "3")
    expect(body.locator("pre code")).to_have_text("print(1 < 2)")
    expect(body.locator(".codeblock-lang")).to_have_text("python")
    link = body.locator("a", has_text="the docs")
    expect(link).to_have_attribute("href", "https://example.org/docs")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    # A link the page will not open reads as its label and address, as on Telegram.
    expect(body).to_contain_text("local (/etc/passwd)")
    assert body.locator('a[href*="passwd"]').count() == 0
    # Raw HTML in an answer is text: shown, never parsed, never run.
    expect(body).to_contain_text("<script>window.injected = 1</script>")
    expect(body).to_contain_text("<img src=x onerror=window.injected=2>")
    assert body.locator("script, img").count() == 0
    assert page.evaluate("window.injected") is None


@pytest.mark.timeout(120)
def test_operator_sees_other_chats_live(server: ServerProcess, browser: Browser) -> None:
    operator = operator_chat(browser, server.url, server.token)
    expect(operator.locator("#operator")).to_be_visible()
    # With the echo provider, the operator's page says how to configure a real model.
    hint = operator.locator('[data-testid="message"][data-type="host"][data-id="setup-hint"]')
    expect(hint).to_contain_text("ANTHROPIC_API_KEY")
    visitor = open_chat(browser, server.url + "/chat/support")
    # A message from another chat (through the HTTP API) appears live in the operator view...
    response = httpx.post(
        f"{server.url}/api/v1/messages",
        headers={"Authorization": f"Bearer {server.token}"},
        json={
            "chat_jid": "telegram:group/77",
            "sender": "telegram:user/5",
            "sender_name": "Alice",
            "content": "a message from telegram",
        },
        timeout=10,
    )
    assert response.status_code == 200, response.text
    from_telegram = operator.locator('[data-testid="message"][data-chat="telegram:group/77"]')
    expect(from_telegram.first).to_contain_text("a message from telegram", timeout=10_000)
    # ...and so does a visitor's chat on another channel, with the agent's answer.
    _send(visitor, "question from the support page")
    visitor_chat = operator.locator(
        '[data-testid="message"][data-type="assistant"]', has_text="question from the support page"
    )
    expect(visitor_chat.first).to_be_visible(timeout=15_000)
    chat = visitor_chat.first.get_attribute("data-chat")
    assert chat is not None and chat.startswith("web:support/anon-")
    # The operator sees the run behind the answer (its traces) and the folder; the visitor not.
    expect(
        operator.locator(f'[data-testid="message"][data-type="trace"][data-chat="{chat}"]').first
    ).to_be_attached(timeout=10_000)
    expect(visitor_chat.first.locator(".folder")).to_have_text("main")
    answer = visitor.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_have_count(1, timeout=10_000)
    assert answer.locator(".folder").count() == 0
    assert visitor.locator('[data-testid="message"][data-type="trace"]').count() == 0
    # The anonymous page sees only its own chat: once its own answer is shown, the telegram
    # message published before it would have been shown too.
    own_answer = visitor.locator(
        '[data-testid="message"][data-type="assistant"]', has_text="question from the support page"
    )
    expect(own_answer.first).to_be_visible(timeout=15_000)
    chats = {
        visitor.locator('[data-testid="message"]').nth(i).get_attribute("data-chat")
        for i in range(visitor.locator('[data-testid="message"]').count())
    }
    assert chats == {chat}


@pytest.mark.timeout(60)
def test_a_token_in_the_url_is_never_used_and_leaves_the_address_bar(
    server: ServerProcess, browser: Browser
) -> None:
    page = browser.new_context().new_page()
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.goto(f"{server.url}/?token={server.token}")
    expect(page.locator("#status")).to_have_attribute("data-state", "online", timeout=15_000)
    assert page.locator("#operator").count() == 0  # a visitor: the token opened nothing
    assert "token" not in page.url
    assert sockets and all("token" not in url for url in sockets)


@pytest.mark.timeout(60)
def test_a_socket_with_a_token_in_its_url_is_refused_and_says_where_to_sign_in(
    server: ServerProcess,
) -> None:
    url = server.url.replace("http://", "ws://") + f"/ws/chat/main?token={server.token}"
    with connect(url, proxy=None) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401 and "dashboard" in closed.value.rcvd.reason


@pytest.mark.timeout(120)
def test_a_scheduled_answer_reaches_the_page(server: ServerProcess, browser: Browser) -> None:
    page = open_chat(browser, server.url + "/chat/news")
    _send(page, "subscribe me")
    mine = page.locator('[data-testid="message"][data-type="user"]')
    expect(mine).to_have_count(1, timeout=10_000)
    chat = mine.first.get_attribute("data-chat")
    assert chat is not None
    response = httpx.post(
        f"{server.url}/api/v1/tasks",
        headers={"Authorization": f"Bearer {server.token}"},
        json={"folder": "main", "chat_jid": chat, "schedule": "every 1h", "prompt": "daily news"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    # A one-shot in the past is refused (PIPELINE §7)...
    response = httpx.post(
        f"{server.url}/api/v1/tasks",
        headers={"Authorization": f"Bearer {server.token}"},
        json={
            "folder": "main",
            "chat_jid": chat,
            "schedule": "2020-01-01T00:00:00Z",
            "prompt": "x",
        },
        timeout=10,
    )
    assert response.status_code == 400 and "in the past" in response.json()["error"]
    # ...one in two seconds runs at the tick after it ("every 1h" first runs in an hour).
    soon = (datetime.now(UTC) + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    response = httpx.post(
        f"{server.url}/api/v1/tasks",
        headers={"Authorization": f"Bearer {server.token}"},
        json={"folder": "main", "chat_jid": chat, "schedule": soon, "prompt": "the digest"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    scheduled = page.locator('[data-testid="message"][data-type="assistant"]', has_text="digest")
    expect(scheduled).to_have_count(1, timeout=20_000)
    # It is in the chat's history (MESSAGES §4): still there, once, after a reload.
    page.reload()
    expect(
        page.locator('[data-testid="message"][data-type="assistant"]', has_text="digest")
    ).to_have_count(1, timeout=10_000)


# -- a streamed answer ---------------------------------------------------------------------------

# Every change the page makes to an answer being written, and the moment the stored one appears.
RECORD_STREAM = """() => {
  window.streamed = [];
  const seen = () => {
    for (const el of document.querySelectorAll('[data-testid="streaming"]')) {
      const text = el.querySelector('.md').textContent;
      if (window.streamed[window.streamed.length - 1] !== text) window.streamed.push(text);
    }
    const stored = '[data-testid="message"][data-type="assistant"]';
    if (document.querySelector(stored) && !window.streamed.includes('<stored>')) {
      window.streamed.push('<stored>');
    }
  };
  new MutationObserver(seen).observe(document.body, { subtree: true, childList: true });
}"""


@pytest.fixture
def slow_model() -> Iterator[str]:
    """The address of an OpenAI-compatible API that never fails and streams a word every
    0.2 s."""
    fake = FlakyChatCompletions(
        seed=1, server_error_share=0, rate_limit_share=0, stream_every_s=0.2
    )
    served = ThreadServer(fake.app, "slow-model").start()
    yield served.url
    served.stop()


@pytest.mark.timeout(120)
def test_a_streamed_answer_grows_on_the_page_and_only_the_final_text_is_kept(
    start_server: Callable[..., ServerProcess],
    sink: Sink,
    slow_model: str,
    browser: Browser,
) -> None:
    server = start_server(
        {
            "POSTROOM_DEFAULTS__PROVIDER": "openai",
            "POSTROOM_DEFAULTS__MODEL": "gpt-stream-test",
            "POSTROOM_PROVIDERS__OPENAI__BASE_URL": f"{slow_model}/v1",
            "POSTROOM_PROVIDERS__OPENAI__API_KEYS": json.dumps(["sk-stream-test-key-1234"]),
            "POSTROOM_PROVIDERS__OPENAI__STREAM": "true",
            **sink.env(),
        }
    )
    api = server.client()
    page = open_chat(browser, server.url + "/")
    page.evaluate(RECORD_STREAM)
    # The model repeats what it is sent, a word every 0.2 s: a tag included, as models write them.
    story = (
        "Once upon a time **a router** kept every promise [STATE:mood] content\n"
        "and lived happily ever after, one word at a time."
    )
    final = (
        "Once upon a time **a router** kept every promise\n"
        "and lived happily ever after, one word at a time."
    )
    _send(page, story)
    answer = page.locator('[data-testid="message"][data-type="assistant"]')
    expect(answer).to_have_count(1, timeout=30_000)
    expect(answer.locator(".md strong")).to_have_text("a router")
    expect(answer).to_contain_text("lived happily ever after, one word at a time.")
    expect(page.locator('[data-testid="streaming"]')).to_have_count(0)

    streamed: list[str] = page.evaluate("window.streamed")
    stored_at = streamed.index("<stored>")
    partial = [text for text in streamed[:stored_at] if text]
    # The answer grew in several steps before the stored one replaced it...
    assert len(partial) >= 3, streamed
    assert partial[0].startswith("Once") and "happily" not in partial[0]
    # ...and the tag never showed, not even while it was being written.
    assert not [text for text in streamed if "STATE" in text or "mood" in text], streamed

    # The stored row is the final text, after tag processing.
    chat = page.locator('[data-testid="message"][data-type="user"]').first.get_attribute(
        "data-chat"
    )
    assert chat is not None
    (stored,) = api.of_type(chat, "assistant")
    assert stored["content"] == final

    # A platform chat gets the final answer only, once: partial text is never delivered.
    platform = "api:stream/1"
    api.post(platform, "api:user/7", "Tell the platform a short tale, word by word, slowly.")
    (delivered,) = wait_for(lambda: sink.for_chat(platform), timeout=30, what="the answer")
    (answered,) = api.wait_answers(platform, 1)
    assert delivered.body["content"] == answered["content"]
    assert delivered.body["content"] == "Tell the platform a short tale, word by word, slowly."
    assert len(sink.for_chat(platform)) == 1
    # The anonymous page never saw another chat's answer being written.
    assert not [t for t in page.evaluate("window.streamed") if "platform" in t]


@pytest.mark.timeout(120)
def test_the_token_never_reaches_the_log(server: ServerProcess, browser: Browser) -> None:
    """A session with the token in every place it is used: a dashboard sign-in, the operator's
    chat and a message sent from it, an old ?token= link and a socket with a token in its URL
    (both refused), tabs closed (WebSocket disconnects), API calls with the header. The
    captured log (debug level, the whole module's session) never holds the token, and a
    disconnect is one quiet line."""
    disconnects = sum("web.disconnected" in line for line in server.lines)
    operator = operator_chat(browser, server.url, server.token)
    expect(operator.locator("#operator")).to_be_visible()
    _send(operator, "a message from the operator")
    expect(operator.locator('[data-testid="message"][data-type="assistant"]').first).to_be_visible(
        timeout=15_000
    )
    operator.context.close()
    old_link = open_chat(browser, f"{server.url}/?token={server.token}")
    old_link.context.close()
    url = server.url.replace("http://", "ws://") + f"/ws/chat/main?token={server.token}"
    with connect(url, proxy=None) as socket, pytest.raises(ConnectionClosed):
        socket.recv(timeout=5)
    auth = {"Authorization": f"Bearer {server.token}"}
    assert httpx.get(f"{server.url}/api/v1/messages", headers=auth, timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/metrics", headers=auth, timeout=10).status_code == 200
    wait_for(
        lambda: sum("web.disconnected" in line for line in server.lines) >= disconnects + 2,
        what="the closed tabs' disconnects in the log",
        details=lambda: server.stderr(40),
    )
    captured = "\n".join(server.lines)
    assert server.token not in captured
    assert "Traceback" not in captured and "WebSocketDisconnect" not in captured
