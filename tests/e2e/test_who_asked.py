"""Who asked, in group chats (MESSAGES §5): in a chat with more than one human sender, every user
row reaches the model as ``[sender_name] text`` — the message that fires the turn included.

A real ``postroom serve`` talks through the ``openai`` SDK to a fake Chat Completions API that
records every request; the assertions read what the model was sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from e2e_harness import ServerProcess, api_client, list_jobs
from fake_openai import FlakyChatCompletions, serve_app, serve_env

StartServer = Callable[..., ServerProcess]


def user_lines(call_messages: list[dict[str, Any]]) -> list[str]:
    """Every line of every user message of one request, in order."""
    return [
        line
        for message in call_messages
        if message.get("role") == "user"
        for line in str(message.get("content") or "").splitlines()
    ]


async def post(http: httpx.AsyncClient, chat: str, name: str, text: str) -> dict[str, Any]:
    sender = f"api:user/{name.lower()}"
    body = {"chat_jid": chat, "sender": sender, "sender_name": name, "content": text}
    response = await http.post("/api/v1/messages", json=body)
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()["decision"]
    return decision


async def answered(http: httpx.AsyncClient, job_id: int) -> None:
    async with asyncio.timeout(20):
        while True:
            (job,) = [j for j in await list_jobs(http) if j["id"] == job_id]
            if job["status"] == "done":
                return
            assert job["status"] in ("queued", "running"), job
            await asyncio.sleep(0.05)


@pytest.mark.timeout(90)
async def test_the_model_is_told_who_asked_in_a_chat_of_several_people(
    start_server: StartServer,
) -> None:
    fake = FlakyChatCompletions(seed=1, server_error_share=0.0, rate_limit_share=0.0)
    async with serve_app(fake.app) as url:
        server = await asyncio.to_thread(start_server, serve_env(url, model="gpt-who-asked"))
        async with api_client(server) as http:
            # "Answer only when called, but keep the context" (ROUTING §5) in one group.
            group = "api:group/1"
            for seq, match, target in (
                (10, f"chat_jid={group} verb=mention", "main"),
                (20, f"chat_jid={group}", "main#observe"),
            ):
                response = await http.post(
                    "/api/v1/routes", json={"seq": seq, "match": match, "target": target}
                )
                assert response.status_code == 201, response.text

            # Alice's own lines are observed; then she asks. The request names her throughout.
            assert (await post(http, group, "Alice", "we decided on pizza"))["action"] == "observe"
            asked = await post(http, group, "Alice", "@Postroom what did we decide?")
            await answered(http, asked["job_id"])
            assert user_lines(fake.calls[-1].messages) == [
                "[Alice] we decided on pizza",
                "[Alice] @Postroom what did we decide?",
            ]

            # Bob asks next: both are named, the asker included.
            bob = await post(http, group, "Bob", "@Postroom and who asked that?")
            await answered(http, bob["job_id"])
            assert user_lines(fake.calls[-1].messages)[-1] == (
                "[Bob] @Postroom and who asked that?"
            )

            # After /new the conversation holds only Bob's question, but the chat has two
            # people: he is still named.
            await post(http, group, "Bob", "@Postroom /new")
            fresh = await post(http, group, "Bob", "@Postroom start over")
            await answered(http, fresh["job_id"])
            assert user_lines(fake.calls[-1].messages) == ["[Bob] @Postroom start over"]

            # A direct chat with one person: no names.
            direct = await post(http, "api:user/carol", "Carol", "hello")
            await answered(http, direct["job_id"])
            assert user_lines(fake.calls[-1].messages) == ["hello"]
