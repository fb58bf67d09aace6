"""Validation where a value is written (INTERFACES §1 Bounds, PIPELINE §1 item 6): a typo
inside a channel section is refused when the configuration is read, naming the key; an empty
message is refused with nothing stored and no turn, and adapters skip one.
"""

from __future__ import annotations

import base64
import importlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from postroom.app.gateway import Gateway
from postroom.channels.base import BaseChannel, ChannelContext
from postroom.cli.main import app as cli_app
from postroom.config import CHANNEL_KEYS, load_config
from postroom.core.errors import ConfigError
from postroom.core.messages import Attachment, InboundMessage

from support import api_client, cli_env

runner = CliRunner()
CHAT = "telegram:group/5"
SENDER = "telegram:user/ana"


# --------------------------------------------------------------------------- channel sections

MODELS = {
    "telegram": ("postroom.channels.telegram.config", "TelegramConfig"),
    "discord": ("postroom.channels.discord.config", "DiscordConfig"),
    "slack": ("postroom.channels.slack.config", "SlackConfig"),
    "whatsapp": ("postroom.channels.whatsapp.config", "WhatsAppConfig"),
    "email": ("postroom.channels.email.config", "EmailConfig"),
    "matrix": ("postroom.channels.matrix.config", "MatrixConfig"),
    "mastodon": ("postroom.channels.mastodon.config", "MastodonConfig"),
    "hook": ("postroom.channels.hook.channel", "HookConfig"),
}


@pytest.mark.parametrize("channel", sorted(MODELS))
def test_the_keys_checked_at_load_are_the_adapters_own(channel: str) -> None:
    module, name = MODELS[channel]
    model: type[BaseModel] = getattr(importlib.import_module(module), name)
    keys = {field.alias or key for key, field in model.model_fields.items()}
    if model.model_config.get("populate_by_name"):
        keys |= set(model.model_fields)
    assert CHANNEL_KEYS[channel] == keys


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[channels.telegram]\ntokn = "123:abc"\n',
            "Unknown key 'tokn' in [channels.telegram] in {path}; the keys are allowed_updates, "
            "base_url, enabled, mode, poll_timeout, token, webhook_secret, webhook_url.",
        ),
        (
            '[channels.http.api]\noutbound_urll = "http://127.0.0.1:9/hook"\n',
            "Unknown key 'outbound_urll' in [channels.http.api] in {path}; the keys are "
            "outbound_url, secret.",
        ),
        (
            # A disabled section is checked too: the typo is found before it is switched on.
            '[channels.discord]\nenabled = false\ntoken = "x"\nignore_bot = true\n',
            "Unknown key 'ignore_bot' in [channels.discord] in {path}",
        ),
        ('[channels.http]\napi = "http://x"\n', "[channels.http.api] in {path} must be a table"),
        ("[channels.telegramm]\n", "Unknown channel [channels.telegramm] in {path}"),
    ],
)
def test_an_unknown_key_in_a_channel_section_is_refused_at_load(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "postroom.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, {})
    assert expected.format(path=path) in str(caught.value)


def test_a_channel_key_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, {"POSTROOM_CHANNELS__SLACK__BOTTOKEN": "xoxb-1"})
    assert str(caught.value).startswith(
        "Unknown key 'bottoken' in [channels.slack] in environment variable "
        "POSTROOM_CHANNELS__SLACK__BOTTOKEN; the keys are app_token, base_url, bot_token"
    )
    config = load_config(tmp_path, {"POSTROOM_CHANNELS__HTTP__API__SECRET": "s3cret"})
    assert config.channels["http"]["api"] == {"secret": "s3cret"}


def test_every_command_refuses_a_channel_typo_in_one_sentence(tmp_path: Path) -> None:
    data = tmp_path / "d"
    result = runner.invoke(cli_app, ["--data", str(data), "init"], env=cli_env())
    assert result.exit_code == 0, result.stderr
    config = data / "postroom.toml"
    config.write_text(config.read_text("utf-8") + '\n[channels.telegram]\ntokn = "1:a"\n')
    for command in (["folders", "list"], ["doctor"], ["channels"]):
        result = runner.invoke(cli_app, ["--data", str(data), *command], env=cli_env())
        assert result.exit_code == 1, (command, result.stdout, result.stderr)
        assert result.stderr.startswith("error: Unknown key 'tokn' in [channels.telegram]")
        assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- empty messages


@pytest.fixture
def initialized(tmp_path: Path) -> Path:
    data = tmp_path / "d"
    result = runner.invoke(cli_app, ["--data", str(data), "init"], env=cli_env())
    assert result.exit_code == 0, result.stderr
    return data


@pytest.fixture
async def gateway(initialized: Path) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    data = initialized
    built = await Gateway.build(data, load_config(data, {}))
    try:
        async with api_client(built, data) as client:
            yield built, client
    finally:
        await built.close()


#: A picture sent inline (a URL would be fetched, and tests reach no other host).
PICTURE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"pixels" * 10).decode()


async def test_an_empty_message_is_refused_with_nothing_stored_and_no_turn(
    gateway: tuple[Gateway, httpx.AsyncClient],
) -> None:
    _, client = gateway
    for content in ("", "   ", "\n\t "):
        response = await client.post(
            "/api/v1/messages", json={"chat_jid": CHAT, "sender": SENDER, "content": content}
        )
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": "The message is empty: send some text or an attachment."
        }
    messages = (await client.get("/api/v1/messages", params={"chat_jid": CHAT})).json()
    assert messages == {"messages": []}
    assert (await client.get("/api/v1/jobs")).json() == {"jobs": []}
    assert (await client.get("/api/v1/drops")).json() == {"drops": []}
    # An attachment alone is a message; a hypothetical empty message can still be explained.
    response = await client.post(
        "/api/v1/messages",
        json={
            "chat_jid": CHAT,
            "sender": SENDER,
            "content": "",
            "attachments": [{"kind": "image", "mime": "image/png", "data": PICTURE}],
        },
    )
    assert response.status_code == 200 and response.json()["decision"]["action"] == "fire"
    response = await client.post(
        "/api/v1/routes/explain", json={"chat_jid": CHAT, "sender": SENDER, "content": ""}
    )
    assert response.status_code == 200, response.text


def test_send_refuses_an_empty_message(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert runner.invoke(cli_app, ["--data", str(data), "init"], env=cli_env()).exit_code == 0
    result = runner.invoke(
        cli_app,
        ["--data", str(data), "send", "--chat-jid", CHAT, "--sender", SENDER, "  "],
        env=cli_env(),
    )
    assert result.exit_code == 1
    assert result.stderr == "error: The message is empty: send some text or an attachment.\n"


class _Probe(BaseChannel):
    name = "probe"
    platforms = ("probe",)


async def test_an_adapter_skips_an_empty_message_instead_of_ingesting_it() -> None:
    handed: list[InboundMessage] = []

    async def inbound(message: InboundMessage) -> None:
        handed.append(message)

    channel = _Probe()
    await channel.start(ChannelContext(inbound=inbound, clock=lambda: datetime.now(UTC)))  # type: ignore[arg-type]
    try:

        def message(content: str, *attachments: Attachment) -> InboundMessage:
            return InboundMessage(
                id=f"m{len(content)}{len(attachments)}",
                chat_jid="probe:room/1",
                sender="probe:user/1",
                content=content,
                timestamp=datetime.now(UTC),
                attachments=attachments,
            )

        assert await channel.receive(message(" \n")) is None
        await channel.receive(message("", Attachment(kind="image", url="https://x/a.png")))
        await channel.receive(message("hi"))
    finally:
        await channel.stop()
    assert [m.content for m in handed] == ["", "hi"]
