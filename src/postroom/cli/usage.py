"""Usage mistakes (a missing option, ``routes rm abc``, a typo in a command) end like every
other user mistake (INTERFACES §2): one sentence of our own on stderr and exit status 1 — not
Typer's usage box, its library wording and exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from rich.text import Text

# Typer vendors its own copy of click; the exception classes it raises live here.
from typer import Abort
from typer._click.exceptions import (
    BadOptionUsage,
    BadParameter,
    ClickException,
    MissingParameter,
    NoArgsIsHelpError,
    NoSuchOption,
    UsageError,
)
from typer.core import TyperGroup

from postroom.cli.common import stderr, stdout

__all__ = ["PostroomGroup", "usage_sentence"]

_RULES = {
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be less than {}"),
}


class PostroomGroup(TyperGroup):
    """The root command: runs the command line and turns a usage mistake into a sentence."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(
                args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:  # ``postroom routes``: the help, not an error
            stdout.print(Text(exc.format_message()))
            sys.exit(0)
        except (UsageError, ClickException) as exc:
            stderr.print(Text("error: ", style="bold red") + Text(usage_sentence(exc)))
            sys.exit(1)
        except Abort:
            stderr.print(Text("error: ", style="bold red") + Text("interrupted."))
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def usage_sentence(exc: ClickException) -> str:
    """One sentence saying what was wrong with the command line and how to put it right."""
    ctx = getattr(exc, "ctx", None)
    command = _command(ctx)
    if isinstance(exc, MissingParameter) and exc.param is not None:
        return f"{command} needs {_name(exc.param)}; see {command} --help."
    if isinstance(exc, BadParameter) and exc.param is not None:
        return f"{command}: {_name(exc.param)} {_rule(exc)}."
    if isinstance(exc, NoSuchOption):
        hint = (
            f"; did you mean {' or '.join(sorted(exc.possibilities))}?" if exc.possibilities else ""
        )
        return f"{command} has no option {exc.option_name}{hint or f'; see {command} --help.'}"
    if isinstance(exc, BadOptionUsage):
        return f"{command}: the option {exc.option_name} needs a value."
    message = str(exc.format_message()).strip()
    if message.startswith("No such command") and ctx is not None:
        wrong = message.removeprefix("No such command").strip(" '.")
        known = ", ".join(ctx.command.list_commands(ctx))
        return f"{command} has no command {wrong!r}; the commands are {known}."
    if message.startswith("Got unexpected extra argument"):
        extra = message.rpartition("(")[2].rstrip(")")
        return f"{command} does not take {extra!r}; see {command} --help."
    return message if message.endswith(".") else f"{message}."


def _command(ctx: Any) -> str:
    """``postroom routes rm`` however the program was started (``python -m``, a test)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    return " ".join(["postroom", *reversed(names)])


def _name(param: Any) -> str:
    opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
    if opts and getattr(param, "param_type_name", "") == "option":
        return str(opts[0])
    return str(param.name or "the argument").upper()


def _rule(exc: BadParameter) -> str:
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and cause.errors():
        error = cause.errors()[0]
        kind = str(error.get("type", ""))
        shown = error.get("input")
        given = f", not {shown!r}" if shown is not None else ""
        if kind in _RULES:
            return _RULES[kind] + given
        if kind in _BOUNDS:
            key, template = _BOUNDS[kind]
            bound = (error.get("ctx") or {}).get(key)
            shown_bound = f"{bound:g}" if isinstance(bound, float) else str(bound)
            return template.format(shown_bound) + given
        if kind in ("enum", "literal_error"):
            expected = (error.get("ctx") or {}).get("expected", "")
            return f"must be one of {expected}{given}"
        message = str(error.get("msg", "is not valid"))
        return message[:1].lower() + message[1:].rstrip(".") + given
    return str(exc.format_message()).rstrip(".")
