"""Pinch's settings: ~/.pinch/config.toml, overridden by PINCH_* environment variables.

Secrets (API keys, bot tokens) come only from the environment, never from the file.
`PINCH_HOME` moves the whole home (config, workspace, agent databases).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.config import AgentConfig
from channels.config import SECRET_FIELDS, SlackConfig, TelegramConfig
from memory.config import MemoryConfig


class ConfigError(Exception):
    """The configuration is invalid; the message says which setting and how to fix it."""


class OwnersConfig(BaseModel):
    """`[owners]`: the owner's stable user id on each channel (the terminal user always is)."""

    model_config = ConfigDict(extra="forbid")

    telegram: list[str] = Field(default_factory=list)  # PINCH_OWNERS__TELEGRAM='["111"]'
    slack: list[str] = Field(default_factory=list)  # PINCH_OWNERS__SLACK='["U0123ABCD"]'


class GatewayConfig(BaseModel):
    """`[gateway]`: how `pinch gateway` routes and queues messages."""

    model_config = ConfigDict(extra="forbid")

    # The owner's direct chats on every channel share one session ("main"), or keep one per
    # channel ("per-channel").
    owner_dm_scope: Literal["main", "per-channel"] = "main"
    collect_window_ms: int = Field(default=1_500, ge=0, le=60_000)  # quick messages → one turn
    shutdown_grace_s: float = Field(default=20.0, ge=0)  # in-flight turns may finish this long
    max_concurrent_turns: int = Field(default=4, ge=1, le=64)  # sessions answered in parallel
    health_listen: str = "127.0.0.1"
    health_port: int | None = Field(default=None, ge=1, le=65535)  # GET /healthz when set


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
    def agent_dir(self) -> Path:
        return self.home / "agents" / self.agent_id

    @property
    def database_path(self) -> Path:
        return self.agent_dir / "agent.sqlite"

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls))


class _TomlSource(PydanticBaseSettingsSource):
    """Values from <home>/config.toml (home from PINCH_HOME or ~/.pinch)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = pinch_home() / "config.toml"
        if not path.exists():
            return {}
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path} is not valid TOML: {exc}. Fix the file or move it aside."
            ) from None
        _refuse_secrets_in_file(data, path)
        return data


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


def load_settings(**overrides: Any) -> Settings:
    """Settings from the file, the environment and `overrides`, or ConfigError with advice."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            env = "PINCH_" + "__".join(str(p) for p in err["loc"]).upper()
            lines.append(
                f"  {where}: {err['msg']} (set in {pinch_home() / 'config.toml'} or {env})"
            )
        raise ConfigError("Invalid settings:\n" + "\n".join(lines)) from None
