"""The whole path for e-mail: a mail in the fake IMAP mailbox → a real postroom gateway
(``postroom init``'s data directory, echo provider) → the answer at the fake SMTP server,
threaded under the mail, which is marked seen."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from channel_gateway import OPEN_DMS, configure, init_data_dir, running_gateway, stored_rows
from fake_email import BOT, PASSWORD, FakeImap, FakeSmtp, eventually, mail


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """``postroom init``'s data directory (the CLI runs its own event loop: not in the test's)."""
    return init_data_dir(tmp_path / "data")


async def test_whole_path_from_a_mail_through_the_gateway_to_a_threaded_smtp_answer(
    data: Path,
) -> None:
    imap = await FakeImap().start()
    smtp = await FakeSmtp().start()
    configure(
        data,
        f"""
[channels.email]
enabled = true
imap_host = "127.0.0.1"
imap_port = {imap.port}
imap_ssl = false
smtp_host = "127.0.0.1"
smtp_port = {smtp.port}
smtp_starttls = false
username = "{BOT}"
password = "{PASSWORD}"
poll_interval = "300ms"
"""
        + OPEN_DMS,
    )
    try:
        async with running_gateway(data):
            await eventually(imap.idling, timeout_s=20)
            uid = imap.deliver(mail(subject="Ping", body="echo me, please"))
            (answer,) = await smtp.wait_for(1, timeout_s=30)
            await eventually(lambda: imap.seen(uid))
            # Leave only once the delivery is recorded: the gateway's last delivery round at
            # stop would otherwise send a row that is still in flight a second time.
            await eventually(
                lambda: stored_rows(data, "SELECT status FROM deliveries") == [("sent",)]
            )
    finally:
        await imap.stop()
        await smtp.stop()
    assert smtp.recipients == [["alice@example.org"]]
    assert answer["Subject"] == "Re: Ping"
    assert answer["In-Reply-To"] == "<m1@example.org>"
    assert "echo me, please" in answer.get_content()
    chat = "email:thread/" + hashlib.sha256(b"<m1@example.org>").hexdigest()[:16]
    stored = stored_rows(
        data,
        "SELECT sender, message_type FROM messages WHERE chat_jid = ? ORDER BY timestamp",
        chat,
    )
    assert stored[0] == ("email:address/alice@example.org", "user")
    assert stored[-1][1] == "assistant"
    sent = stored_rows(
        data, "SELECT status, platform_message_id FROM deliveries WHERE chat_jid = ?", chat
    )
    assert sent == [("sent", str(answer["Message-ID"]))]
