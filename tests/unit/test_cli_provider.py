"""A command-line runner's configuration, command line and stdin (PIPELINE §4); the runs
themselves are in ``tests/integration/test_cli_runner.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from postroom.app.providers import build_provider
from postroom.config import Config, ProviderConfig, load_config
from postroom.core.attachments import MediaPart
from postroom.core.context import ContextMessage
from postroom.core.errors import ConfigError
from postroom.llm.accounts import AccountPool
from postroom.llm.base import ModelRequest
from postroom.llm.cli import DEFAULT_CLI_COMMAND, CliProvider, render_conversation

from fakeclock import FakeClock


def runner(command: tuple[str, ...] = DEFAULT_CLI_COMMAND, **kwargs: Any) -> CliProvider:
    return CliProvider(
        name="claude",
        command=command,
        sessions_dir=Path("/nonexistent"),
        account="claude",
        **kwargs,
    )


def test_model_is_put_in_the_command_or_left_out_with_its_option() -> None:
    assert runner().argv("opus") == ["claude", "--print", "--model", "opus", "--continue"]
    assert runner().argv(None) == ["claude", "--print", "--continue"]
    # The provider's own model is applied by complete(): argv takes the one it is given.
    assert runner(default_model="sonnet").argv(None) == runner().argv(None)
    glued = runner(("codex", "exec", "--model={model}", "-"))
    assert glued.argv("o3") == ["codex", "exec", "--model=o3", "-"]
    assert glued.argv(None) == ["codex", "exec", "-"]


def test_the_conversation_is_rendered_with_roles_after_the_instructions() -> None:
    request = ModelRequest(
        system="You are Main.",
        messages=(
            ContextMessage("user", "hi"),
            ContextMessage("assistant", "hello"),
            ContextMessage("tool_result", "done", exit_code=2),
            ContextMessage("user", "and now?\nsecond line"),
        ),
    )
    assert render_conversation(request) == (
        "<instructions>\nYou are Main.\n</instructions>\n\n"
        '<message role="user">\nhi\n</message>\n\n'
        '<message role="assistant">\nhello\n</message>\n\n'
        '<message role="command output, exit 2">\ndone\n</message>\n\n'
        '<message role="user">\nand now?\nsecond line\n</message>\n'
    )


def test_a_command_reads_a_placeholder_line_for_each_picture_or_file() -> None:
    photo = MediaPart("image", "ab" * 32, "image/png", "cat.png", 2048, b"png")
    request = ModelRequest(system="", messages=(ContextMessage("user", "look", media=(photo,)),))
    assert render_conversation(request) == (
        '<message role="user">\nlook\n[attachment: cat.png, image/png, 2 KB]\n</message>\n'
    )


def test_a_cli_provider_is_a_pool_of_its_accounts(tmp_path: Path) -> None:
    section = ProviderConfig.model_validate(
        {"kind": "cli", "accounts": [{"CLAUDE_CONFIG_DIR": "/a"}, {"CLAUDE_CONFIG_DIR": "/b"}]}
    )
    pool = build_provider(
        "claude", section, clock=FakeClock(), max_rest_s=60, sessions_dir=tmp_path
    )
    assert isinstance(pool, AccountPool)
    assert [label for label, _ in pool.accounts()] == ["claude#1", "claude#2"]
    single = build_provider("claude", ProviderConfig(kind="cli"), clock=FakeClock(), max_rest_s=60)
    assert isinstance(single, AccountPool)
    ((label, account),) = single.accounts()
    assert label == "claude"
    assert isinstance(account, CliProvider)
    assert account.argv("opus")[0] == "claude"


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        ({"command": ["x"]}, "apply only to a provider of kind = 'cli'"),
        ({"kind": "openai", "accounts": [{"A": "1"}]}, "apply only to a provider"),
        ({"kind": "cli", "command": []}, "command must name a program"),
        ({"kind": "cli", "env": {"NOT VALID": "1"}}, "is not an environment variable name"),
        ({"kind": "cli", "rate_limit_pattern": "(unclosed"}, "not a valid regex"),
        ({"kind": "cli", "input": "everything"}, "providers.claude.input"),
        ({"kind": "anthropic", "input": "new"}, "input apply only to a provider"),
        ({"kind": "cli", "accounts": ["CLAUDE_CONFIG_DIR=/a"]}, "providers.claude.accounts"),
    ],
)
def test_bad_runner_settings_are_refused_naming_the_key(
    tmp_path: Path, section: dict[str, Any], fragment: str
) -> None:
    (tmp_path / "postroom.toml").write_text("", "utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, {}, {"providers": {"claude": section}})
    assert "providers.claude" in str(caught.value)
    assert fragment in str(caught.value)


def test_skills_limits_are_bounded(tmp_path: Path) -> None:
    assert Config().skills.max_per_run == 3
    assert Config().skills.max_chars == 8000
    with pytest.raises(ConfigError, match=r"skills\.max_chars"):
        load_config(tmp_path, {"POSTROOM_SKILLS__MAX_CHARS": "0"})
    assert load_config(tmp_path, {"POSTROOM_SKILLS__MAX_PER_RUN": "0"}).skills.max_per_run == 0
