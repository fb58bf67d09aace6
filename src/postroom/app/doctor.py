"""``postroom doctor``: checks the configuration, the database, the route table and the folders'
``AGENT.md`` files, then — all at once, each with its own deadline — the providers (one cheap
call per account), the channel adapters (one cheap call each) and the running server, and says
what to fix. Each result is reported as soon as it is known, so an unreachable provider costs
one deadline, not one per account in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postroom.app.channels import build_channels
from postroom.app.detect import ECHO_HINT
from postroom.app.providers import KEYLESS, SESSIONS_DIR, build_provider, close_providers
from postroom.app.server_client import (
    SERVE_FILE,
    ServerUnavailable,
    get_json,
    is_healthy,
    running_server,
)
from postroom.channels.base import BaseChannel
from postroom.config import CONFIG_FILE, DATABASE_FILE, Config, ProviderConfig
from postroom.core.errors import PostroomError
from postroom.core.folders import Folder, effective_settings
from postroom.core.target import parse_target
from postroom.engine.catalog import Catalog
from postroom.engine.clock import system_clock
from postroom.engine.folders import FileProblem, FolderService
from postroom.engine.skills import SkillProblem, SkillService
from postroom.llm.accounts import AccountPool
from postroom.llm.base import Provider
from postroom.llm.local import install_hint
from postroom.store.database import open_database
from postroom.store.records import RouteRecord
from postroom.store.sqlite.migrate import available_migrations

__all__ = ["Check", "run_doctor"]

#: How long a provider or channel check may take, by default.
CHECK_TIMEOUT_S = 10.0
SERVER_TIMEOUT_S = 3.0

Report = Callable[["Check"], None]


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


def _ignore(_: Check) -> None:
    return None


async def run_doctor(
    data_dir: Path,
    config: Config,
    *,
    report: Report = _ignore,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> list[Check]:
    """Every check, in a fixed order; *report* is called with each as soon as it is known.
    A provider or channel that has not answered within *timeout_s* fails its check."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        report(check)

    add(Check("config", True, f"{data_dir / CONFIG_FILE} is valid"))
    database = data_dir / DATABASE_FILE
    if not config.database.url and not database.exists():
        add(Check("database", False, f"no {DATABASE_FILE}: run postroom init"))
        return checks
    try:
        store = await open_database(config.database.url, database)
    except PostroomError as exc:
        add(Check("database", False, str(exc)))
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
        skill_files = await SkillService(
            store=store, clock=system_clock, folders_dir=data_dir / "folders"
        ).file_problems()
    finally:
        await store.close()
    if config.database.url:
        # Only a PostgreSQL deployment loads its driver (see store.database).
        from postroom.store.postgres.migrate import available_pg_migrations

        where = f"PostgreSQL (schema {len(available_pg_migrations())})"
    else:
        where = f"{database} (schema {len(available_migrations())})"
    add(Check("database", True, f"{where}, {len(folders)} folders"))
    add(_routes_check(routes, folders))
    add(_agent_files_check(agent_files, skill_files))
    add(_bind_check(config))
    checks.extend(await _remote_checks(data_dir, config, folders, report, timeout_s))
    return checks


# -- what the data directory says -------------------------------------------------------------
def _routes_check(routes: list[RouteRecord], folders: Mapping[str, Folder]) -> Check:
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


def _agent_files_check(problems: list[FileProblem], skills: list[SkillProblem]) -> Check:
    invalid = [p.detail for p in problems if not p.pending] + [p.detail for p in skills]
    if invalid:
        return Check("agent files", False, " ".join(invalid))
    if problems:
        return Check("agent files", False, " ".join(p.detail for p in problems), warning=True)
    return Check("agent files", True, "every AGENT.md and skill file agrees with its folder")


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
    return Check("api", True, f"token set; configured to listen on {host}:{config.server.port}")


# -- what answers over the network: all at once --------------------------------------------------
async def _remote_checks(
    data_dir: Path,
    config: Config,
    folders: Mapping[str, Folder],
    report: Report,
    timeout_s: float,
) -> list[Check]:
    """Providers, channels and the server, concurrently; results in a fixed order."""
    providers, probes = _provider_probes(config, folders, timeout_s, data_dir)
    channels, channel_probes = _channel_probes(config, timeout_s)
    probes.extend(channel_probes)

    async def server() -> Check:
        return await asyncio.to_thread(_server_check, data_dir, config)

    probes.append(_Probe("server", server, SERVER_TIMEOUT_S * 2))
    try:
        return await _run_all(probes, report)
    finally:
        await close_providers(providers)
        for channel in channels:
            with contextlib.suppress(Exception):  # stopping is best-effort: nothing was started
                await channel.stop()


@dataclass(frozen=True, slots=True)
class _Probe:
    """One check that waits on something outside this process, with its deadline."""

    name: str
    run: Callable[[], Awaitable[Check | list[Check]]]
    timeout_s: float


async def _run_all(probes: list[_Probe], report: Report) -> list[Check]:
    async def one(probe: _Probe) -> list[Check]:
        try:
            async with asyncio.timeout(probe.timeout_s):
                result = await probe.run()
        except TimeoutError:
            result = Check(probe.name, False, f"no answer in {probe.timeout_s:g} s")
        except PostroomError as exc:
            result = Check(probe.name, False, str(exc))
        except Exception as exc:  # an SDK may raise anything: report it, never crash
            result = Check(probe.name, False, str(exc) or type(exc).__name__)
        found = result if isinstance(result, list) else [result]
        for check in found:
            report(check)
        return found

    tasks = [asyncio.create_task(one(p), name=f"doctor-{p.name}") for p in probes]
    try:
        results = await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return [check for found in results for check in found]


def _provider_probes(
    config: Config, folders: Mapping[str, Folder], timeout_s: float, data_dir: Path
) -> tuple[dict[str, Provider], list[_Probe]]:
    defaults = config.folder_defaults()
    used = {effective_settings(path, folders, defaults).provider for path in folders}
    used.add(config.defaults.provider)
    providers: dict[str, Provider] = {}
    probes: list[_Probe] = []
    for name in sorted(used):
        if name == "echo":
            probes.append(_Probe("provider echo", _done(_echo_check(config)), 1.0))
            continue
        section = config.providers.get(name)
        if section is None and name in KEYLESS:
            section = ProviderConfig()  # built without a section when used (no key to give)
        try:
            provider = (
                build_provider(
                    name,
                    section,
                    clock=system_clock,
                    max_rest_s=config.llm.max_rest_s,
                    sessions_dir=data_dir / SESSIONS_DIR,
                )
                if section
                else None
            )
        except PostroomError as exc:
            check = Check(f"provider {name}", False, str(exc))
            probes.append(_Probe(check.name, _done(check), 1.0))
            continue
        if provider is None:
            check = Check(f"provider {name}", False, f"not configured: {_missing_hint(name)}")
            probes.append(_Probe(check.name, _done(check), 1.0))
            continue
        providers[name] = provider
        accounts = provider.accounts() if isinstance(provider, AccountPool) else [(name, provider)]
        for label, account in accounts:
            probes.append(_Probe(f"provider {label}", _account_check(label, account), timeout_s))
    return providers, probes


def _echo_check(config: Config) -> list[Check]:
    checks = [Check("provider echo", True, "echo answers with what it was sent")]
    if config.defaults.provider == "echo":
        checks.append(Check("model", False, ECHO_HINT, warning=True))
    return checks


def _account_check(label: str, account: Provider) -> Callable[[], Awaitable[Check]]:
    async def run() -> Check:
        return Check(f"provider {label}", True, await account.check())

    return run


def _done(result: Check | list[Check]) -> Callable[[], Awaitable[Check | list[Check]]]:
    async def run() -> Check | list[Check]:
        return result

    return run


def _missing_hint(name: str) -> str:
    variables = {
        "anthropic": "set ANTHROPIC_API_KEY (or [providers.anthropic] api_keys)",
        "openai": "set OPENAI_API_KEY (or [providers.openai] api_keys)",
        "gemini": "set GEMINI_API_KEY (or [providers.gemini] api_keys)",
    }
    if name == "local":
        return f"it needs no key; {install_hint()}"
    if name == "ollama":
        return "it needs no key: run Ollama here, or set OLLAMA_HOST or [providers.ollama] base_url"
    return variables.get(
        name,
        f"add [providers.{name}] with kind (openai for an OpenAI-compatible server), base_url "
        "and, when the server needs them, api_keys",
    )


def _channel_probes(config: Config, timeout_s: float) -> tuple[list[BaseChannel], list[_Probe]]:
    """One cheap call per enabled adapter, proving its credentials (nothing is started)."""
    try:
        channels = build_channels(config)
    except PostroomError as exc:
        return [], [_Probe("channels", _done(Check("channels", False, str(exc))), 1.0)]
    probes = []
    for channel in channels:
        name = f"channel {channel.name}"
        probes.append(_Probe(name, _channel_check(name, channel), timeout_s))
    return channels, probes


def _channel_check(name: str, channel: BaseChannel) -> Callable[[], Awaitable[Check]]:
    async def run() -> Check:
        return Check(name, True, await channel.check())

    return run


def _server_check(data_dir: Path, config: Config) -> Check:
    server = running_server(data_dir)
    if server is None:
        return Check(
            "server",
            False,
            f"postroom serve is not running on {data_dir} (no live server in {SERVE_FILE})",
            warning=True,
        )
    if not is_healthy(server.url):
        return Check(
            "server", False, f"postroom serve (pid {server.pid}) does not answer at {server.url}"
        )
    cooldowns = _cooldowns(server.url, config.api.token)
    detail = f"running at {server.url} (pid {server.pid})"
    if cooldowns:
        detail += "; rate-limited accounts: " + ", ".join(cooldowns)
    return Check("server", True, detail)


def _cooldowns(url: str, token: str) -> list[str]:
    try:
        payload = get_json(url, token, "/api/v1/providers")
    except ServerUnavailable:
        return []
    out = []
    for provider in payload.get("providers", []):
        for account in provider.get("accounts", []):
            if account.get("limited_until"):
                out.append(f"{account['label']} until {account['limited_until']}")
    return out
