"""Pinch's settings: ~/.pinch/config.toml, overridden by PINCH_* environment variables.

Secrets (API keys, bot tokens) come only from the environment, never from the file.
`PINCH_HOME` moves the whole home (config, workspace, agent databases).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.config import AgentConfig
from memory.config import MemoryConfig


class ConfigError(Exception):
    """The configuration is invalid; the message says which setting and how to fix it."""


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
            return tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path} is not valid TOML: {exc}. Fix the file or move it aside."
            ) from None


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
