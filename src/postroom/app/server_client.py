"""Finding and asking a running ``postroom serve`` (adapter states, account cooldowns), for CLI
commands that otherwise work on the data directory alone.

While ``serve`` runs it records its pid, host and port in ``DIR/serve.json`` (INTERFACES §1),
readable by its owner only, and removes the file when it stops. The commands that talk to the
server read it, so they find a server started with ``serve --port`` or ``--host``; a file left
by a process that died (its pid is gone) is ignored.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postroom.config import Config
from postroom.engine.files import replace_file

__all__ = [
    "SERVE_FILE",
    "RunningServer",
    "ServerUnavailable",
    "configured_url",
    "get_json",
    "is_healthy",
    "remove_serve_file",
    "running_server",
    "server_base",
    "server_url",
    "write_serve_file",
]

SERVE_FILE = "serve.json"


class ServerUnavailable(Exception):
    """The server did not answer (not running, or refused the token)."""


@dataclass(frozen=True, slots=True)
class RunningServer:
    """What ``DIR/serve.json`` says about the server running on the data directory."""

    pid: int
    host: str
    port: int

    @property
    def url(self) -> str:
        return server_url(self.host, self.port)


def server_url(host: str, port: int) -> str:
    """The address to reach a server bound to *host*: a wildcard bind is reached on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}"
    return f"http://[{host}]:{port}" if literal.version == 6 else f"http://{host}:{port}"


def configured_url(config: Config) -> str:
    """Where the configured server listens, as seen from this machine."""
    return server_url(config.server.host, config.server.port)


def write_serve_file(data_dir: Path, host: str, port: int) -> Path:
    """Record this process as the data directory's server (atomically, mode 0600)."""
    path = data_dir / SERVE_FILE
    replace_file(path, json.dumps({"pid": os.getpid(), "host": host, "port": port}) + "\n")
    return path


def remove_serve_file(data_dir: Path) -> None:
    """Remove ``serve.json`` if it still names this process (never another server's)."""
    found = _read(data_dir / SERVE_FILE)
    if found is not None and found.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (data_dir / SERVE_FILE).unlink()


def running_server(data_dir: Path) -> RunningServer | None:
    """The server ``serve.json`` names, if that process is alive."""
    found = _read(data_dir / SERVE_FILE)
    if found is None or not _alive(found.pid):
        return None
    return found


def server_base(data_dir: Path, config: Config) -> str:
    """Where to reach this data directory's server: the running one, else the configured
    address (where ``postroom serve`` would listen)."""
    found = running_server(data_dir)
    return found.url if found is not None else configured_url(config)


def is_healthy(base_url: str, *, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/healthz", timeout=timeout_s) as response:
            json.loads(response.read() or b"{}")
    except (OSError, ValueError):
        return False
    return True


def get_json(base_url: str, token: str, path: str, *, timeout_s: float = 2.0) -> Any:
    """``GET`` an API path with the bearer token; the decoded JSON body."""
    request = urllib.request.Request(
        f"{base_url}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise ServerUnavailable(f"the server answered HTTP {exc.code} to {path}") from exc
    except (OSError, ValueError) as exc:
        raise ServerUnavailable(f"no answer from {base_url}") from exc


def _read(path: Path) -> RunningServer | None:
    try:
        data = json.loads(path.read_text("utf-8"))
        pid, host, port = data["pid"], data["host"], data["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(pid, int) and isinstance(host, str) and isinstance(port, int)):
        return None
    return RunningServer(pid, host, port)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, but another user's
    return True
