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

import fcntl
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import ConfigError, load_settings, read_config_file
from app.config_layers import AGENT_NAME, default_agent, env_prefix, home_from
from common.private_files import make_private_dirs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from app.config import Settings

# A new agent's name fits its PostgreSQL schema `pinch_NAME` in PostgreSQL's 63 characters
# (AGENT_NAME still finds an existing agent of up to 64: it runs on SQLite).
MAX_NEW_NAME = 63 - len("pinch_")
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


def load_agent_settings(name: str | None = None, *, listed: Sequence[str] = ()) -> Settings:
    """The settings of agent `name` (default: the selected agent, else the installation's
    default agent); a ConfigError naming the agents there are if `name` is not one of them.
    `listed`: the agents the caller has just listed (`agent_names`) — not listed again for each
    of a thousand agents."""
    name = name or _selected.get()
    if name is None:
        return load_settings()
    home = home_from({})
    names = list(listed) or agent_names(home)
    if name not in names:
        if not AGENT_NAME.fullmatch(name):
            raise ConfigError(
                f"{name!r} is not an agent name: use letters, digits, '-' and '_' only."
            )
        twin = next((n for n in names if agent_key(n) == agent_key(name)), None)
        if twin is not None:  # `pinch agents add` would refuse the name: point at the agent
            raise ConfigError(f"There is no agent {name!r} in {home}: did you mean {twin!r}?")
        raise ConfigError(
            f"There is no agent {name!r} in {home} (agents: {', '.join(names)}): create it with "
            f"`pinch agents add {name}`."
        )
    return load_settings(agent_id=name)


def agent_key(name: str) -> str:
    """What two agent names must not share: their environment prefix and PostgreSQL schema fold
    case and read '-' as '_' (bob-smith and Bob_Smith would read each other's secrets)."""
    return name.lower().replace("-", "_")


def name_problem(home: Path, name: str) -> str | None:
    """Why `name` cannot name a new agent in `home` (one line), or None if it can."""
    if not AGENT_NAME.fullmatch(name):
        return (
            f"{name!r} is not an agent name: use letters, digits, '-' and '_' only (at most "
            f"{MAX_NEW_NAME}, starting with a letter or digit)."
        )
    if len(name) > MAX_NEW_NAME:
        return (
            f"{name!r} is too long for an agent name: at most {MAX_NEW_NAME} characters (its "
            f"PostgreSQL schema, pinch_NAME, must fit PostgreSQL's 63)."
        )
    names = agent_names(home)
    if name in names:
        return f"There is already an agent {name!r} in {home} (`pinch agents list`)."
    twin = next((n for n in names if agent_key(n) == agent_key(name)), None)
    if twin is not None:
        return (
            f"{name!r} is too close to the agent {twin!r}: their environment variables "
            f"({env_prefix(name)}...) would be the same. Choose another name."
        )
    folder = home / "agents" / name
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        return (
            f"{folder} already holds files but no agent: move it aside "
            f"(mv {folder} {folder}.old), then add the agent again."
        )
    return None


def workspace_clash(home: Path, workspace: Path, besides: str | None = None) -> str | None:
    """How `workspace` meets another agent's (than `besides`) memory folder — "X is agent bob's
    workspace", "X holds …", "X is inside …" — or None. An agent's folder must not: their memory
    files would be shared (one inside another's memory/ is indexed as that agent's notes)."""
    wanted = workspace.expanduser().resolve()
    for name in agent_names(home):
        if name == besides:
            continue
        try:
            theirs = load_settings(agent_id=name).workspace_dir.expanduser().resolve()
        except ConfigError:  # a broken agent's workspace is its own problem
            continue
        if wanted == theirs:
            return f"{workspace} is agent {name}'s workspace"
        if wanted.is_relative_to(theirs):
            return f"{workspace} is inside agent {name}'s workspace {theirs}"
        if theirs.is_relative_to(wanted):
            return f"{workspace} holds agent {name}'s workspace {theirs}"
    return None


def lock_holder(lock: Path) -> str | None:
    """The pid (or "unknown") of the process holding the OS lock on file `lock`, else None."""
    try:
        handle = lock.open("r", encoding="utf-8")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return handle.read().strip() or "unknown"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def serving_gateway(settings: Settings) -> str | None:
    """The pid of a gateway serving `settings`' agent, else None: one holding the agent's lock
    <home>/agents/NAME/gateway.lock, or one whose fresh heartbeat for the agent is in its folder
    (a gateway serving several agents beats for each; its process must still be running)."""
    from app.gateway.heartbeat import MAX_AGE_S, read_heartbeat
    from memory.store.liveness import pid_alive

    held = lock_holder(settings.agent_dir / "gateway.lock")
    if held is not None:
        return held
    beat = read_heartbeat(settings.agent_dir)
    if beat is None or beat.stopping or time.time() - beat.at > MAX_AGE_S:
        return None
    return str(beat.pid) if pid_alive(beat.pid) else None


def postgres_lease_holder(settings: Settings) -> str | None:
    """ "host H, pid P" of a gateway — on any machine — holding the lease of `settings`' agent
    in its PostgreSQL schema (renewed within `agent_lease_s`), else None. Read-only."""
    from memory.store.postgres.database import agent_schema
    from memory.store.postgres.transfer import NoSchema, open_postgres_source

    try:
        dsn = settings.store.dsn_text()
        with open_postgres_source(dsn, agent_schema(settings.agent_id)) as source:
            return source.lease_holder(time.time(), settings.gateway.agent_lease_s)
    except NoSchema:
        return None


@dataclass(frozen=True)
class Retired:
    """Where a removed agent's files went, and how to bring them back."""

    folder: Path  # <home>/removed/NAME-<stamp>
    moved_workspace: Path | None  # a workspace elsewhere in the home, moved in beside it
    kept_workspace: Path | None  # a workspace outside the home: left where it is

    def restore_commands(self, agent_folder: Path) -> list[str]:
        commands = [f"mv {self.folder} {agent_folder}"]
        if self.moved_workspace is not None:
            commands.insert(0, f"mv {self.folder / MOVED_WORKSPACE} {self.moved_workspace}")
        return commands


MOVED_WORKSPACE = "workspace-moved"  # in a removed agent's folder: its workspace from elsewhere


def retire_agent(
    settings: Settings, in_use: set[Path] | None = None, now: datetime | None = None
) -> Retired:
    """Move agent `settings.agent_id`'s folder (and its workspace, when that lives elsewhere in
    the home and is not one of `in_use`, the other agents' workspaces) to
    <home>/removed/NAME-<UTC stamp>/. Nothing is deleted; OSError if a move fails."""
    home = settings.home.expanduser().absolute()
    source = settings.agent_dir.expanduser().absolute()
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    removed = home / "removed"
    make_private_dirs(removed)
    target = removed / f"{settings.agent_id}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = removed / f"{settings.agent_id}-{stamp}-{n}"
    workspace = settings.workspace_dir.expanduser().absolute()
    inside_agent = workspace.is_relative_to(source)
    shared = any(workspace == other or other.is_relative_to(workspace) for other in in_use or ())
    elsewhere_in_home = (
        not inside_agent
        and not shared
        and workspace.is_relative_to(home)
        and not home.is_relative_to(workspace)  # never the home itself
    )
    os.rename(source, target)
    moved = None
    if elsewhere_in_home and workspace.is_dir():
        os.rename(workspace, target / MOVED_WORKSPACE)
        moved = workspace
    kept = workspace if not inside_agent and not elsewhere_in_home else None
    return Retired(target, moved, kept)
