"""Pinch's settings: ~/.pinch/config.toml, overridden by PINCH_* environment variables.

Secrets (API keys, bot tokens) come only from the environment, never from the file.
`PINCH_HOME` moves the whole home (config, workspace, agent databases).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from agent.agent_config import AgentConfig
from agent.mcp.mcp_config import McpConfig, references
from agent.media.media_config import MediaConfig, VoiceConfig
from app.automations.automations_config import AutomationsConfig, HeartbeatConfig
from app.backup.backup_config import BackupConfig
from app.config_layers import (
    AGENT_NAME,
    agent_file,
    default_agent,
    env_prefix,
    layered_sources,
    read_toml,
)
from app.web.web_config import WebConfig
from channels.channel_config import SECRET_FIELDS, SlackConfig, TelegramConfig
from memory.lifecycle.dreaming import DreamingConfig
from memory.memory_config import MemoryConfig
from memory.project_tags import normalise_project, project_name_error
from memory.store.store_config import StoreConfig, dsn_has_password


class ConfigError(Exception):
    """The configuration is invalid; the message says which setting and how to fix it."""


class OwnersConfig(BaseModel):
    """`[owners]`: the owner's stable user id on each channel (the terminal user always is)."""

    model_config = ConfigDict(extra="forbid")

    telegram: list[str] = Field(default_factory=list)  # PINCH_OWNERS__TELEGRAM='["111"]'
    slack: list[str] = Field(default_factory=list)  # PINCH_OWNERS__SLACK='["U0123ABCD"]'

    # Usernames are refused, not ignored: an owner listed by name would never be recognised
    # (and a username can change hands), so the owner's own messages would go to pairing.
    @field_validator("telegram")
    @classmethod
    def _telegram_ids(cls, ids: list[str]) -> list[str]:
        for value in ids:
            if not value.strip().isdigit():
                raise ValueError(
                    f"{value!r} is not a Telegram user id: owners are listed by numeric id "
                    '(e.g. "111222333"), never @username. Message @userinfobot for yours, or '
                    "send your bot a message and run `pinch pairing list`: the request shows "
                    "your id"
                )
        return [value.strip() for value in ids]

    @field_validator("slack")
    @classmethod
    def _slack_ids(cls, ids: list[str]) -> list[str]:
        for value in ids:
            if not value.strip() or value.strip().startswith("@"):
                raise ValueError(
                    f"{value!r} is not a Slack member id: owners are listed by member id "
                    '(e.g. "U0123ABCD"): in Slack, your profile → ⋯ → Copy member ID'
                )
        return [value.strip() for value in ids]


class GatewayConfig(BaseModel):
    """`[gateway]`: how `pinch gateway` routes and queues messages."""

    model_config = ConfigDict(extra="forbid")

    # The owner's direct chats on every channel share one session ("main"), or keep one per
    # channel ("per-channel").
    owner_dm_scope: Literal["main", "per-channel"] = "main"
    collect_window_ms: int = Field(default=1_500, ge=0, le=60_000)  # quick messages → one turn
    shutdown_grace_s: float = Field(default=20.0, ge=0)  # in-flight turns may finish this long
    max_concurrent_turns: int = Field(default=4, ge=1, le=64)  # sessions answered in parallel
    # Turns running at once in one `pinch gateway` process, all its agents together: beyond
    # it, messages wait in the durable queue (in order) for a free slot instead of crowding
    # one event loop until connections time out (app/gateway/workers.py `TurnSlots`).
    max_concurrent_turns_per_process: int = Field(default=64, ge=1, le=4096)
    health_listen: str = "127.0.0.1"
    health_port: int | None = Field(default=None, ge=1, le=65535)  # GET /healthz when set
    # Several gateway processes share the agents by lease (app/gateway/fleet.py): the holder
    # renews an agent's lease every `agent_heartbeat_s`; one not renewed for `agent_lease_s`
    # (or whose process on this machine is gone) is taken over by another gateway.
    agent_lease_s: float = Field(default=20.0, ge=1.0, le=600.0)
    agent_heartbeat_s: float = Field(default=5.0, gt=0.0, le=120.0)

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> GatewayConfig:
        if self.agent_heartbeat_s * 4 > self.agent_lease_s:
            raise ValueError(
                f"[gateway] agent_heartbeat_s ({self.agent_heartbeat_s:g}) must be at most a "
                f"quarter of agent_lease_s ({self.agent_lease_s:g}): a gateway stops serving an "
                "agent after half the lease without a renewal, which must outlast a missed beat"
            )
        return self


class ProjectConfig(BaseModel):
    """`[projects.NAME]`: where a session starts in project NAME (agent/projects.py). NAME is
    letters, digits and '-', read case-insensitively; `/project NAME` works without a table."""

    model_config = ConfigDict(extra="forbid")

    # Telegram chat ids ("-1001234567890"), forum topics as "chat:topic" ("-1001234567890:42"),
    # Slack channel ids ("C0123ABCD"): a session there starts in this project.
    chats: list[str] = Field(default_factory=list)
    # `pinch chat` started inside one of these folders starts in this project.
    folders: list[Path] = Field(default_factory=list)

    @field_validator("chats")
    @classmethod
    def _chat_ids(cls, ids: list[str]) -> list[str]:
        for value in ids:
            if not str(value).strip() or " " in str(value).strip():
                raise ValueError(
                    f'{value!r} is not a chat id: list Telegram chat ids ("-1001234567890", a '
                    'topic as "-1001234567890:42") or Slack channel ids ("C0123ABCD")'
                )
        return [str(value).strip() for value in ids]


def pinch_home() -> Path:
    return Path(os.environ.get("PINCH_HOME") or Path.home() / ".pinch").expanduser()


class Settings(BaseSettings):
    """All settings. Nested values from the environment use `__`: PINCH_MEMORY__PRESET=keyword."""

    model_config = SettingsConfigDict(
        env_prefix="PINCH_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    home: Path = Field(default_factory=pinch_home)
    workspace: Path | None = None  # default: <home>/workspace
    agent_id: str = "main"
    agent: AgentConfig = AgentConfig()
    memory: MemoryConfig = MemoryConfig()
    telegram: TelegramConfig = TelegramConfig()
    slack: SlackConfig = SlackConfig()
    owners: OwnersConfig = OwnersConfig()
    gateway: GatewayConfig = GatewayConfig()
    automations: AutomationsConfig = AutomationsConfig()
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    dreaming: DreamingConfig = DreamingConfig()
    web: WebConfig = WebConfig()
    backup: BackupConfig = BackupConfig()
    voice: VoiceConfig = VoiceConfig()
    media: MediaConfig = MediaConfig()
    mcp: McpConfig = McpConfig()
    projects: dict[str, ProjectConfig] = Field(default_factory=dict)  # [projects.NAME]
    store: StoreConfig = StoreConfig()

    @field_validator("projects")
    @classmethod
    def _project_names(cls, table: dict[str, ProjectConfig]) -> dict[str, ProjectConfig]:
        out: dict[str, ProjectConfig] = {}
        for raw, project in table.items():
            name = normalise_project(raw)
            if name is None:
                raise ValueError(project_name_error(raw).replace("project name", "[projects.NAME]"))
            if name in out:
                raise ValueError(f"[projects.{raw}] repeats [projects.{name}] (names ignore case)")
            out[name] = project
        chats = [c for p in out.values() for c in p.chats]
        if len(chats) != len(set(chats)):
            twice = next(c for c in chats if chats.count(c) > 1)
            raise ValueError(f"chat {twice!r} is listed in two projects; keep it in one")
        return out

    @field_validator("agent_id")
    @classmethod
    def _safe_agent_id(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", v):
            raise ValueError("use letters, digits, '-' and '_' only (it names a folder)")
        return v

    @property
    def workspace_dir(self) -> Path:
        return (self.workspace or self.home / "workspace").expanduser()

    @property
    def is_default_agent(self) -> bool:
        """Whether this is the installation's default agent (reads its files as one agent did)."""
        return default_agent(self.home, read_config_file) == self.agent_id

    @property
    def agent_dir(self) -> Path:
        return self.home / "agents" / self.agent_id

    @property
    def database_path(self) -> Path:
        return self.agent_dir / "agent.sqlite"

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @property
    def own_dir(self) -> Path:
        """Where this agent's small files live (channel state, the chat's history and log): the
        home for the default agent, as before agents; <home>/agents/NAME for any other."""
        return self.home if self.is_default_agent else self.agent_dir

    @property
    def backup_dir(self) -> Path:
        """`[backup] path` (default <home>/backups); another agent than the default one keeps
        its archives in a folder of its own in it, so no agent prunes another's archives."""
        folder = (self.backup.path or self.home / "backups").expanduser()
        return folder if self.is_default_agent else folder / self.agent_id

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The installation's and the agent's files and environments (app/config_layers.py).
        return layered_sources(settings_cls, init_settings, env_settings, read_config_file)


def read_config_file(path: Path) -> dict[str, Any]:
    """The tables of a Pinch config file ({} if there is none), secrets refused."""
    data = read_toml(path, ConfigError)
    _refuse_secrets_in_file(data, path)
    _refuse_mcp_secrets(data, path)
    return data


# Names that hold a secret in any table of the file (none is a setting): API keys and the like
# are read from the environment only.
_SECRET_NAME = re.compile(r"(^|_)(api_?key|key|token|secret|password)$", re.IGNORECASE)


def _refuse_secrets_in_file(data: dict[str, Any], path: Path) -> None:
    for section, names in SECRET_FIELDS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            continue
        for name in names:
            if name in table:
                env = f"PINCH_{section.upper()}__{name.upper()}"
                raise ConfigError(
                    f"{path} sets [{section}] {name}, a secret: remove it from the file and set "
                    f"the environment variable {env} instead (secrets never live in config.toml)."
                )
    store = data.get("store")
    if isinstance(store, dict) and dsn_has_password(str(store.get("dsn", ""))):
        raise ConfigError(
            f"{path} sets [store] dsn with a password, a secret: remove it from the file and set "
            "the environment variable PINCH_STORE__DSN instead (or keep the password in "
            "~/.pgpass); secrets never live in config.toml."
        )
    for section, table in data.items():
        if not isinstance(table, dict) or section == "projects":  # [projects.NAME]: any name
            continue
        for name in table:
            known = _field_type([section, name]) is not None
            if not known and _SECRET_NAME.search(str(name)):
                raise ConfigError(
                    f"{path} sets [{section}] {name}, which looks like a secret: remove it from "
                    "the file. API keys are read only from the environment, under the "
                    "provider's name (ANTHROPIC_API_KEY, OPENAI_API_KEY, …)."
                )


# A name one of whose parts (split at "_" and "-") is one of these holds a secret:
# GITHUB_TOKEN, OPENAI_API_KEY, Authorization, X-Api-Key — not MONKEY or KEYBOARD_LAYOUT.
_SECRET_PARTS = frozenset(
    {"token", "key", "apikey", "secret", "password", "passwd", "pat", "auth", "authorization",
     "credential", "credentials", "cookie"}
)  # fmt: skip


def _looks_secret(name: str) -> bool:
    return any(part in _SECRET_PARTS for part in re.split(r"[_\-]+", name.lower()))


def _refuse_mcp_secrets(data: dict[str, Any], path: Path) -> None:
    """An MCP server's `env` and `headers` values that look like secrets must come from the
    environment as ${NAME}, not be written in the file."""
    servers = data.get("mcp", {}).get("servers") if isinstance(data.get("mcp"), dict) else None
    if not isinstance(servers, dict):
        return
    for server, table in servers.items():
        if not isinstance(table, dict):
            continue
        for kind in ("env", "headers"):
            values = table.get(kind)
            if not isinstance(values, dict):
                continue
            for name, value in values.items():
                secret = _looks_secret(str(name)) and isinstance(value, str)
                if secret and value.strip() and not references(value):
                    raise ConfigError(
                        f"{path} sets [mcp.servers.{server}] {kind}.{name} to a literal "
                        "value, a secret: write it as a reference to an environment "
                        f'variable instead ({name} = "${{MY_{_env_name(name)}}}", or '
                        f'"Bearer ${{MY_TOKEN}}" for a header) and set that variable '
                        "(secrets never live in config.toml)."
                    )


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", str(name)).upper().strip("_") or "SECRET"


def _check_home() -> None:
    home = pinch_home()
    if home.exists() and not home.is_dir():
        raise ConfigError(
            f"The Pinch home {home} is a file, not a folder: set PINCH_HOME to a folder (it "
            "will be created) or move the file aside."
        )


def _field_type(path: list[str]) -> Any:
    """The annotation of the setting at `path` (lower-case names), or None if there is none."""
    model: Any = Settings
    annotation: Any = None
    for name in path:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(name)
        if field is None:
            return None
        annotation = field.annotation
        model = annotation
    return annotation


def _non_json_env_setting() -> str | None:
    """Advice for a PINCH_* variable that sets a list or table but is not JSON, else None."""
    for name, value in sorted(os.environ.items()):
        if not name.startswith("PINCH_"):
            continue
        path = name[len("PINCH_") :].lower().split("__")
        field_type = _field_type(path)
        if isinstance(field_type, type) and issubclass(field_type, BaseModel):
            if _is_json(value):
                continue
            first = next(
                (
                    n
                    for n, f in field_type.model_fields.items()
                    if not (isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel))
                ),
                "name",
            )
            return (
                f"{name}={value!r} is not valid here: [{'.'.join(path)}] is a table; set each "
                f"of its settings in its own variable, e.g. {name}__{first.upper()}=..., "
                "or the whole table as a JSON object."
            )
        kind = typing.get_origin(field_type)
        if kind not in (list, dict):
            continue
        try:
            json.loads(value)
        except ValueError:
            example = (
                json.dumps([v.strip() for v in value.split(",") if v.strip()] or ["..."])
                if kind is list
                else '{"key": "value"}'
            )
            what = "a list" if kind is list else "a table"
            return (
                f"{name}={value!r} is not valid here: this setting is {what}, written as JSON "
                f"in the environment, e.g. {name}='{example}'."
            )
    return None


def _is_json(value: str) -> bool:
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def load_settings(**overrides: Any) -> Settings:
    """Settings from the file, the environment and `overrides`, or ConfigError with advice."""
    _check_home()
    try:
        return Settings(**overrides)
    except SettingsError as exc:
        raise ConfigError(_non_json_env_setting() or f"Invalid settings: {exc}.") from None
    except ValidationError as exc:
        raise ConfigError(_validation_advice(exc, overrides.get("agent_id"))) from None


def _validation_advice(exc: ValidationError, agent: str | None = None) -> str:
    """Each invalid setting with where it was set: the variable, else the file that sets it
    (agent `agent`'s own variable and file first, when it is not the default agent)."""
    home = pinch_home()
    prefixes, files = ["PINCH_"], [home / "config.toml"]
    if agent and AGENT_NAME.fullmatch(agent) and agent != default_agent(home, read_config_file):
        prefixes.insert(0, env_prefix(agent))
        files.insert(0, agent_file(home, agent))
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc)
        tail = "__".join(loc).upper()
        if len(loc) == 1 and isinstance(_field_type(loc), type):
            tail += "__*"  # a check across several settings of one table
        names = [prefix + tail for prefix in prefixes]
        env = next((name for name in names if name in os.environ), None)
        message = err["msg"].removeprefix("Value error, ")
        setting_file = next((f for f in files if _in_config_file(f, loc)), None)
        if env is not None:
            raw = os.environ[env].strip()
            if typing.get_origin(_field_type(loc)) is list and not _is_json_list(raw):
                try:  # a JSON string ("notes") stands for the one item it holds
                    decoded = json.loads(raw)
                except ValueError:
                    decoded = raw
                example = json.dumps([decoded if isinstance(decoded, str) else raw or "..."])
                message += f"; in the environment a list is JSON: {env}='{example}'"
            lines.append(f"  {where}: {message} (from the environment variable {env})")
        elif setting_file is not None:
            lines.append(f"  {where}: {message} (set in {setting_file})")
        else:
            lines.append(f"  {where}: {message} (set in {files[0]} or {names[0]})")
    return "Invalid settings:\n" + "\n".join(lines)


def _is_json_list(raw: str) -> bool:
    try:
        return isinstance(json.loads(raw), list)
    except ValueError:
        return False


def _in_config_file(path: Path, loc: list[str]) -> bool:
    """Whether the settings file `path` sets the setting at `loc` (the advice names the file)."""
    try:
        table: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    for name in loc:
        if not isinstance(table, dict) or name not in table:
            return False
        table = table[name]
    return True
