"""The agents of one installation: each a separate assistant with its own workspace, memory,
owners, channel accounts and model settings (app/config_layers.py says where each agent's
settings come from).

    agent_names(home)             # ["main", "alice", ...]: the default agent first, then by name
    select_agent("alice")         # what `--agent alice` does: load_settings() then loads alice
    settings = load_agent_settings("alice")

An agent exists when its folder <home>/agents/NAME holds a config.toml or an agent.sqlite (the
default agent always exists). Nothing here opens a database.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import ConfigError, load_settings, read_config_file
from app.config_layers import AGENT_NAME, default_agent, home_from

if TYPE_CHECKING:
    from app.config import Settings

_selected: ContextVar[str | None] = ContextVar("pinch_selected_agent", default=None)


def agent_names(home: Path) -> list[str]:
    """Every agent of the installation at `home`: the default agent first, then by name."""
    default = default_agent(home, read_config_file)
    folder = home / "agents"
    found = set()
    if folder.is_dir():
        for child in folder.iterdir():
            marked = (child / "config.toml").is_file() or (child / "agent.sqlite").is_file()
            if child.is_dir() and AGENT_NAME.fullmatch(child.name) and marked:
                found.add(child.name)
    found.discard(default)
    return [default, *sorted(found)]


def select_agent(name: str | None) -> None:
    """Make `name` the agent every later `load_agent_settings()` of this run loads."""
    _selected.set(name)


def selected_agent() -> str | None:
    return _selected.get()


def load_agent_settings(name: str | None = None) -> Settings:
    """The settings of agent `name` (default: the selected agent, else the installation's
    default agent); a ConfigError naming the agents there are if `name` is not one of them."""
    name = name or _selected.get()
    if name is None:
        return load_settings()
    home = home_from({})
    names = agent_names(home)
    if name not in names:
        if not AGENT_NAME.fullmatch(name):
            raise ConfigError(
                f"{name!r} is not an agent name: use letters, digits, '-' and '_' only."
            )
        raise ConfigError(
            f"There is no agent {name!r} in {home} (agents: {', '.join(names)}): create it with "
            f"`pinch agents add {name}`."
        )
    return load_settings(agent_id=name)
