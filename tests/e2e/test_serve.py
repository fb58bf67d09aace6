"""``postroom serve`` as a real subprocess: ingest, turns, context, delivery, restart, CLI writes.

PIPELINE §1-§3, INTERFACES §1 and §4, ROUTING §3 and §7, MESSAGES §4. The server runs the echo
provider, whose answer is this turn's new input; chats ``api:…`` are delivered to the webhook sink.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e_harness import ServerProcess, Sink, message_text, postroom_cli

StartServer = Callable[..., ServerProcess]


def _decision(result: dict[str, Any]) -> dict[str, Any]:
    return dict(result["decision"])


def _by_seq(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda m: m["seq"])


def test_message_is_answered_stored_and_delivered_once(start_server: StartServer, sink: Sink):
    chat = "api:room/1"
    server = start_server(sink.env())
    api = server.client()

    result = api.post(chat, "api:user/alice", "hello there", id="in-1", sender_name="Alice")
    assert result["id"] == "in-1" and result["chat_jid"] == chat
    assert result["duplicate"] is False and isinstance(result["seq"], int)
    decision = _decision(result)
    assert decision["action"] == "fire" and decision["folder"] == "main", decision
    assert decision["job_id"] is not None, decision

    [answer] = api.wait_answers(chat, 1)
    api.wait_for(lambda: sink.for_chat(chat), what="the webhook delivery")
    api.wait_idle()

    rows = api.messages(chat)
    users = [m for m in rows if m["message_type"] == "user"]
    assistants = [m for m in rows if m["message_type"] == "assistant"]
    assert [u["id"] for u in users] == ["in-1"]
    [user] = users
    assert user["content"] == "hello there" and user["sender"] == "api:user/alice"
    assert user["seq"] == result["seq"] and user["routed_to"] == "main"
    assert user["observed"] in (False, 0)
    assert len(assistants) == 1, assistants
    assert answer["routed_to"] == "main" and answer["run_id"] is not None, answer
    assert answer["seq"] > user["seq"]
    assert "hello there" in answer["content"], answer
    assert isinstance(answer["metadata"], dict)

    run = api.run(answer["run_id"])
    assert run["folder"] == "main" and run["provider"] == "echo", run
    assert run["output"] == answer["content"], run
    assert any("hello there" in message_text(m) for m in run["messages"]), run["messages"]

    deliveries = sink.received
    assert len(deliveries) == 1, [d.body for d in deliveries]
    [delivery] = deliveries
    body = delivery.body
    assert set(body) == {
        "id",
        "chat_jid",
        "topic",
        "reply_to",
        "folder",
        "message_type",
        "content",
        "chunk",
        "chunks",
    }, body
    assert body["id"] == answer["id"] and body["chat_jid"] == chat
    assert body["folder"] == "main" and body["message_type"] == "assistant"
    assert body["topic"] in ("", None) and body["chunks"] == 1
    assert body["content"] == answer["content"]
    assert delivery.idempotency_key == f"{answer['id']}:{chat}:{body['chunk']}"
    assert delivery.signature_valid(), delivery.signature


def test_observed_message_joins_the_next_turn_context(start_server: StartServer, sink: Sink):
    """ROUTING §7's two-row pattern on a platform with a webhook; MESSAGES §4."""
    chat = "api:room/7"
    server = start_server(sink.env())
    api = server.client()
    catch_all = [r["id"] for r in api.routes() if r["match"] == "" and r["target"] == "main"]
    assert catch_all, api.routes()
    api.add_route(20, "platform=api verb=mention", "main")
    api.add_route(30, "platform=api", "main#observe")
    for route_id in catch_all:
        api.delete_route(route_id)

    lunch = api.post(chat, "api:user/bob", "lunch?", id="obs-1", sender_name="Bob")
    decision = _decision(lunch)
    assert decision["action"] == "observe" and decision["folder"] == "main", decision
    assert decision["job_id"] is None, decision
    [observed] = api.of_type(chat, "user")
    assert observed["observed"] in (True, 1) and observed["routed_to"] == "main", observed
    assert api.jobs(chat_jid=chat) == []

    fire = api.post(chat, "api:user/alice", "@Postroom summarize", id="obs-2", sender_name="Alice")
    decision = _decision(fire)
    assert decision["action"] == "fire" and decision["folder"] == "main", decision
    assert decision["job_id"] is not None, decision

    [answer] = api.wait_answers(chat, 1)
    run = api.run(answer["run_id"])
    user_blocks = [m for m in run["messages"] if isinstance(m, dict) and m.get("role") == "user"]
    assert any("[Bob] lunch?" in message_text(m) for m in user_blocks), run["messages"]
    # Echo answers the turn's new input, observed rows included (PIPELINE §4).
    assert "lunch?" in answer["content"] and "summarize" in answer["content"], answer
    [job] = api.jobs(chat_jid=chat)
    assert "obs-2" in job["message_ids"], job
    api.wait_for(lambda: sink.for_chat(chat), what="the answer's delivery")


def test_steering_acks_are_host_messages_and_never_reach_the_runner(
    start_server: StartServer, sink: Sink
):
    """ROUTING §3.1: acks and command answers are host messages, never sent to the LLM."""
    chat = "api:room/3"
    sender = "api:user/carol"
    server = start_server(sink.env())
    api = server.client()

    first = api.post(chat, sender, "hello", id="st-1", sender_name="Carol")
    api.wait_answers(chat, 1)

    acks: dict[str, str] = {}
    expected = {
        "@": "routing reset to default",
        "#support": "topic → support",
        "/status": None,
        "#": "topic reset to default",
    }
    for i, (text, ack) in enumerate(expected.items()):
        result = api.post(chat, sender, text, id=f"st-cmd-{i}", sender_name="Carol")
        decision = _decision(result)
        assert decision["action"] == "command", (text, decision)
        assert decision["job_id"] is None, (text, decision)
        assert decision["ack"], (text, decision)
        if ack is not None:
            assert decision["ack"] == ack, (text, decision)
        acks[text] = decision["ack"]

    hosts = api.of_type(chat, "host")
    host_texts = [h["content"] for h in hosts]
    for text, ack in acks.items():
        assert any(ack in h for h in host_texts), (text, ack, host_texts)
    commands = [m for m in api.of_type(chat, "user") if m["id"].startswith("st-cmd-")]
    assert len(commands) == len(expected)
    assert all(m["metadata"].get("command") is True for m in commands), commands
    assert len(api.jobs(chat_jid=chat)) == 1

    last = api.post(chat, sender, "again", id="st-2", sender_name="Carol")
    assert _decision(last)["action"] == "fire"
    answers = _by_seq(api.wait_answers(chat, 2))
    api.wait_idle()

    jobs = api.jobs(chat_jid=chat)
    assert sorted(j["message_ids"] for j in jobs) == [[first["id"]], [last["id"]]], jobs
    assert all(j["status"] == "done" for j in jobs), jobs
    for answer in answers:
        run = api.run(answer["run_id"])
        texts = [message_text(m) for m in run["messages"]]
        for ack in acks.values():
            assert not any(ack in t for t in texts), (ack, run["messages"])
            assert ack not in answer["content"], (ack, answer)
        assert not any("#support" in t or "/status" in t for t in texts), run["messages"]
    assert "again" in answers[1]["content"] and "hello" not in answers[1]["content"], answers


def test_gateway_messages_are_never_routed(start_server: StartServer, sink: Sink):
    """ROUTING §3 (the bot-loop guard); MESSAGES §2 (internal senders are refused)."""
    chat = "api:room/4"
    sender = "api:user/dave"
    server = start_server(sink.env())
    api = server.client()

    api.post(chat, sender, "one", id="own-1")
    api.wait_answers(chat, 1)
    api.post(chat, sender, "two", id="own-2")
    api.wait_answers(chat, 2)
    api.wait_for(lambda: len(sink.for_chat(chat)) >= 2, what="both deliveries")
    api.wait_idle()

    jobs = api.jobs(chat_jid=chat)
    assert sorted(j["message_ids"] for j in jobs) == [["own-1"], ["own-2"]], jobs
    assert len(api.of_type(chat, "assistant")) == 2

    before = api.messages(chat)
    for internal in ("bot", "host", "tui-user", "system", "command_output"):
        response = api.post_raw({"chat_jid": chat, "sender": internal, "content": "sneaky"})
        assert response.status_code == 400, (internal, response.status_code, response.text)
        assert response.json().get("error"), response.text
    response = api.post_raw(
        {"chat_jid": chat, "sender": sender, "content": "sneaky", "message_type": "assistant"}
    )
    assert response.status_code == 400, (response.status_code, response.text)
    api.wait_idle()
    assert api.messages(chat) == before
    assert len(api.jobs(chat_jid=chat)) == 2
    assert len(sink.for_chat(chat)) == 2


def test_duplicate_inbound_id_is_a_no_op(start_server: StartServer, sink: Sink):
    """PIPELINE §1.3 and §8; INTERFACES §4: the same (id, chat_jid) twice changes nothing."""
    chat = "api:room/5"
    sender = "api:user/erin"
    server = start_server(sink.env())
    api = server.client()

    first = api.post(chat, sender, "only once", id="dup-1")
    second = api.post(chat, sender, "only once", id="dup-1")
    assert first["duplicate"] is False and second["duplicate"] is True, (first, second)
    assert second["seq"] == first["seq"] and second["id"] == "dup-1"
    assert _decision(second)["layer"] == "duplicate", second

    [answer] = api.wait_answers(chat, 1)
    api.wait_for(lambda: sink.for_chat(chat), what="the delivery")
    late = api.post(chat, sender, "changed text", id="dup-1")
    assert late["duplicate"] is True and late["seq"] == first["seq"], late
    api.wait_idle()

    users = api.of_type(chat, "user")
    assert [(u["id"], u["content"]) for u in users] == [("dup-1", "only once")], users
    assert [a["id"] for a in api.of_type(chat, "assistant")] == [answer["id"]]
    jobs = api.jobs(chat_jid=chat)
    assert [j["message_ids"] for j in jobs] == [["dup-1"]], jobs
    assert [d.body["id"] for d in sink.for_chat(chat)] == [answer["id"]]


def test_messages_during_a_running_turn_get_one_followup(start_server: StartServer, sink: Sink):
    """PIPELINE §2: busy_policy followup — one follow-up turn collecting everything."""
    chat = "api:room/6"
    sender = "api:user/finn"
    server = start_server({"POSTROOM_PROVIDERS__ECHO__DELAY_MS": "800", **sink.env()})
    api = server.client()

    a = api.post(chat, sender, "alpha request", id="fu-a")
    job1 = _decision(a)["job_id"]
    assert job1 is not None
    api.wait_for(
        lambda: any(j["id"] == job1 for j in api.jobs("running")),
        interval=0.02,
        what="the first turn to run",
    )
    b = api.post(chat, sender, "bravo request", id="fu-b")
    c = api.post(chat, sender, "charlie request", id="fu-c")
    job2 = _decision(b)["job_id"]
    assert job2 is not None and job2 != job1, (a, b)
    assert _decision(c)["job_id"] == job2, c

    def finished() -> bool:
        jobs = api.jobs(chat_jid=chat)
        return len(jobs) >= 2 and all(j["status"] not in ("queued", "running") for j in jobs)

    api.wait_for(finished, timeout=20, what="both turns to finish")
    api.wait_idle()

    jobs = sorted(api.jobs(chat_jid=chat), key=lambda j: j["id"])
    assert [j["id"] for j in jobs] == [job1, job2], jobs
    assert jobs[0]["conversation_id"] == jobs[1]["conversation_id"]
    assert [j["message_ids"] for j in jobs] == [["fu-a"], ["fu-b", "fu-c"]], jobs
    assert all(j["status"] == "done" for j in jobs), jobs
    answers = _by_seq(api.of_type(chat, "assistant"))
    if len(answers) != 2:
        found = [api.http.get(f"/api/v1/runs/{i}") for i in (1, 2, 3)]
        runs = [r.json() for r in found if r.status_code == 200]
        pytest.fail(
            f"{len(answers)} answer(s) for 2 turns; the chat holds "
            f"{[(m['message_type'], m['content']) for m in api.messages(chat)]}; the runs "
            f"(job, messages, output) are "
            f"{[(r['job_id'], r['messages'], r['output']) for r in runs]}"
        )
    assert [a["metadata"].get("job_id") for a in answers] == [job1, job2], answers
    api.wait_for(lambda: len(sink.for_chat(chat)) >= 2, what="both deliveries")
    first, second = answers
    assert "alpha request" in first["content"] and "bravo" not in first["content"], first
    assert "bravo request" in second["content"] and "charlie request" in second["content"]
    assert "alpha" not in second["content"], second


def test_sigint_stops_gracefully_and_a_restart_serves_the_same_data(
    start_server: StartServer, sink: Sink
):
    chat = "api:room/8"
    sender = "api:user/gail"
    server = start_server(sink.env())
    api = server.client()
    api.post(chat, sender, "before restart", id="rs-1")
    [first] = api.wait_answers(chat, 1)
    api.wait_for(lambda: sink.for_chat(chat), what="the first delivery")
    before = api.messages(chat)

    started = time.monotonic()
    code = server.interrupt(timeout=20)
    elapsed = time.monotonic() - started
    assert code == 0, (code, server.stderr())
    assert elapsed < 10, (elapsed, server.stderr())

    server.start()
    api = server.client()
    assert api.http.get("/healthz").status_code == 200
    assert api.messages(chat) == before
    api.post(chat, sender, "after restart", id="rs-2")
    answers = _by_seq(api.wait_answers(chat, 2))
    assert answers[0] == first and "after restart" in answers[1]["content"], answers
    api.wait_for(lambda: len(sink.for_chat(chat)) >= 2, what="the second delivery")
    api.wait_idle()
    assert [d.body["id"] for d in sink.for_chat(chat)] == [a["id"] for a in answers]


def test_cli_send_is_answered_by_the_running_server(
    start_server: StartServer, sink: Sink, data_dir: Path
):
    """INTERFACES §2 ``postroom send``; PIPELINE §2: the slow poll is the backstop."""
    chat = "api:room/9"
    server = start_server(sink.env())
    api = server.client()

    done = postroom_cli(
        data_dir, "send", "--json", "--chat-jid", chat, "--sender", "api:user/hana", "via the cli"
    )
    written = time.monotonic()
    assert done.returncode == 0, (done.stdout, done.stderr)
    decision = json.loads(done.stdout)
    assert decision["action"] == "fire" and decision["folder"] == "main", decision

    def answered() -> list[dict[str, Any]]:
        return api.of_type(chat, "assistant")

    [answer] = api.wait_for(answered, timeout=3.0, what="the server to answer the CLI")
    assert time.monotonic() - written < 3.0
    assert "via the cli" in answer["content"], answer
    api.wait_for(lambda: sink.for_chat(chat), what="the delivery")
    [job] = api.jobs(chat_jid=chat)
    assert job["status"] == "done", job
