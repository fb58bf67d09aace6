"""Configuration (INTERFACES §1): ``postroom.toml``, ``POSTROOM_<A>__<B>`` variables, defaults.

Settings resolve: CLI flag > environment > file > defaults. Unknown keys are an error that
names the key, wherever they come from. Durations are written ``90s``, ``30m``, ``2h`` or ``0``
and held in seconds; inside the code their names carry the unit (``engagement_ttl_s``) while the
public keys keep their documented names. Only the entry point reads the environment: it passes
``os.environ`` to :func:`load_config`.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from postroom.core.access import AccessPolicy, DmPolicy, GroupPolicy
from postroom.core.bounds import MAX_DURATION_S, check_count
from postroom.core.durations import format_duration, parse_duration
from postroom.core.errors import ConfigError
from postroom.core.folder_settings import BUILTIN_PROVIDERS
from postroom.core.folders import BusyPolicy, FolderDefaults, Session
from postroom.core.trigger import DEFAULT_ALIASES, DEFAULT_ASSISTANT_NAME, Trigger

__all__ = [
    "CONFIG_FILE",
    "DATABASE_FILE",
    "Config",
    "initial_config_text",
    "load_config",
]

CONFIG_FILE = "postroom.toml"
DATABASE_FILE = "postroom.db"
ENV_PREFIX = "POSTROOM_"
#: Variables of the POSTROOM_ prefix that are not of the <A>__<B> form but still mean something.
SPECIAL_VARIABLES = {"POSTROOM_DATA", "POSTROOM_API_TOKEN"}
#: The keys of each ``[channels.<name>]`` section, so a typo is refused when the configuration
#: is read, before any adapter (and its SDK) is imported. Each adapter's own model validates the
#: values when it starts; a test keeps these lists equal to those models' keys.
CHANNEL_KEYS: Mapping[str, frozenset[str]] = {
    "telegram": frozenset(
        {"token", "base_url", "mode", "webhook_url", "webhook_secret", "poll_timeout"}
        | {"allowed_updates"}
    ),
    "discord": frozenset(
        {"token", "base_url", "gateway_url", "message_content", "ignore_bots", "send_timeout"}
    ),
    "slack": frozenset(
        {"bot_token", "app_token", "signing_secret", "mode", "base_url", "reply_in_thread"}
        | {"max_body_bytes"}
    ),
    "whatsapp": frozenset(
        {"access_token", "phone_number_id", "app_secret", "verify_token", "api_version"}
        | {"base_url", "webhook_path", "max_body_bytes", "send_timeout_s", "media_timeout_s"}
    ),
    "email": frozenset(
        {"address", "username", "password", "imap_host", "imap_port", "imap_ssl", "imap_idle"}
        | {"smtp_host", "smtp_port", "smtp_starttls", "folder", "allowed_senders"}
        | {"poll_interval", "poll_interval_s"}
    ),
    "matrix": frozenset(
        {"homeserver", "user_id", "access_token", "password", "device_id", "device_name"}
        | {"sync_timeout", "allowed_inviters"}
    ),
    "mastodon": frozenset({"base_url", "access_token", "poll_interval_s", "catch_up_s"}),
    "hook": frozenset({"secret", "max_body_bytes"}),
    "web": frozenset(),
    "tui": frozenset(),
}
#: ``[channels.http.<platform>]``: an outbound webhook per platform.
HTTP_PLATFORM_KEYS = frozenset({"outbound_url", "secret"})
KNOWN_CHANNELS = (*CHANNEL_KEYS, "http")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Durations and counts go through the bounds every surface shares (INTERFACES §1 Bounds).
Duration = Annotated[float, BeforeValidator(parse_duration)]
Count = Annotated[int, AfterValidator(check_count)]
#: A count where 0 means "none" (an empty window, no delegation).
Size = Annotated[int, AfterValidator(functools.partial(check_count, minimum=0))]


def _positive(seconds: float) -> float:
    if seconds <= 0:
        limit = format_duration(MAX_DURATION_S)
        raise ValueError(f"must be a duration above 0 and at most {limit}")
    return seconds


#: A duration a loop sleeps or a deadline waits: 0 would spin or give up at once.
PositiveDuration = Annotated[Duration, AfterValidator(_positive)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8484, ge=0, le=65535)


class ApiConfig(_Section):
    token: str = ""


class AssistantConfig(_Section):
    name: str = DEFAULT_ASSISTANT_NAME
    aliases: tuple[str, ...] = DEFAULT_ALIASES


class OwnersConfig(_Section):
    senders: tuple[str, ...] = ()


def _jids(values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        platform, colon, room = value.partition(":")
        if not colon or not platform or not room or any(c.isspace() for c in value):
            raise ValueError(f"{value!r} is not a chat JID such as telegram:user/123")
    return values


class AccessConfig(_Section):
    """ROUTING §8: who may talk to the agents."""

    dm_policy: DmPolicy = DmPolicy.PAIRING
    group_policy: GroupPolicy = GroupPolicy.ROUTES
    pairing_ttl_s: PositiveDuration = Field(3600.0, alias="pairing_ttl")
    max_pending: Count = 3
    #: Chats told about each new pairing request.
    notify: Annotated[tuple[str, ...], AfterValidator(_jids)] = ()

    def policy(self) -> AccessPolicy:
        return AccessPolicy(
            dm_policy=self.dm_policy,
            group_policy=self.group_policy,
            pairing_ttl_s=self.pairing_ttl_s,
            max_pending=self.max_pending,
            notify=self.notify,
        )


class DefaultsConfig(_Section):
    provider: str = "echo"
    model: str | None = None
    engagement_ttl_s: Duration = Field(1800.0, alias="engagement_ttl")
    session: Session = Session.PER_CHAT
    busy_policy: BusyPolicy = BusyPolicy.FOLLOWUP


class QueueConfig(_Section):
    max_attempts: Count = 3
    backoff_base_s: Duration = Field(60.0, alias="backoff_base")
    max_concurrent_turns: Count = 8
    lease_s: PositiveDuration = Field(30.0, alias="lease")
    shutdown_grace_s: Duration = Field(30.0, alias="shutdown_grace")
    lease_renew_s: PositiveDuration = Field(10.0, alias="lease_renew")


#: Sends in flight at once: each holds a connection (or a platform's rate budget).
MAX_DELIVERY_CONCURRENCY = 10_000


class DeliveryConfig(_Section):
    ttl_s: Duration = Field(3600.0, alias="ttl")
    backoff_base_s: Duration = Field(2.0, alias="backoff_base")
    concurrency: Annotated[
        int,
        AfterValidator(functools.partial(check_count, maximum=MAX_DELIVERY_CONCURRENCY)),
    ] = 64


class ObserveConfig(_Section):
    window_messages: Size = 20
    window_chars: Size = 8000


class ContextConfig(_Section):
    max_messages: Count = 200
    #: Images of the newest this many user rows reach a vision model (MESSAGES §4).
    max_images: Count = 4
    #: A text file longer than this is inlined up to here.
    max_file_chars: Count = 20000


class SkillsConfig(_Section):
    """How many of a folder's skills a run takes, within how many characters (MESSAGES §4)."""

    max_per_run: Size = 3
    max_chars: Count = 8000


class LimitsConfig(_Section):
    content_bytes: Count = 65536
    body_bytes: Count = 1048576
    image_bytes: Count = 5242880
    #: One attachment that is not an image (a PDF, a text file, a voice note).
    file_bytes: Count = 20971520
    #: PIPELINE §1 item 7: turns non-owners may fire in one chat in any 60 s.
    turns_per_minute: Count = 20


class SchedulerConfig(_Section):
    tick_s: PositiveDuration = Field(10.0, alias="tick")


class LlmConfig(_Section):
    max_model_calls: Count = 5
    #: Each model call, a stream included, ends within this (PIPELINE §4).
    call_timeout_s: PositiveDuration = Field(120.0, alias="call_timeout")
    #: A whole run (every model call and tool of one turn) ends within this.
    run_timeout_s: PositiveDuration = Field(600.0, alias="run_timeout")
    #: The longest an account rests after a rate limit, whatever the API asked.
    max_rest_s: PositiveDuration = Field(3600.0, alias="max_rest")


class DelegationConfig(_Section):
    max_depth: Size = 3


class CompactionConfig(_Section):
    threshold: float = Field(0.75, gt=0, le=1)
    keep_last: Size = 10


class RoutingConfig(_Section):
    missing_folder_notice_s: Duration = Field(3600.0, alias="missing_folder_notice")


class TranscriberConfig(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None


class DatabaseConfig(_Section):
    """PIPELINE §9: a PostgreSQL URL puts every node on one shared database; none keeps the
    embedded SQLite file in the data directory."""

    url: str | None = None

    @field_validator("url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value and not is_database_url(value):
            raise ValueError("must be a postgresql:// URL")
        return value or None


def is_database_url(url: str) -> bool:
    """Whether *url* names a database ``[database] url`` accepts (PostgreSQL's)."""
    return url.startswith(("postgresql://", "postgres://"))


class McpConfig(_Section):
    enabled: bool = True
    #: Host names the server is reached by besides server.host (behind a proxy, or when it
    #: listens on every address): the MCP endpoint's DNS-rebinding protection accepts them.
    allowed_hosts: tuple[str, ...] = ()


class ProviderConfig(_Section):
    base_url: str | None = None
    api_keys: tuple[str, ...] = ()
    #: For providers reached through another's API (an OpenAI-compatible server).
    kind: str | None = None
    #: The model a folder of this provider uses when it names none.
    model: str | None = None
    stream: bool = False
    timeout_s: Duration = Field(120.0, alias="timeout")
    delay_ms: Size = 0
    #: ``kind = "cli"`` (PIPELINE §4): the agent command, ``{model}`` replaced by the model.
    command: tuple[str, ...] | None = None
    #: Environment variables of every run of the command.
    env: dict[str, str] = Field(default_factory=dict)
    #: One set of environment variables per account, rotated on a rate limit.
    accounts: tuple[dict[str, str], ...] = ()
    #: A regex: a failed run whose output matches it was rate-limited.
    rate_limit_pattern: str | None = None
    #: What goes to the command's stdin: the whole ``conversation``, or once it has answered
    #: in the conversation's directory only what is ``new`` since (it keeps the rest itself).
    input: Literal["conversation", "new"] | None = None

    @model_validator(mode="after")
    def _cli_keys(self) -> ProviderConfig:
        cli_keys = [
            key
            for key, value in (
                ("command", self.command),
                ("env", self.env),
                ("accounts", self.accounts),
                ("rate_limit_pattern", self.rate_limit_pattern),
                ("input", self.input),
            )
            if value
        ]
        if cli_keys and self.kind != "cli":
            raise ValueError(f"{', '.join(cli_keys)} apply only to a provider of kind = 'cli'")
        if self.command is not None and (not self.command or not self.command[0].strip()):
            raise ValueError('command must name a program: a list such as ["claude", "--print"]')
        for table in (self.env, *self.accounts):
            for name in table:
                if not _ENV_NAME.fullmatch(name):
                    raise ValueError(f"{name!r} is not an environment variable name")
        if self.rate_limit_pattern is not None:
            try:
                re.compile(self.rate_limit_pattern)
            except re.error as exc:
                raise ValueError(f"rate_limit_pattern is not a valid regex ({exc})") from None
        return self


class ModelConfig(_Section):
    """Overrides of postroom's model table: window and price (USD per million tokens)."""

    #: Unset: the window postroom knows for the model (a conservative one when it knows none).
    context_window: (
        Annotated[int, AfterValidator(functools.partial(check_count, minimum=256))] | None
    ) = None
    #: Whether the model takes images (unset: what postroom knows of it).
    vision: bool | None = None
    input_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    output_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)


class Config(_Section):
    server: ServerConfig = ServerConfig()
    api: ApiConfig = ApiConfig()
    assistant: AssistantConfig = AssistantConfig()
    owners: OwnersConfig = OwnersConfig()
    access: AccessConfig = AccessConfig()
    defaults: DefaultsConfig = DefaultsConfig()
    queue: QueueConfig = QueueConfig()
    delivery: DeliveryConfig = DeliveryConfig()
    observe: ObserveConfig = ObserveConfig()
    context: ContextConfig = ContextConfig()
    skills: SkillsConfig = SkillsConfig()
    limits: LimitsConfig = LimitsConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    llm: LlmConfig = LlmConfig()
    delegation: DelegationConfig = DelegationConfig()
    compaction: CompactionConfig = CompactionConfig()
    routing: RoutingConfig = RoutingConfig()
    transcriber: TranscriberConfig = TranscriberConfig()
    mcp: McpConfig = McpConfig()
    database: DatabaseConfig = DatabaseConfig()
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    #: Per-adapter sections; each adapter validates its own keys when it starts.
    channels: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def trigger(self) -> Trigger:
        return Trigger(self.assistant.name, tuple(self.assistant.aliases))

    def secret_values(self) -> list[str]:
        """Every secret this configuration holds (the API token, provider keys, channel
        tokens and secrets), for the log redactor: none of them may ever reach a log line."""
        found = [self.api.token, self.transcriber.api_key or ""]
        for provider in self.providers.values():
            found.extend(provider.api_keys)
        found.extend(_secret_strings(self.channels))
        return [value for value in found if value]

    def provider_names(self) -> frozenset[str]:
        """The providers a folder may name: the built-in ones and every configured section."""
        return frozenset(BUILTIN_PROVIDERS) | frozenset(self.providers)

    def model_overrides(self) -> dict[str, dict[str, Any]]:
        """``[models."<name>"]``: the keys each section sets (a price set to nothing included:
        that model has no price), for the engine's model table."""
        return {
            name: {
                key: getattr(section, key)
                for key in section.model_fields_set
                if getattr(section, key) is not None or key.endswith("_per_mtok")
            }
            for name, section in self.models.items()
        }

    def folder_defaults(self) -> FolderDefaults:
        return FolderDefaults(
            provider=self.defaults.provider,
            model=self.defaults.model,
            engagement_ttl_s=int(self.defaults.engagement_ttl_s),
            busy_policy=self.defaults.busy_policy,
            session=self.defaults.session,
        )


_VENDOR_KEYS = {
    "ANTHROPIC_API_KEY": ("anthropic", "api_keys"),
    "OPENAI_API_KEY": ("openai", "api_keys"),
    "GEMINI_API_KEY": ("gemini", "api_keys"),
    "OLLAMA_HOST": ("ollama", "base_url"),
}


def load_config(
    data_dir: Path,
    environ: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read ``DIR/postroom.toml`` (if present), then the environment, then *overrides*.

    *overrides* are CLI flags as a nested mapping, e.g. ``{"server": {"port": 9000}}``.
    Raises :class:`ConfigError` naming the offending key.
    """
    path = data_dir / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}.") from exc
    env_keys: dict[tuple[str, ...], str] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or raw == "":
            continue
        if name == "POSTROOM_API_TOKEN":
            _merge(data, ("api", "token"), raw)
            env_keys[("api", "token")] = name
            continue
        if "__" not in name[len(ENV_PREFIX) :]:
            continue  # not configuration (POSTROOM_DATA, POSTROOM_TEST_*...)
        keys = tuple(part.lower() for part in name[len(ENV_PREFIX) :].split("__"))
        if any(not k for k in keys):
            raise ConfigError(f"Environment variable {name} has an empty key part.")
        _merge(data, keys, _env_value(raw))
        env_keys[keys] = name
    for name, (provider, key) in _VENDOR_KEYS.items():
        raw = environ.get(name, "")
        if not raw:
            continue
        section = data.setdefault("providers", {}).setdefault(provider, {})
        if isinstance(section, dict) and not section.get(key):
            section[key] = [raw] if key == "api_keys" else raw
    if overrides:
        for keys, value in _flatten(overrides):
            _merge(data, keys, value)
            # A flag wins over the environment: a bad value is then the flag's.
            env_keys[keys] = "--" + keys[-1].replace("_", "-")
    _check_channels(data.get("channels"), path, env_keys)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, env_keys)) from exc


def _check_channels(channels: Any, path: Path, env_keys: Mapping[tuple[str, ...], str]) -> None:
    """Refuse an unknown channel, or an unknown key inside a channel's section, naming it."""
    if not isinstance(channels, Mapping):
        return  # not a table: the model says so
    for channel, section in channels.items():
        where = ("channels", channel)
        if channel not in KNOWN_CHANNELS:
            raise ConfigError(
                f"Unknown channel [channels.{channel}] in {_source(where, path, env_keys)}; the "
                f"channels are {', '.join(KNOWN_CHANNELS)}."
            )
        if channel != "http":
            allowed = CHANNEL_KEYS[channel] | {"enabled"}
            _check_keys(where, _table(where, section, path, env_keys), allowed, path, env_keys)
            continue
        for platform, webhook in _table(where, section, path, env_keys).items():
            inner = (*where, platform)
            table = _table(inner, webhook, path, env_keys)
            _check_keys(inner, table, HTTP_PLATFORM_KEYS, path, env_keys)


def _table(
    where: tuple[str, ...], section: Any, path: Path, env_keys: Mapping[tuple[str, ...], str]
) -> Mapping[str, Any]:
    if not isinstance(section, Mapping):
        name = "[" + ".".join(where) + "]"
        raise ConfigError(f"{name} in {_source(where, path, env_keys)} must be a table of keys.")
    return section


def _check_keys(
    where: tuple[str, ...],
    section: Mapping[str, Any],
    allowed: frozenset[str],
    path: Path,
    env_keys: Mapping[tuple[str, ...], str],
) -> None:
    for key in section:
        if key not in allowed:
            name = "[" + ".".join(where) + "]"
            raise ConfigError(
                f"Unknown key {key!r} in {name} in {_source((*where, key), path, env_keys)}; the "
                f"keys are {', '.join(sorted(allowed))}."
            )


def _source(loc: tuple[str, ...], path: Path, env_keys: Mapping[tuple[str, ...], str]) -> str:
    """Where a key was written: the environment variable that set it, or the file."""
    variable = next(
        (
            name
            for keys, name in env_keys.items()
            if keys[: len(loc)] == loc or loc[: len(keys)] == keys
        ),
        None,
    )
    if variable is None:
        return str(path)
    if variable.startswith("--"):
        return f"the command-line flag {variable}"
    return f"environment variable {variable}"


def _env_value(raw: str) -> Any:
    """List and table values arrive as JSON; anything else stays text for the model to read."""
    text = raw.strip()
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return raw
    return raw


def _merge(data: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _flatten(
    tree: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.extend(_flatten(value, (*prefix, key)))
        else:
            out.append(((*prefix, key), value))
    return out


def _describe(exc: ValidationError, path: Path, env_keys: Mapping[tuple[str, ...], str]) -> str:
    error = exc.errors()[0]
    loc = tuple(str(part) for part in error["loc"])
    key = ".".join(loc)
    # The error may sit at a section the variable created (POSTROOM_NOSUCH__KEY → "nosuch").
    source = _source(loc, path, env_keys)
    if error["type"] == "extra_forbidden":
        return f"Unknown configuration key {key!r} in {source}."
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return f"Bad value for {key!r} in {source}: {message}."


def database_section(url: str) -> str:
    """The ``[database]`` section naming a PostgreSQL database (PIPELINE §9)."""
    return (
        "\n[database]\n# Every node sharing this database serves the same deployment.\n"
        f"url = {json.dumps(url)}\n"
    )


def add_database_url(path: Path, current: str | None, url: str) -> None:
    """Name the PostgreSQL database *url* in an existing ``postroom.toml`` that names none."""
    if current == url:
        return
    if current:
        raise ConfigError(f"{path} already names another database; change [database] url there.")
    text = path.read_text("utf-8")
    if re.search(r"^\s*\[database\]", text, re.MULTILINE):
        raise ConfigError(f"{path} has a [database] section; set url there.")
    path.write_text(text.rstrip("\n") + "\n" + database_section(url), "utf-8")


def initial_config_text(
    *,
    token: str,
    provider: str,
    provider_model: str | None = None,
    database_url: str | None = None,
) -> str:
    """The ``postroom.toml`` that ``postroom init`` writes: the token, the provider, and the
    most useful keys as comments."""
    model_section = (
        f'\n[providers.{provider}]\nmodel = "{provider_model}"\n' if provider_model else ""
    )
    return f"""\
# postroom configuration. Every key is optional; the defaults are shown commented out.
# Environment variables override this file: POSTROOM_SERVER__PORT=9000, and so on.

[api]
# Bearer token for the HTTP API, the terminal UI and the operator web chat.
token = "{token}"

[defaults]
provider = "{provider}"
# model = ""
# engagement_ttl = "30m"
# session = "per-chat"      # or "shared"
# busy_policy = "followup"  # or "interrupt", "steer"

[server]
# host = "127.0.0.1"
# port = 8484

[assistant]
# name = "Postroom"     # "@Postroom ..." at the start of a message is a mention
# aliases = ["ghost"]

# [access]
# Who may talk to the agents. A stranger's direct message gets a one-time code to show you
# (`postroom access pending`, `postroom access approve CODE`); groups are answered by their
# routes. "allowlist" answers strangers nothing; "open" answers everyone (set budget_per_day
# on the folder then).
# dm_policy = "pairing"     # or "allowlist", "open"
# group_policy = "routes"   # or "allowlist"
# notify = []               # chats told about each pairing request, e.g. ["telegram:user/42"]
{model_section}{database_section(database_url) if database_url else ""}"""


_SECRET_KEY = re.compile(r"token|secret|password|key", re.IGNORECASE)


def _secret_strings(section: Any) -> list[str]:
    """The values of keys named like secrets, at any depth of a channel section."""
    found: list[str] = []
    if isinstance(section, dict):
        for key, value in section.items():
            if isinstance(value, str) and _SECRET_KEY.search(str(key)):
                found.append(value)
            else:
                found.extend(_secret_strings(value))
    return found
