"""The whole path for Mastodon: a mention at the fake instance → a real postroom gateway
(``postroom init``'s data directory, echo provider) → the answer posted as a reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel_gateway import configure, eventually, init_data_dir, running_gateway, stored_rows
from fake_engine_slack_whatsapp import serve
from fake_mastodon import TOKEN, FakeMastodon


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """``postroom init``'s data directory (the CLI runs its own event loop: not in the test's)."""
    return init_data_dir(tmp_path / "data")


async def test_whole_path_from_a_mention_through_the_gateway_to_a_reply(data: Path) -> None:
    fake = FakeMastodon()
    async with serve(fake.app()) as url:
        fake.base_url = url
        configure(
            data,
            f"""
[channels.mastodon]
enabled = true
access_token = "{TOKEN}"
base_url = "{url}"
poll_interval_s = 0.1
""",
        )
        async with running_gateway(data) as (gateway, _url):
            await eventually(lambda: fake.calls["/api/v1/notifications"] >= 1, timeout=20)
            alice = fake.account("alice", domain="other.example", name="Alice")
            trigger = fake.mention(alice, "echo me, please", visibility="unlisted")
            await eventually(lambda: fake.posted, timeout=30)
            (state,) = [c for c in gateway.channels.status() if c["name"] == "mastodon"]
    (answer,) = fake.posted
    assert answer["status"].startswith("@alice@other.example ")
    assert "echo me, please" in answer["status"]
    assert (answer["in_reply_to_id"], answer["visibility"]) == (trigger["id"], "unlisted")
    assert state["state"] == "connected"
    chat = f"mastodon:account/{alice['id']}"  # the account's id, never its acct
    stored = stored_rows(
        data,
        "SELECT sender, message_type, verb FROM messages WHERE chat_jid = ? ORDER BY seq",
        chat,
    )
    assert stored[0] == (chat, "user", "mention")
    assert stored[-1][1] == "assistant"
    sent = stored_rows(
        data, "SELECT status, platform_message_id FROM deliveries WHERE chat_jid = ?", chat
    )
    assert sent == [("sent", max(fake.statuses, key=int))]
