"""Asking a running ``postroom serve`` what only it knows (adapter states, account cooldowns),
for CLI commands that otherwise work on the data directory alone."""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.request
from typing import Any

from postroom.config import Config

__all__ = ["ServerUnavailable", "configured_url", "get_json", "is_healthy", "server_url"]


class ServerUnavailable(Exception):
    """The server did not answer (not running, or refused the token)."""


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


def is_healthy(config: Config, *, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{configured_url(config)}/healthz", timeout=timeout_s) as r:
            json.loads(r.read() or b"{}")
    except (OSError, ValueError):
        return False
    return True


def get_json(config: Config, path: str, *, timeout_s: float = 2.0) -> Any:
    """``GET`` an API path with the configured bearer token; the decoded JSON body."""
    request = urllib.request.Request(
        f"{configured_url(config)}{path}", headers={"Authorization": f"Bearer {config.api.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise ServerUnavailable(f"the server answered HTTP {exc.code} to {path}") from exc
    except (OSError, ValueError) as exc:
        raise ServerUnavailable(f"no answer from {configured_url(config)}") from exc
