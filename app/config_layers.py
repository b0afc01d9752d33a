"""Where an agent's settings come from when one installation holds several agents.

    <home>/config.toml                 the installation's file: shared defaults (and the default
                                       agent's own tables)
    <home>/agents/NAME/config.toml     agent NAME's file: any table, over the installation's
    PINCH_SECTION__KEY=...             the installation's environment
    PINCH_AGENTS__NAME__SECTION__KEY   agent NAME's environment (NAME upper-cased, "-" as "_")

The more specific source wins: arguments, then the agent's environment, the agent's file, the
installation's environment, the installation's file. The default agent (`agent_id` in the
installation's file or PINCH_AGENT_ID; "main" if neither) also takes every table from the
installation's sources, so a one-agent installation reads exactly as before. Any other agent
never inherits what makes it a separate assistant (AGENT_OWN): its workspace, owners, channel
accounts (Telegram and Slack tokens and rules), projects and web page ([web]: its port) come
only from its own file and environment — two agents never share a bot token, a memory folder or
a web port by accident; nor does it inherit `[memory] extra_paths` (AGENT_OWN_KEYS: the default
owner's notes). Its workspace defaults to <home>/agents/NAME/workspace.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

# Tables and settings an agent other than the default one never inherits from the installation.
# Its web page too: two pages cannot share a port, so another agent's page runs only where its
# own file (or PINCH_AGENTS__NAME__WEB__PORT) gives it one (app/web/auth.py `web_page_wanted`).
AGENT_OWN = ("agent_id", "workspace", "owners", "telegram", "slack", "projects", "web")
# Settings inside shared tables that are one agent's own all the same: more folders of the
# owner's notes to index (the default agent's owner's notes are not another agent's memory).
AGENT_OWN_KEYS = {"memory": ("extra_paths",)}
DEFAULT_AGENT = "main"
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

ReadFile = Callable[[Path], dict[str, Any]]  # a TOML file's tables, secrets refused


def home_from(init: dict[str, Any]) -> Path:
    """The Pinch home of this load: an explicit `home=` argument, else PINCH_HOME, else ~/.pinch."""
    given = init.get("home")
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("PINCH_HOME") or Path.home() / ".pinch").expanduser()


def default_agent(home: Path, read: ReadFile) -> str:
    """The installation's default agent: PINCH_AGENT_ID, else `agent_id` in its file, else main."""
    named = os.environ.get("PINCH_AGENT_ID") or read(home / "config.toml").get("agent_id")
    return str(named).strip() if named else DEFAULT_AGENT


def env_prefix(agent: str) -> str:
    """The environment prefix of `agent`'s own settings: PINCH_AGENTS__BOB_SMITH__ for bob-smith."""
    return f"PINCH_AGENTS__{agent.upper().replace('-', '_')}__"


def agent_file(home: Path, agent: str) -> Path:
    return home / "agents" / agent / "config.toml"


class _Layer(PydanticBaseSettingsSource):
    """Fixed values (a file's tables) as a settings source."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._values


class _Without(PydanticBaseSettingsSource):
    """Another source's values without the agent's own tables."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return shared_only(self._inner())


class _PrefixedEnv(EnvSettingsSource):
    """An environment source holding only the variables that start with its prefix — the only
    ones it reads. pydantic-settings looks at every variable for every nested field: with each
    of a thousand agents' tokens in the environment, loading every agent's settings grew with
    the square of the agents (0.15 s an agent at 1,000; bench/scale.py)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        prefix = self.env_prefix.lower()
        own = {k: v for k, v in os.environ.items() if k.lower().startswith(prefix)}
        return parse_env_vars(
            own, bool(self.case_sensitive), self.env_ignore_empty, self.env_parse_none_str
        )


def _without_agents(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """The installation's environment without the agents' own variables (PINCH_AGENTS__…):
    no setting of the installation is named `agents`, so they are never read there."""
    return {k: v for k, v in env.items() if not k.lower().startswith("pinch_agents__")}


def shared_only(values: dict[str, Any]) -> dict[str, Any]:
    """`values` (one source's settings) without what is each agent's own (AGENT_OWN, and
    AGENT_OWN_KEYS inside the shared tables)."""
    out = {k: v for k, v in values.items() if k not in AGENT_OWN}
    for table, keys in AGENT_OWN_KEYS.items():
        if isinstance(out.get(table), dict):
            out[table] = {k: v for k, v in out[table].items() if k not in keys}
    return out


def layered_sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    env_settings: PydanticBaseSettingsSource,
    read: ReadFile,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of one agent's settings, most specific first (see the module's docstring)."""
    init = init_settings()
    home = home_from(init)
    if isinstance(env_settings, EnvSettingsSource):  # never the other agents' variables
        env_settings.env_vars = _without_agents(env_settings.env_vars)
    installation = read(home / "config.toml")
    default = default_agent(home, read)
    agent = str(init.get("agent_id") or default)
    own_file: dict[str, Any] = {}
    if AGENT_NAME.fullmatch(agent):  # an unsafe name fails validation of agent_id, later
        own_file = dict(read(agent_file(home, agent)))
        own_file.pop("agent_id", None)  # the folder names the agent
    agent_env = _PrefixedEnv(
        settings_cls,
        env_prefix=env_prefix(agent),
        env_nested_delimiter="__",
        case_sensitive=False,
    )
    if agent == default:
        return (
            init_settings,
            agent_env,
            _Layer(settings_cls, own_file),
            env_settings,
            _Layer(settings_cls, installation),
        )
    own_file.setdefault("workspace", str(home / "agents" / agent / "workspace"))
    shared = shared_only(installation)
    return (
        init_settings,
        agent_env,
        _Layer(settings_cls, {**own_file, "agent_id": agent}),
        _Without(settings_cls, env_settings),
        _Layer(settings_cls, shared),
    )


def read_toml(path: Path, exc_type: type[Exception]) -> dict[str, Any]:
    """The tables of TOML file `path` ({} if there is none), or `exc_type` with advice."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise exc_type(f"{path} is not valid TOML: {exc}. Fix the file or move it aside.") from None
    except IsADirectoryError:
        raise exc_type(
            f"{path} is a folder, not a file: move it aside; Pinch needs a TOML file there "
            "(or none at all, for the defaults)."
        ) from None
    except OSError as exc:
        raise exc_type(
            f"{path} cannot be read ({exc.strerror}): check its owner and mode (chmod 600 {path})."
        ) from None
