"""`pinch agents list | add NAME | remove NAME`: the agents of one installation (app/agents.py
says what an agent is; app/config_layers.py where its settings come from)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.support import TEMPLATE_DIR, fail, friendly_errors

if TYPE_CHECKING:
    from app.config import Settings

AGENT_TEMPLATE = """\
# Agent "{name}" of this Pinch installation: its own settings ({path}).
#
# Whatever is not set here comes from the installation ({home}/config.toml and the PINCH_*
# variables), except what makes {name} a separate assistant: its workspace, [owners],
# [telegram], [slack] and [projects] come only from this file and {name}'s own variables.
# {name}'s own environment variables: {prefix}SECTION__KEY, e.g.
#   {prefix}AGENT__MODEL=ollama/llama3.2
# Secrets come only from the environment, never from this file:
#   {prefix}TELEGRAM__BOT_TOKEN     {name}'s own Telegram bot (from @BotFather)
#   {prefix}SLACK__BOT_TOKEN        {name}'s own Slack app (xoxb-...)
#   {prefix}SLACK__APP_TOKEN        its Socket Mode token (xapp-...)
# Use it with `--agent {name}` on any command: `pinch chat --agent {name}`.

{workspace_line}

[agent]
# model = "claude-sonnet-5-5"        # or "ollama/llama3.2", "openai/gpt-4.1-mini", ...
# fallback_models = []
# timezone = "Europe/Berlin"

# Who {name}'s owner is on each channel: only they see {name}'s memory.
# [owners]
# telegram = ["123456789"]          # numeric Telegram user id
# slack = ["U0123ABCD"]             # Slack member id

# [telegram]
# dm_policy = "pairing"             # pairing | allowlist | open | disabled
# allow_from = []
# [slack]
# dm_policy = "pairing"

# [memory]
# preset = "pinch"
# extra_paths = ["~/{name}-notes"]     # more folders of {name}'s notes (never the installation's)
# [dreaming]
# enabled = true
"""


def agent_template(name: str, home: Path, workspace: Path | None) -> str:
    from app.config_layers import agent_file, env_prefix

    default_ws = home / "agents" / name / "workspace"
    line = (
        f"workspace = {json.dumps(str(workspace))}   # {name}'s memory files"
        if workspace is not None
        else f'# workspace = "{default_ws}"   # {name}\'s memory files (this is the default)'
    )
    return AGENT_TEMPLATE.format(
        name=name,
        path=agent_file(home, name),
        home=home,
        prefix=env_prefix(name),
        workspace_line=line,
    )


@click.group()
def agents() -> None:
    """The agents of this installation: each its own workspace, memory, owners and bots."""


def _home() -> Path:
    from app.config_layers import home_from

    return home_from({})


def _database_size(settings: Settings) -> int | None:
    """Bytes of the agent's SQLite database (with its write-ahead log), None if it has none."""
    path = settings.database_path
    if not path.is_file():
        return None
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.is_file() else 0)


def _accounts(settings: Settings) -> dict[str, bool]:
    """Each messaging channel with whether this agent has an account on it (its token is set)."""
    from common.channel_table import CHANNELS

    accounts: dict[str, bool] = {}
    for row in CHANNELS:
        if row.config_section is None or row.token_variable is None:
            continue
        section = getattr(settings, row.config_section, None)
        token = getattr(section, "bot_token", None)
        accounts[row.name] = bool(token is not None and token.get_secret_value())
    return accounts


def describe_agent(
    name: str, default: str, unreachable: dict[str, str] | None = None
) -> dict[str, Any]:
    """What `pinch agents list` says of agent `name` (never a secret's value). `unreachable`:
    the PostgreSQL servers already found unreachable in this listing (not asked again)."""
    from app.config import ConfigError, load_settings

    entry: dict[str, Any] = {"name": name, "default": name == default}
    try:
        settings = load_settings(agent_id=name)
    except ConfigError as exc:
        entry["error"] = " ".join(str(exc).split())
        return entry
    entry["workspace"] = str(settings.workspace_dir)
    entry["workspace_exists"] = settings.workspace_dir.is_dir()
    if settings.store.backend == "postgres":
        from memory.store.postgres.database import agent_schema, redacted_dsn, schema_bytes

        dsn = settings.store.dsn.get_secret_value() if settings.store.dsn else ""
        entry["database"] = f"postgres schema {agent_schema(name)} at {redacted_dsn(dsn)}"
        unreachable = {} if unreachable is None else unreachable
        problem = unreachable.get(dsn)
        entry["database_bytes"] = None
        if problem is None:
            entry["database_bytes"], problem = schema_bytes(dsn, agent_schema(name))
        if problem:
            entry["database_problem"] = unreachable[dsn] = problem
    else:
        entry["database"] = str(settings.database_path)
        entry["database_bytes"] = _database_size(settings)
    entry["accounts"] = _accounts(settings)
    return entry


def _size(n: int | None) -> str:
    if n is None:
        return "none yet"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB"


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def agents_list(as_json: bool) -> None:
    """Each agent: its workspace, its database and size, which channels have an account."""
    from app.agents import agent_names
    from app.config import read_config_file
    from app.config_layers import default_agent

    home = _home()
    default = default_agent(home, read_config_file)
    unreachable: dict[str, str] = {}  # a server down is asked once, not once per agent
    entries = [describe_agent(name, default, unreachable) for name in agent_names(home)]
    if as_json:
        click.echo(json.dumps({"home": str(home), "agents": entries}, indent=2))
        return
    for e in entries:
        mark = " (default)" if e["default"] else ""
        click.echo(click.style(e["name"], bold=True) + mark)
        if "error" in e:
            click.secho(f"  settings   {e['error']}", fg="red")
            continue
        init = "pinch init" + ("" if e["default"] else f" --agent {e['name']}")
        missing = "" if e["workspace_exists"] else f"  (missing: `{init}` creates it)"
        click.echo(f"  workspace  {e['workspace']}{missing}")
        size = f" ({e.get('database_problem') or _size(e['database_bytes'])})"
        click.echo(f"  database   {e['database']}{size}")
        accounts = ", ".join(f"{ch} {'yes' if ok else 'no'}" for ch, ok in e["accounts"].items())
        click.echo(f"  accounts   {accounts}")


@agents.command("add")
@click.argument("name")
@click.option(
    "--workspace",
    type=click.Path(path_type=Path),
    default=None,
    help="Its memory files' folder (default: <home>/agents/NAME/workspace).",
)
@friendly_errors
def agents_add(name: str, workspace: Path | None) -> None:
    """Create agent NAME: its config file, its workspace (from the template) and its database."""
    from app.agents import name_problem, workspace_clash
    from app.cli.setup import initialise
    from app.config import load_settings
    from app.config_layers import agent_file, env_prefix
    from common.private_files import PRIVATE_FILE_MODE, make_private_dirs

    home = _home()
    problem = name_problem(home, name)
    if problem:
        fail(problem)
    if workspace is not None:
        workspace = workspace.expanduser().absolute()
        if workspace.exists() and not workspace.is_dir():
            fail(f"{workspace} is a file, not a folder: give another --workspace.")
        clash = workspace_clash(home, workspace)
        if clash:
            fail(
                f"{clash}: each agent keeps its memory files in a folder of its own. Give another "
                "--workspace."
            )
    _refuse_a_kept_schema(home, name)
    path = agent_file(home, name)
    make_private_dirs(path.parent)
    text = agent_template(name, home, workspace)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    try:
        settings = load_settings(agent_id=name)
        created = initialise(settings, TEMPLATE_DIR)
    except Exception:
        path.unlink(missing_ok=True)  # a half-made agent would be listed; its folder stays
        raise
    click.echo(f"created {path}")
    for line in created:
        click.echo(line)
    prefix = env_prefix(name)
    click.echo(
        f"\nAgent {name!r} is ready: its memory files are in {settings.workspace_dir}.\n"
        f"Edit {path} for its model and owners; its secrets go in the environment:\n"
        f"  {prefix}TELEGRAM__BOT_TOKEN, {prefix}SLACK__BOT_TOKEN, {prefix}SLACK__APP_TOKEN\n"
        f"Talk to it: `pinch chat --agent {name}`."
    )


def _refuse_a_kept_schema(home: Path, name: str) -> None:
    """On PostgreSQL, `agents remove` keeps the agent's schema: a new agent of that name would
    take over the removed one's memory, sessions and approvals. Refused, with the way back."""
    from app.config import load_settings

    settings = load_settings(agent_id=name)  # the installation's [store], and NAME's variables
    if settings.store.backend != "postgres":
        return
    from memory.store.postgres.database import agent_schema
    from memory.store.postgres.schema_state import tables_with_rows

    schema = agent_schema(name)
    full = tables_with_rows(settings.store.dsn_text(), schema)
    if not full:
        return
    stamped = re.compile(rf"{re.escape(name)}-\d{{8}}T\d{{6}}Z(-\d+)?")  # retire_agent's
    removed = sorted(
        (p for p in (home / "removed").glob(f"{name}-*") if stamped.fullmatch(p.name)),
        key=lambda p: p.stat().st_mtime,
    )
    drop = (
        f"Bring it back (`mv {removed[-1]} {home / 'agents' / name}`), or drop"
        if removed
        else "Drop"
    )
    fail(
        f"PostgreSQL still holds the schema {schema} of an earlier agent {name!r} (its "
        f"{', '.join(full[:3])}{' …' if len(full) > 3 else ''}): a new agent {name!r} would "
        f"inherit its memory and conversations. {drop} the schema if it is not needed "
        f"(`DROP SCHEMA {schema} CASCADE`), or choose another name. Nothing was created."
    )


@agents.command("remove")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@friendly_errors
def agents_remove(name: str, yes: bool) -> None:
    """Set agent NAME aside: its folder (and workspace) move to <home>/removed/; nothing is
    deleted, and the command says how to bring it back."""
    from app.agents import agent_names, postgres_lease_holder, retire_agent, serving_gateway
    from app.config import load_settings, read_config_file
    from app.config_layers import default_agent

    home = _home()
    names = agent_names(home)
    default = default_agent(home, read_config_file)
    if name == default:
        fail(
            f"{name!r} is the installation's default agent: it cannot be removed (its files are "
            f"{home}/workspace and {home}/agents/{name}/)."
        )
    if name not in names:
        fail(f"There is no agent {name!r} in {home} (agents: {', '.join(names)}).")
    settings = load_settings(agent_id=name)
    pid = serving_gateway(settings)
    who = None if pid is None else f"pid {pid}"
    if who is None and settings.store.backend == "postgres":
        who = postgres_lease_holder(settings)  # a gateway on any machine, by the agent's lease
    if who is not None:
        fail(
            f"A gateway is serving {name!r} ({who}): stop it first, then remove the agent; "
            "nothing was changed."
        )
    others: set[Path] = set()
    for other in names:
        if other != name:
            try:
                others.add(load_settings(agent_id=other).workspace_dir.expanduser().absolute())
            except Exception:  # a broken agent's workspace is its own problem
                continue
    if not yes:
        click.confirm(
            f"Move agent {name!r} ({settings.agent_dir}, workspace {settings.workspace_dir}) "
            f"to {home}/removed/?",
            abort=True,
        )
    try:
        retired = retire_agent(settings, others)
    except OSError as exc:
        fail(f"Could not move {name!r}'s files ({exc}); check the permissions in {home}.")
        return
    click.echo(f"Moved agent {name!r} to {retired.folder} (nothing was deleted).")
    if retired.moved_workspace is not None:
        click.echo(f"Its workspace {retired.moved_workspace} is in it, as workspace-moved/.")
    if retired.kept_workspace is not None:
        click.echo(f"Its workspace {retired.kept_workspace} was left where it is.")
    if settings.store.backend == "postgres":
        from memory.store.postgres.database import agent_schema

        click.echo(f"Its PostgreSQL schema {agent_schema(name)} is kept as it is.")
    click.echo("To bring it back: " + " && ".join(retired.restore_commands(settings.agent_dir)))
