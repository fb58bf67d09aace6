"""The whole path for Matrix: an event on the fake homeserver → a real postroom gateway
(``postroom init``'s data directory, echo provider) → the answer sent back into the room with
``PUT …/send/m.room.message``, replying to the event it answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel_gateway import (
    OPEN_DMS,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)
from fake_matrix import BOT, PASSWORD, FakeHomeserver, running

DM = "!dm:fake.test"
CAROL = "@carol:fake.test"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """``postroom init``'s data directory (the CLI runs its own event loop: not in the test's)."""
    return init_data_dir(tmp_path / "data")


async def test_whole_path_from_a_room_message_through_the_gateway_to_an_answer_in_the_room(
    data: Path,
) -> None:
    homeserver = FakeHomeserver()
    homeserver.add_room(DM, {CAROL: "Carol"})
    async with running(homeserver):
        configure(
            data,
            f"""
[channels.matrix]
enabled = true
homeserver = "{homeserver.url}"
user_id = "{BOT}"
password = "{PASSWORD}"
sync_timeout = "1s"
"""
            + OPEN_DMS,
        )
        async with running_gateway(data):
            # Past the initial sync (whose history is skipped): the adapter long-polls for news.
            await eventually(lambda: len(homeserver.sync_sinces) >= 2, timeout=20)
            asked = homeserver.text(DM, CAROL, "echo me, please")
            await eventually(lambda: homeserver.sent, timeout=30)
            # The answer's echo comes back through /sync: wait until the adapter synced past it.
            past_the_echo = f"s{len(homeserver.log)}"
            await eventually(lambda: past_the_echo in homeserver.sync_sinces, timeout=10)
            # Leave only once the delivery is recorded: the gateway's last delivery round at
            # stop would otherwise send a row that is still in flight a second time.
            await eventually(
                lambda: stored_rows(data, "SELECT status FROM deliveries") == [("sent",)]
            )
    (answer,) = homeserver.sent
    assert answer.room_id == DM
    assert "echo me, please" in answer.content["body"]
    assert answer.content["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
    chat = f"matrix:room/{DM}"
    stored = stored_rows(
        data, "SELECT sender, content FROM messages WHERE chat_jid = ? AND id = ?", chat, asked
    )
    assert stored == [(f"matrix:user/{CAROL}", "echo me, please")]
    sent = stored_rows(
        data, "SELECT status, platform_message_id FROM deliveries WHERE chat_jid = ?", chat
    )
    assert sent == [("sent", answer.event_id)]
    # The bot's own answer came back through /sync and was not stored a second time.
    echoes = stored_rows(data, "SELECT COUNT(*) FROM messages WHERE id = ?", answer.event_id)
    assert echoes == [(0,)]
