"""What every `pinch` command shares: loading the settings, opening the index, and turning
the errors a user can meet into advice and exit status 1. Imports no other command module."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from app.config import Settings
    from memory.index.index import MemoryIndex

F = TypeVar("F", bound=Callable[..., Any])
TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "workspace_template"


def fail(message: str) -> None:
    """Print `message` (redacted, printable) in red on stderr and exit with status 1."""
    from common.printable import printable
    from common.redact import redact

    click.secho(printable(redact(message)), fg="red", err=True)
    sys.exit(1)


def friendly_errors(fn: F) -> F:
    """Turn the errors a user can meet into a one-paragraph message and exit status 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from app.config import ConfigError
        from memory.embeddings.providers import EmbeddingError
        from memory.errors import MemoryError_

        try:
            return fn(*args, **kwargs)
        except (ConfigError, MemoryError_, EmbeddingError, ValueError) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("Interrupted; nothing was lost (the index keeps its last complete state).")
        except Exception as exc:
            advice = _database_damage(exc)
            if advice is None:
                raise
            fail(advice)

    return wrapper  # type: ignore[return-value]


def _database_damage(exc: Exception) -> str | None:
    """Advice if `exc` is an SQLite error caused by a damaged database file, else None.

    Damage shows up as many errors ("malformed", but also text that cannot be decoded), so an
    unexpected SQLite error is checked against `PRAGMA quick_check` of the database.
    """
    if not type(exc).__module__.startswith(("sqlite3", "pysqlite3")):
        return None
    from memory.store.db import (
        DatabaseCorruptError,
        corruption_advice,
        is_corruption,
        open_database,
    )

    try:
        path = load_settings().database_path
    except Exception:
        return None
    if is_corruption(exc):
        return corruption_advice(path, str(exc))
    try:
        db = open_database(path)
    except DatabaseCorruptError as damaged:
        return str(damaged)
    except Exception:
        return None
    try:
        problems = db.quick_check()
    finally:
        db.close()
    return corruption_advice(path, problems[0]) if problems else None


def load_settings() -> Settings:
    """The settings of this run's agent (`--agent NAME`, else the default agent): config.toml,
    the agent's own file and the PINCH_* variables (app/config_layers.py)."""
    from app.agents import load_agent_settings
    from app.store_backend import check_store_backend

    settings = load_agent_settings()
    check_store_backend(settings)  # an incomplete [store] backend stops every command here
    return settings


def open_index(settings: Settings) -> MemoryIndex:
    """The memory index of `settings`' workspace; a `WorkspaceError` if there is none yet."""
    from memory.errors import WorkspaceError

    if not settings.workspace_dir.is_dir():
        raise WorkspaceError(
            f"There is no workspace at {settings.workspace_dir}: run `pinch init` first "
            "(or set PINCH_HOME / PINCH_WORKSPACE to where your memory files are)."
        )
    from app.store_factory import open_memory_index

    index = open_memory_index(settings)
    if not settings.dreaming.enabled:
        from memory.lifecycle.signals import stop_recording

        stop_recording(index.db)  # disabled means nothing is written for it, signals included
    return index


def _choose_agent(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    if not value.strip():  # `--agent "$NAME"` with NAME unset must not mean the default agent
        fail("--agent was given an empty name: name an agent (`pinch agents list`).")
    from app.agents import select_agent, selected_agent

    chosen = selected_agent()
    if chosen is not None and chosen != value:  # `pinch --agent a memory status --agent b`
        fail(f"--agent {chosen} and --agent {value} in one command: give one agent.")
    select_agent(value)


def add_agent_option(command: click.Command) -> None:
    """Give `command` and every command under it `--agent NAME` (the agent it reads or writes;
    default: the installation's default agent, `main`). The choice holds for the whole run."""
    command.params.append(
        click.Option(
            ["--agent"],
            metavar="NAME",
            expose_value=False,
            is_eager=True,
            callback=_choose_agent,
            help="The agent to use (default: main; `pinch agents list`).",
        )
    )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_agent_option(sub)
