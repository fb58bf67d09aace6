"""``load_config`` (INTERFACES §1): defaults < postroom.toml < environment < CLI flags.

Each test writes its own ``postroom.toml`` in a temp directory and passes an explicit environ
mapping, so nothing depends on the calling process's environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postroom.config import Config, load_config
from postroom.core.errors import ConfigError, PostroomError


def write_config(directory: Path, text: str) -> Path:
    path = directory / "postroom.toml"
    path.write_text(text, "utf-8")
    return path


def config_error(directory: Path, environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(directory, environ)
    assert isinstance(caught.value, PostroomError)
    message = str(caught.value)
    assert "\n" not in message.strip()
    return message


# --------------------------------------------------------------------------- defaults


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = load_config(tmp_path, {})
    assert isinstance(config, Config)
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8484
    assert config.api.token == ""
    assert config.assistant.name == "Postroom"
    assert tuple(config.assistant.aliases) == ("ghost",)
    assert tuple(config.owners.senders) == ()
    assert config.defaults.provider == "echo"
    assert config.defaults.model is None
    assert config.defaults.engagement_ttl_s == 1800
    assert config.defaults.session.value == "per-chat"
    assert config.defaults.busy_policy.value == "followup"
    assert config.queue.max_attempts == 3
    assert config.queue.backoff_base_s == 60
    assert config.queue.max_concurrent_turns == 8
    assert config.queue.lease_s == 30
    assert config.queue.shutdown_grace_s == 30
    assert config.queue.lease_renew_s == 10
    assert config.delivery.ttl_s == 3600
    assert config.delivery.backoff_base_s == 2
    assert config.observe.window_messages == 20
    assert config.observe.window_chars == 8000
    assert config.context.max_messages == 200
    assert config.limits.content_bytes == 65536
    assert config.limits.body_bytes == 1048576
    assert config.limits.image_bytes == 5242880
    assert config.scheduler.tick_s == 10
    assert config.llm.max_model_calls == 5
    assert config.delegation.max_depth == 3
    assert config.compaction.threshold == 0.75
    assert config.compaction.keep_last == 10
    assert config.routing.missing_folder_notice_s == 3600
    assert config.transcriber.base_url is None
    assert dict(config.providers) == {}
    assert dict(config.channels) == {}


def test_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    write_config(tmp_path, "# nothing set\n")
    assert load_config(tmp_path, {}) == load_config(tmp_path / "absent", {})


# --------------------------------------------------------------------------- file


def test_file_values(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        """
[server]
host = "0.0.0.0"
port = 9100

[api]
token = "file-token"

[assistant]
name = "Atlas"
aliases = ["ghost", "bot"]

[owners]
senders = ["telegram:user/1"]

[defaults]
provider = "anthropic"
model = "claude-x"
engagement_ttl = "2h"
session = "shared"

[queue]
lease = "90s"
backoff_base = "30m"

[delivery]
ttl = "0"

[providers.anthropic]
api_keys = ["sk-file"]
base_url = "http://127.0.0.1:9/anthropic"

[channels.telegram]
enabled = true
token = "123:abc"
""",
    )
    config = load_config(tmp_path, {})
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 9100
    assert config.api.token == "file-token"
    assert config.assistant.name == "Atlas"
    assert tuple(config.assistant.aliases) == ("ghost", "bot")
    assert tuple(config.owners.senders) == ("telegram:user/1",)
    assert config.defaults.provider == "anthropic"
    assert config.defaults.model == "claude-x"
    assert config.defaults.engagement_ttl_s == 7200
    assert config.defaults.session.value == "shared"
    assert config.queue.lease_s == 90
    assert config.queue.backoff_base_s == 1800
    assert config.delivery.ttl_s == 0
    assert tuple(config.providers["anthropic"].api_keys) == ("sk-file",)
    assert config.providers["anthropic"].base_url == "http://127.0.0.1:9/anthropic"
    assert config.channels["telegram"]["enabled"] is True
    assert config.channels["telegram"]["token"] == "123:abc"
    # Keys the file leaves out keep their defaults.
    assert config.queue.max_attempts == 3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("0", 0)],
)
def test_durations(tmp_path: Path, text: str, seconds: float) -> None:
    write_config(tmp_path, f'[defaults]\nengagement_ttl = "{text}"\n')
    assert load_config(tmp_path, {}).defaults.engagement_ttl_s == seconds
    from_env = load_config(tmp_path / "absent", {"POSTROOM_DEFAULTS__ENGAGEMENT_TTL": text})
    assert from_env.defaults.engagement_ttl_s == seconds


# --------------------------------------------------------------------------- precedence


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    write_config(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 9100\n')
    config = load_config(tmp_path, {"POSTROOM_SERVER__PORT": "9000"})
    assert config.server.port == 9000
    # A sibling key the variable does not name keeps the file's value.
    assert config.server.host == "0.0.0.0"


def test_server_port_from_the_environment(tmp_path: Path) -> None:
    assert load_config(tmp_path, {"POSTROOM_SERVER__PORT": "9000"}).server.port == 9000


def test_cli_overrides_beat_the_environment_and_the_file(tmp_path: Path) -> None:
    write_config(tmp_path, "[server]\nport = 9100\n")
    environ = {"POSTROOM_SERVER__PORT": "9000", "POSTROOM_SERVER__HOST": "127.0.0.2"}
    config = load_config(tmp_path, environ, {"server": {"port": 9200}})
    assert config.server.port == 9200
    assert config.server.host == "127.0.0.2"
    assert load_config(tmp_path, environ).server.port == 9000
    assert load_config(tmp_path, {}).server.port == 9100


def test_list_values_from_the_environment_are_json(tmp_path: Path) -> None:
    write_config(tmp_path, '[assistant]\naliases = ["file"]\n')
    config = load_config(tmp_path, {"POSTROOM_ASSISTANT__ALIASES": '["ghost","bot"]'})
    assert tuple(config.assistant.aliases) == ("ghost", "bot")
    config = load_config(tmp_path, {"POSTROOM_OWNERS__SENDERS": '["telegram:user/1"]'})
    assert tuple(config.owners.senders) == ("telegram:user/1",)


def test_nested_provider_variable(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        {
            "POSTROOM_PROVIDERS__ANTHROPIC__BASE_URL": "http://127.0.0.1:9/a",
            "POSTROOM_PROVIDERS__OPENAI__API_KEYS": '["sk-1","sk-2"]',
        },
    )
    assert config.providers["anthropic"].base_url == "http://127.0.0.1:9/a"
    assert tuple(config.providers["openai"].api_keys) == ("sk-1", "sk-2")


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    write_config(tmp_path, '[server]\nport = 9100\n[api]\ntoken = "file-token"\n')
    config = load_config(
        tmp_path,
        {
            "POSTROOM_SERVER__PORT": "",
            "POSTROOM_API_TOKEN": "",
            "POSTROOM_ASSISTANT__ALIASES": "",
            "ANTHROPIC_API_KEY": "",
        },
    )
    assert config.server.port == 9100
    assert config.api.token == "file-token"
    assert tuple(config.assistant.aliases) == ("ghost",)
    assert "anthropic" not in config.providers or not config.providers["anthropic"].api_keys
    # An empty variable naming an unknown key is unset too, not an error.
    assert load_config(tmp_path, {"POSTROOM_SERVER__PROT": ""}).server.port == 9100


def test_variables_not_of_the_section_form_are_not_configuration(tmp_path: Path) -> None:
    environ = {
        "POSTROOM_TEST_PG_DSN": "postgresql://u:p@127.0.0.1:1/db",
        "POSTROOM_TEST_X": "1",
        "POSTROOM_DATA": str(tmp_path / "elsewhere"),
        "POSTROOM": "x",
        "POSTROOMX__Y": "1",
        "SERVER__PORT": "1",
    }
    assert load_config(tmp_path, environ) == load_config(tmp_path, {})


def test_api_token_variable(tmp_path: Path) -> None:
    assert load_config(tmp_path, {"POSTROOM_API_TOKEN": "env-token"}).api.token == "env-token"
    write_config(tmp_path, '[api]\ntoken = "file-token"\n')
    assert load_config(tmp_path, {}).api.token == "file-token"
    assert load_config(tmp_path, {"POSTROOM_API_TOKEN": "env-token"}).api.token == "env-token"


# --------------------------------------------------------------------------- vendor variables


def test_vendor_key_fills_an_empty_value(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        {
            "ANTHROPIC_API_KEY": "sk-ant",
            "OPENAI_API_KEY": "sk-oai",
            "GEMINI_API_KEY": "g-key",
            "OLLAMA_HOST": "http://127.0.0.1:11434",
        },
    )
    assert tuple(config.providers["anthropic"].api_keys) == ("sk-ant",)
    assert tuple(config.providers["openai"].api_keys) == ("sk-oai",)
    assert tuple(config.providers["gemini"].api_keys) == ("g-key",)
    assert config.providers["ollama"].base_url == "http://127.0.0.1:11434"


def test_vendor_key_does_not_replace_the_file(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        """
[providers.anthropic]
api_keys = ["sk-file"]

[providers.ollama]
base_url = "http://127.0.0.1:1/file"
""",
    )
    config = load_config(
        tmp_path, {"ANTHROPIC_API_KEY": "sk-env", "OLLAMA_HOST": "http://127.0.0.1:2/env"}
    )
    assert tuple(config.providers["anthropic"].api_keys) == ("sk-file",)
    assert config.providers["ollama"].base_url == "http://127.0.0.1:1/file"


def test_vendor_key_does_not_replace_a_postroom_variable(tmp_path: Path) -> None:
    config = load_config(
        tmp_path,
        {
            "ANTHROPIC_API_KEY": "sk-vendor",
            "POSTROOM_PROVIDERS__ANTHROPIC__API_KEYS": '["sk-postroom"]',
        },
    )
    assert tuple(config.providers["anthropic"].api_keys) == ("sk-postroom",)


def test_vendor_key_fills_a_provider_section_without_keys(tmp_path: Path) -> None:
    write_config(tmp_path, '[providers.anthropic]\nbase_url = "http://127.0.0.1:9/a"\n')
    config = load_config(tmp_path, {"ANTHROPIC_API_KEY": "sk-env"})
    assert tuple(config.providers["anthropic"].api_keys) == ("sk-env",)
    assert config.providers["anthropic"].base_url == "http://127.0.0.1:9/a"


# --------------------------------------------------------------------------- errors


def test_unknown_key_in_the_file_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server]\nprot = 9000\n")
    message = config_error(tmp_path, {})
    assert "prot" in message
    assert str(path) in message


def test_unknown_section_in_the_file_names_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[sevrer]\nport = 9000\n")
    message = config_error(tmp_path, {})
    assert "sevrer" in message
    assert str(path) in message


def test_unknown_top_level_key_in_the_file_names_it(tmp_path: Path) -> None:
    write_config(tmp_path, 'colour = "red"\n')
    assert "colour" in config_error(tmp_path, {})


def test_unknown_key_in_the_environment_names_the_variable(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_SERVER__PROT": "9000"})
    assert "POSTROOM_SERVER__PROT" in message
    assert "postroom.toml" not in message


def test_unknown_section_in_the_environment_names_the_variable(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_NOSUCH__KEY": "1"})
    assert "POSTROOM_NOSUCH__KEY" in message
    assert "postroom.toml" not in message


def test_bad_value_in_the_environment_names_the_variable(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_SERVER__PORT": "eighty"})
    assert "POSTROOM_SERVER__PORT" in message


@pytest.mark.parametrize("value", ['"5 minutes"', '"30"', '"m"', '"-1s"', '"2x"', "30"])
def test_bad_duration_in_the_file_names_the_key(tmp_path: Path, value: str) -> None:
    path = write_config(tmp_path, f"[defaults]\nengagement_ttl = {value}\n")
    message = config_error(tmp_path, {})
    assert "engagement_ttl" in message
    assert str(path) in message


def test_bad_duration_in_the_environment_names_the_key(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_QUEUE__LEASE": "soon"})
    assert "POSTROOM_QUEUE__LEASE" in message or "queue.lease" in message


@pytest.mark.parametrize(
    ("section", "key", "value", "allowed"),
    [
        ("defaults", "engagement_ttl", '"99999999h"', "from 0 to 30d"),
        ("delivery", "ttl", '"31d"', "from 0 to 30d"),
        ("queue", "backoff_base", '"1000h"', "from 0 to 30d"),
        ("llm", "max_rest", '"999d"', "from 0 to 30d"),
        ("llm", "call_timeout", '"0"', "above 0 and at most 30d"),
        ("queue", "lease_renew", '"0"', "above 0 and at most 30d"),
        ("queue", "max_attempts", "0", "from 1 to 2147483647"),
        ("queue", "max_concurrent_turns", "2147483648", "from 1 to 2147483647"),
        ("limits", "content_bytes", "-1", "from 1 to 2147483647"),
        ("observe", "window_chars", "99999999999", "from 0 to 2147483647"),
    ],
)
def test_values_out_of_bounds_are_refused_naming_key_and_range(
    tmp_path: Path, section: str, key: str, value: str, allowed: str
) -> None:
    """INTERFACES §1 Bounds, from the file and from the environment alike."""
    path = write_config(tmp_path, f"[{section}]\n{key} = {value}\n")
    message = config_error(tmp_path, {})
    assert f"'{section}.{key}'" in message and str(path) in message and allowed in message
    variable = f"POSTROOM_{section.upper()}__{key.upper()}"
    message = config_error(tmp_path / "absent", {variable: value.strip('"')})
    assert f"'{section}.{key}'" in message and variable in message and allowed in message


def test_deadlines_and_rest_have_their_defaults(tmp_path: Path) -> None:
    llm = load_config(tmp_path, {}).llm
    assert (llm.call_timeout_s, llm.run_timeout_s, llm.max_rest_s) == (120, 600, 3600)


def test_invalid_toml(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server\nport = = 1\n")
    assert str(path) in config_error(tmp_path, {})


def test_unknown_channel_section(tmp_path: Path) -> None:
    write_config(tmp_path, "[channels.telegramm]\nenabled = true\n")
    assert "telegramm" in config_error(tmp_path, {})
    known = tmp_path / "known"
    known.mkdir()
    write_config(known, "[channels.telegram]\nenabled = true\n")
    assert load_config(known, {}).channels["telegram"]["enabled"] is True


def test_unknown_channel_from_the_environment(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_CHANNELS__NOSUCH__ENABLED": "true"})
    assert "nosuch" in message.lower()


def test_malformed_json_list_in_the_environment_names_the_variable(tmp_path: Path) -> None:
    message = config_error(tmp_path, {"POSTROOM_ASSISTANT__ALIASES": '["ghost"'})
    assert "POSTROOM_ASSISTANT__ALIASES" in message
