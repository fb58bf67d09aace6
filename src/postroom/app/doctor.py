"""``postroom doctor``: checks the configuration, the database, the route table, the providers
(one cheap call per account), the channel adapters (one cheap call each) and the server, and
says what to fix."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postroom.app.channels import build_channels
from postroom.app.detect import ECHO_HINT
from postroom.app.providers import build_providers, close_providers
from postroom.app.server_client import ServerUnavailable, configured_url, get_json, is_healthy
from postroom.config import CONFIG_FILE, DATABASE_FILE, Config
from postroom.core.errors import PostroomError
from postroom.core.folders import effective_settings
from postroom.core.target import parse_target
from postroom.engine.catalog import Catalog
from postroom.engine.clock import system_clock
from postroom.engine.folders import FileProblem, FolderService
from postroom.llm.accounts import AccountPool
from postroom.store.sqlite import SqliteStore
from postroom.store.sqlite.migrate import available_migrations

__all__ = ["Check", "run_doctor"]

PROVIDER_TIMEOUT_S = 20.0
CHANNEL_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    #: Only a warning: worth knowing, nothing is broken.
    warning: bool = False

    def to_dict(self) -> dict[str, Any]:
        status = "ok" if self.ok else ("warning" if self.warning else "error")
        return {"check": self.name, "status": status, "detail": self.detail}


async def run_doctor(data_dir: Path, config: Config) -> list[Check]:
    checks = [Check("config", True, f"{data_dir / CONFIG_FILE} is valid")]
    database = data_dir / DATABASE_FILE
    if not database.exists():
        checks.append(Check("database", False, f"no {DATABASE_FILE}: run postroom init"))
        return checks
    try:
        store = await SqliteStore.open(database)
    except PostroomError as exc:
        checks.append(Check("database", False, str(exc)))
        return checks
    try:
        async with store.read() as tx:
            routes = await tx.list_routes()
            folders = {f.path: f for f in await tx.list_folders()}
        agent_files = await FolderService(
            store=store,
            catalog=Catalog(),
            clock=system_clock,
            folders_dir=data_dir / "folders",
            providers=config.provider_names(),
        ).file_problems()
    finally:
        await store.close()
    version = len(available_migrations())
    checks.append(Check("database", True, f"{database} (schema {version}), {len(folders)} folders"))
    checks.append(_routes_check(routes, folders))
    checks.append(_agent_files_check(agent_files))
    checks.append(_bind_check(config))
    checks.extend(await _provider_checks(config, folders))
    checks.extend(await _channel_checks(config))
    checks.append(_server_check(config))
    return checks


def _routes_check(routes: list[Any], folders: dict[str, Any]) -> Check:
    if not routes:
        return Check(
            "routes",
            False,
            "the route table is empty: nothing is answered (postroom routes add --seq 9999 "
            '--match "" --target main)',
        )
    missing = []
    for route in routes:
        target = parse_target(route.target)
        folder = target.template_parent if target.is_template else target.folder
        if folder and folder not in folders:
            missing.append(f"route {route.id} → {route.target}")
    if missing:
        return Check("routes", False, "targets that no longer exist: " + ", ".join(missing))
    return Check("routes", True, f"{len(routes)} routes, every target exists")


def _agent_files_check(problems: list[FileProblem]) -> Check:
    invalid = [p for p in problems if not p.pending]
    if invalid:
        return Check("agent files", False, " ".join(p.detail for p in invalid))
    if problems:
        return Check("agent files", False, " ".join(p.detail for p in problems), warning=True)
    return Check("agent files", True, "every AGENT.md agrees with its folder")


def _bind_check(config: Config) -> Check:
    host = config.server.host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not config.api.token:
        if loopback:
            return Check(
                "api",
                False,
                "no API token: the API is open to anyone on this machine "
                f"(set [api] token in {CONFIG_FILE})",
                warning=True,
            )
        return Check("api", False, f"serving {host} without an API token is refused")
    return Check("api", True, f"token set; listening on {host}:{config.server.port}")


async def _provider_checks(config: Config, folders: dict[str, Any]) -> list[Check]:
    defaults = config.folder_defaults()
    used = {effective_settings(path, folders, defaults).provider for path in folders}
    used.add(config.defaults.provider)
    try:
        providers = build_providers(config, clock=system_clock)
    except PostroomError as exc:
        return [Check("providers", False, str(exc))]
    try:
        return await _check_providers(config, providers, used)
    finally:
        await close_providers(providers)


async def _check_providers(
    config: Config, providers: dict[str, Any], used: set[str]
) -> list[Check]:
    checks: list[Check] = []
    for name in sorted(used):
        provider = providers.get(name)
        if name == "echo":
            checks.append(Check("provider echo", True, "echo answers with what it was sent"))
            if config.defaults.provider == "echo":
                checks.append(Check("model", False, ECHO_HINT, warning=True))
            continue
        if provider is None:
            hint = _missing_hint(name)
            checks.append(Check(f"provider {name}", False, f"not configured: {hint}"))
            continue
        accounts = provider.accounts() if isinstance(provider, AccountPool) else [(name, provider)]
        for label, account in accounts:
            try:
                async with asyncio.timeout(PROVIDER_TIMEOUT_S):
                    detail = await account.check()
                checks.append(Check(f"provider {label}", True, detail))
            except TimeoutError:
                checks.append(
                    Check(f"provider {label}", False, f"no answer in {PROVIDER_TIMEOUT_S:g} s")
                )
            except PostroomError as exc:
                checks.append(Check(f"provider {label}", False, str(exc)))
    return checks


def _missing_hint(name: str) -> str:
    variables = {
        "anthropic": "set ANTHROPIC_API_KEY",
        "openai": "set OPENAI_API_KEY",
        "gemini": "set GEMINI_API_KEY",
    }
    return variables.get(
        name, f"add [providers.{name}] with api_keys (and kind, for a custom name)"
    )


def _server_check(config: Config) -> Check:
    url = configured_url(config)
    if not is_healthy(config):
        return Check("server", False, f"postroom serve is not running at {url}", warning=True)
    cooldowns = _cooldowns(config)
    detail = f"running at {url}"
    if cooldowns:
        detail += "; rate-limited accounts: " + ", ".join(cooldowns)
    return Check("server", True, detail)


def _cooldowns(config: Config) -> list[str]:
    try:
        payload = get_json(config, "/api/v1/providers")
    except ServerUnavailable:
        return []
    out = []
    for provider in payload.get("providers", []):
        for account in provider.get("accounts", []):
            if account.get("limited_until"):
                out.append(f"{account['label']} until {account['limited_until']}")
    return out


async def _channel_checks(config: Config) -> list[Check]:
    """One cheap call per enabled adapter, proving its credentials (nothing is started)."""
    try:
        channels = build_channels(config)
    except PostroomError as exc:
        return [Check("channels", False, str(exc))]
    checks = []
    for channel in channels:
        name = f"channel {channel.name}"
        try:
            async with asyncio.timeout(CHANNEL_TIMEOUT_S):
                checks.append(Check(name, True, await channel.check()))
        except TimeoutError:
            checks.append(Check(name, False, f"no answer in {CHANNEL_TIMEOUT_S:g} s"))
        except Exception as exc:  # an adapter's SDK may raise anything: report, never crash
            checks.append(Check(name, False, str(exc) or type(exc).__name__))
        finally:
            with contextlib.suppress(Exception):
                await channel.stop()
    return checks
