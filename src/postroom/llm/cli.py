"""Command-line runners (PIPELINE §4): a provider of ``kind = "cli"`` runs an agent command.

By default Claude Code on a subscription account (``claude --print --model {model}
--continue``); any command with the same contract works — Codex, Gemini CLI, a script:

- the rendered conversation (the system prompt as instructions, then every message with its
  role) is written to the command's stdin, and stdin is closed; with ``input = "new"``, once
  the command has answered in the conversation's directory, only the messages after the last
  answer follow the instructions (the command keeps the rest in its own session);
- its stdout is the answer; its stderr is logged and kept in the run record;
- it runs in a working directory of its own per conversation, ``DIR/sessions/<conversation
  id>/`` (0700), so the tool's own session state (``--continue``) stays with the conversation;
  a call outside any conversation (a summary) gets a fresh directory, removed afterwards;
- it runs in a process group of its own, killed when the call's deadline (``llm.call_timeout``)
  or the run's passes: nothing it started outlives the call;
- a non-zero exit whose output matches ``rate_limit_pattern`` is a rate limit: the account
  (a set of environment variables, such as another ``CLAUDE_CONFIG_DIR``) rests and the next
  one takes the call (:class:`~postroom.llm.accounts.AccountPool`); any other non-zero exit
  is a failed call, retried like any.

The command inherits the server's environment without its ``POSTROOM_`` variables (the API
token stays with postroom), plus ``env`` and the account's variables. The raw output of the
run record holds the command line, the working directory, the account, the exit status, the
duration, stdout and stderr — never the variables' values.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from postroom.core.context import ContextMessage
from postroom.llm.base import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    RateLimited,
    TextSink,
    text_with_placeholders,
)

__all__ = [
    "DEFAULT_CLI_COMMAND",
    "DEFAULT_RATE_LIMIT_PATTERN",
    "CliProvider",
    "render_conversation",
]

log = structlog.get_logger(__name__)

#: Claude Code, answering once per call and continuing the conversation of its directory.
DEFAULT_CLI_COMMAND = ("claude", "--print", "--model", "{model}", "--continue")
#: What agent commands print when an account has used up its quota for now.
DEFAULT_RATE_LIMIT_PATTERN = (
    r"(?i)rate[ _-]?limit|usage limit|limit reached|too many requests|quota exceeded"
)
#: How long a command may take to end after SIGTERM before its group gets SIGKILL.
KILL_GRACE_S = 1.0
#: The most of stderr (and of a failed run's stdout) kept in errors and the log.
EXCERPT_CHARS = 2_000
#: Left in a conversation's directory once the command has answered there.
ANSWERED_MARKER = ".postroom-answered"
#: ``input``: the whole conversation on every call, or only what is new since the last answer
#: once the command has answered in the directory (for a command that keeps the conversation
#: itself, such as Claude Code with ``--continue``).
INPUTS = ("conversation", "new")


def render_conversation(request: ModelRequest, *, new_only: bool = False) -> str:
    """What the command reads on stdin: the system prompt, then the messages with roles (with
    *new_only*, only those after the last answer: the command keeps the rest itself)."""
    messages = list(request.messages)
    if new_only:
        answered = [i for i, m in enumerate(messages) if m.role == "assistant"]
        messages = messages[answered[-1] + 1 :] if answered else messages
    parts: list[str] = []
    if request.system.strip():
        parts.append(f"<instructions>\n{request.system.strip()}\n</instructions>")
    for message in messages:
        # A command reads text only: each picture or file is its placeholder line.
        text = text_with_placeholders(message).strip()
        parts.append(f'<message role="{_role(message)}">\n{text}\n</message>')
    return "\n\n".join(parts) + "\n"


def _role(message: ContextMessage) -> str:
    if message.role == "tool_result":
        return f"command output, exit {message.exit_code or 0}"
    if message.role == "tool":
        return f"tool {message.tool_name or ''} result".replace("  ", " ")
    return message.role


class CliProvider:
    """One account of a command-line runner."""

    def __init__(
        self,
        *,
        name: str,
        command: Sequence[str],
        sessions_dir: Path,
        account: str,
        env: Mapping[str, str] | None = None,
        default_model: str | None = None,
        rate_limit_pattern: str | None = None,
        environ: Mapping[str, str] | None = None,
        input_mode: str = "conversation",
    ) -> None:
        if not command:
            raise ValueError("a command-line runner needs a command")
        if input_mode not in INPUTS:
            raise ValueError(f"input must be one of {', '.join(INPUTS)}")
        self._new_only = input_mode == "new"
        self.name = name
        self._command = tuple(command)
        self._sessions_dir = sessions_dir
        self._account = account
        self._env = dict(env or {})
        self._default_model = default_model
        self._pattern = re.compile(rate_limit_pattern or DEFAULT_RATE_LIMIT_PATTERN)
        self._environ = environ

    def argv(self, model: str | None) -> list[str]:
        """The command line, ``{model}`` replaced; without a model, an argument that needs one
        is left out, with the option right before it (``--model {model}``)."""
        out: list[str] = []
        for arg in self._command:
            if "{model}" not in arg:
                out.append(arg)
            elif model:
                out.append(arg.replace("{model}", model))
            elif arg == "{model}" and out and out[-1].startswith("-") and len(out) > 1:
                out.pop()
        return out

    def workdir(self, conversation_id: int | None) -> tuple[Path, bool]:
        """The command's working directory, and whether it is a throwaway one."""
        self._sessions_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if conversation_id is None:
            return Path(tempfile.mkdtemp(prefix="call-", dir=self._sessions_dir)), True
        directory = self._sessions_dir / str(conversation_id)
        directory.mkdir(mode=0o700, exist_ok=True)
        return directory, False

    async def complete(
        self, request: ModelRequest, *, sink: TextSink | None = None
    ) -> ModelResponse:
        model = request.model or self._default_model
        argv = self.argv(model)
        cwd, throwaway = self.workdir(request.conversation_id)
        marker = cwd / ANSWERED_MARKER
        stdin = render_conversation(request, new_only=self._new_only and marker.exists())
        began = time.monotonic()
        try:
            code, stdout, stderr = await self._run(argv, cwd, stdin)
            if code == 0 and not throwaway:
                marker.touch(mode=0o600)
        finally:
            if throwaway:
                shutil.rmtree(cwd, ignore_errors=True)
        duration_ms = int((time.monotonic() - began) * 1000)
        raw = json.dumps(
            {
                "command": argv,
                "cwd": str(cwd),
                "account": self._account,
                "exit_status": code,
                "duration_ms": duration_ms,
                "stdout": stdout,
                "stderr": stderr,
            },
            ensure_ascii=False,
        )
        if stderr.strip():
            log.info("cli.stderr", provider=self.name, account=self._account, stderr=_tail(stderr))
        if code != 0:
            raise self._failure(argv, code, duration_ms, stdout, stderr)
        return ModelResponse(
            text=stdout.strip(),
            raw=raw,
            model=model,
            account=self._account,
            stop_reason="end_turn",
        )

    async def check(self) -> str:
        program = self._command[0]
        found = shutil.which(program, path=self._child_env().get("PATH"))
        if found is None:
            raise ProviderError(
                f"{self.name}: the command {program} was not found on PATH.",
                retryable=False,
                public=f"{self.name}: the command {program} was not found",
            )
        return f"runs {program} ({found})"

    async def _run(self, argv: list[str], cwd: Path, stdin: str) -> tuple[int, str, str]:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=self._child_env(),
                # A group of its own: at the deadline the whole group goes, children included.
                start_new_session=True,
            )
        except OSError as exc:
            raise ProviderError(
                f"{self.name} ({self._account}): cannot run {' '.join(argv)}: {exc}",
                retryable=not isinstance(exc, FileNotFoundError),
                public=f"{self.name}: the command {argv[0]} could not be started",
            ) from exc
        try:
            out, err = await process.communicate(stdin.encode("utf-8"))
        except BaseException:
            # The call's or the run's deadline (a cancellation), or the turn was stopped.
            log.warning(
                "cli.stopped",
                provider=self.name,
                account=self._account,
                command=argv,
                pid=process.pid,
            )
            await _end_group(process)
            raise
        assert process.returncode is not None
        return (
            process.returncode,
            out.decode("utf-8", errors="replace"),
            err.decode("utf-8", errors="replace"),
        )

    def _child_env(self) -> dict[str, str]:
        base = self._environ if self._environ is not None else os.environ
        env = {k: v for k, v in base.items() if not k.startswith("POSTROOM_")}
        return env | self._env

    def _failure(
        self, argv: list[str], code: int, duration_ms: int, stdout: str, stderr: str
    ) -> ProviderError:
        detail = (
            f"{self.name} ({self._account}): {' '.join(argv)} exited with status {code} after "
            f"{duration_ms} ms; stderr: {_tail(stderr) or '(empty)'}; "
            f"stdout: {_tail(stdout) or '(empty)'}"
        )
        if self._pattern.search(stdout) or self._pattern.search(stderr):
            return RateLimited(detail, public=f"{self.name} is rate-limited")
        return ProviderError(detail, public=f"{self.name}'s command exited with status {code}")


async def _end_group(process: asyncio.subprocess.Process) -> None:
    """SIGTERM to the command's process group, SIGKILL if it is still there after a grace."""
    for sig, grace_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        if grace_s is None:
            break
        # Even when the leader is gone by then, what it started in the group gets SIGKILL.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), grace_s)
    with contextlib.suppress(Exception):
        await process.wait()


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= EXCERPT_CHARS else "…" + text[-EXCERPT_CHARS:]
