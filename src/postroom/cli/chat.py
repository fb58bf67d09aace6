"""``postroom chat``: the terminal UI, on a running ``postroom serve``.

Before the screen switches to the UI, one plain HTTP request checks that the server answers,
takes the token and knows the folder, so each of those mistakes ends as one sentence on stderr
instead of a full-screen error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from postroom.app.server_client import server_base, server_url
from postroom.cli.common import config_path, context, fail, run, user_errors
from postroom.core.errors import PostroomError

if TYPE_CHECKING:
    from postroom.tui import PostroomTUI

__all__ = ["chat", "exit_status", "probe", "server_url"]

PROBE_TIMEOUT_S = 5.0


def _http_url(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.netloc:
        raise PostroomError(f"{url} is not an http:// or ws:// address of a postroom server.")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


async def probe(url: str, token: str, *, where: str = "[api] token") -> list[str]:
    """The server's folders; a PostroomError saying what is wrong when it cannot be used."""
    import httpx  # here, not at module level: every CLI command imports this module

    base = _http_url(url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        # trust_env=False: a proxy from the environment must not stand between us and a
        # server on this machine.
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            response = await client.get(f"{base}/api/v1/folders", headers=headers)
    except httpx.TimeoutException:
        raise PostroomError(
            f"The postroom server at {base} did not answer within {PROBE_TIMEOUT_S:g} s; "
            "is `postroom serve` running there?"
        ) from None
    except httpx.TransportError:
        raise PostroomError(
            f"Cannot reach a postroom server at {base}; start one with `postroom serve` "
            "or pass --url."
        ) from None
    if response.status_code == 401:
        raise PostroomError(f"The server at {base} refused the API token; check {where}.")
    try:
        folders = response.json()["folders"]
        paths = [str(f["path"]) for f in folders]
    except (ValueError, KeyError, TypeError):
        paths = None
    if response.status_code != 200 or paths is None:
        raise PostroomError(
            f"The server at {base} answered HTTP {response.status_code} for its folder list; "
            "is it a postroom server?"
        )
    return paths


def chat(
    ctx: typer.Context,
    folder: Annotated[
        str, typer.Option("--folder", help="The folder to open (its operator chat is tui:F).")
    ] = "main",
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The server's address (default: the server running on the data directory, "
            "found in DIR/serve.json; else http://server.host:server.port).",
        ),
    ] = None,
) -> None:
    """Open the terminal UI on a running server: a folder's conversations across every chat,
    live, and an operator chat to it (steering commands work). Ctrl+O switches folders,
    Ctrl+C quits."""
    cli = context(ctx)
    with user_errors():
        config = cli.config()
        base = url or server_base(cli.data_dir, config)
        token = config.api.token
        where = f"[api] token in {config_path(cli)} or POSTROOM_API_TOKEN"
    folders = run(lambda: probe(base, token, where=where))
    if folder not in folders:
        fail(f"There is no folder {folder} on the server; the folders are {', '.join(folders)}.")
    try:
        # Textual is imported only here: the other commands start without it, and a machine
        # without it can still run everything else.
        from postroom.tui import PostroomTUI
    except ModuleNotFoundError as exc:  # pragma: no cover - textual is installed here
        if (exc.name or "").partition(".")[0] != "textual":
            raise
        fail("The terminal UI needs the textual package: pip install textual.")
    tui = PostroomTUI(base, token, folder)
    tui.run()
    exit_status(tui)


def exit_status(tui: PostroomTUI) -> None:
    """After the UI closed: a refusal it showed (token or folder) also ends the command with
    that sentence on stderr and exit 1, so a script sees the failure too."""
    from postroom.tui import LinkState

    if tui.link.state is LinkState.REFUSED:
        fail(tui.link.detail)
