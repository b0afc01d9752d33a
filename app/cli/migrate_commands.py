"""`pinch migrate --agent NAME --to postgres DSN` and `--to sqlite PATH`: copy one agent's
database to the other backend, verified table by table (memory/store/transfer.py does the
copying). The source is only read; the target must be empty; nothing is committed unless every
count and hash matches. Works while `backend = "postgres"` is still refused at start: it needs
the stores' tables, not the app."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.support import fail, friendly_errors

if TYPE_CHECKING:
    from app.config import Settings
    from memory.store.transfer import TransferReport

_PROGRESS_EVERY_S = 1.0


@click.command()
@click.option(
    "--to",
    "backend",
    type=click.Choice(["postgres", "sqlite"]),
    required=True,
    help="The backend to copy the agent to.",
)
@click.argument("target", required=False, metavar="DSN|PATH")
@friendly_errors
def migrate(backend: str, target: str | None) -> None:
    """Copy the agent's database to PostgreSQL (DSN; default PINCH_STORE__DSN) or to an SQLite
    file (PATH; default the agent's own agent.sqlite), verified by counts and hashes per table.

    The source (the agent's current [store] backend) is only read, and the target must be
    empty. Afterwards set [store] backend (and the DSN) as printed to switch."""
    from app.agents import load_agent_settings

    settings = load_agent_settings()  # not load_settings(): a backend refused at start is fine
    _warn_if_served(settings)
    started = time.monotonic()
    try:
        with _source(settings) as source, _target(settings, backend, target) as made:
            _refuse_the_same_database(settings, source, made)
            _warn_if_leased(settings, source)
            report = _run(source, made, _full_target_advice(settings, backend))
    except KeyboardInterrupt:  # the target was rolled back on the way out of the `with`
        fail(
            "Interrupted: nothing was committed (the target is left empty) and the source was "
            "not changed. Run the same `pinch migrate` again to copy it."
        )
        raise
    click.echo(
        f"Copied agent {settings.agent_id!r}: {len(report.tables)} tables, {report.rows:,} rows "
        f"in {time.monotonic() - started:.1f} s ({report.rows / max(report.seconds, 1e-9):,.0f} "
        "rows/s); every count and hash matches."
    )
    for line in report.lines():
        click.echo(line)
    if report.derived:
        click.echo("Not copied (rebuilt from the rows above, or nothing to copy):")
        for line in report.skipped_lines():
            click.echo(f"  {line}")
    click.echo("")
    click.echo(_switch_advice(settings, backend, made.label))


def _warn_if_served(settings: Settings) -> None:
    """A gateway serving the agent keeps writing: the copy holds what was there when it began."""
    from app.agents import serving_gateway

    pid = serving_gateway(settings)
    if pid is not None:
        click.secho(
            f"A gateway (pid {pid}) is serving agent {settings.agent_id!r}: the copy holds what "
            "was written before it began (one consistent snapshot), not what comes after. Stop "
            "the gateway first if you mean to switch to the copy.",
            fg="yellow",
            err=True,
        )


def _full_target_advice(settings: Settings, backend: str) -> str:
    """What to do when the target already holds data, for the backend copied to."""
    if backend == "postgres":
        from memory.store.postgres.database import agent_schema

        schema = agent_schema(settings.agent_id)
        return (
            "Give another, empty database (e.g. `createdb pinch_new`), or, if what is there is "
            f"not needed, drop the agent's schema there (`DROP SCHEMA {schema} CASCADE`), then "
            "run it again."
        )
    return (
        "Give a PATH that does not exist yet (`pinch migrate --to sqlite /path/to/copy.sqlite`), "
        "or move the file there aside if it is not needed, then run it again."
    )


def _refuse_the_same_database(settings: Settings, source: Any, target: Any) -> None:
    """A DSN naming the agent's own database differently: its schema is the source itself."""
    if settings.store.backend != "postgres":
        return
    from memory.store.postgres.schema_state import same_database
    from memory.store.postgres.transfer import PgTarget

    if isinstance(target, PgTarget) and same_database(source, target):
        fail(
            f"The agent is already in that PostgreSQL database ({target.label}; the DSN names "
            "the agent's own database another way): nothing to migrate, nothing was written."
        )


def _warn_if_leased(settings: Settings, source: Any) -> None:
    """On PostgreSQL the gateway serving the agent may run on another machine: its lease says."""
    from app.agents import serving_gateway

    holder = getattr(source, "lease_holder", None)
    found = holder(time.time(), settings.gateway.agent_lease_s) if holder else None
    if found is not None and serving_gateway(settings) is None:  # else already said
        click.secho(
            f"A gateway ({found}) holds agent {settings.agent_id!r}'s lease: it is serving the "
            "agent, and the copy holds only what was written before it began. Stop that gateway "
            "first if you mean to switch to the copy.",
            fg="yellow",
            err=True,
        )


def _run(source: Any, target: Any, advice: str) -> TransferReport:
    from memory.store.transfer import TargetNotEmpty, TransferFailed, transfer

    try:
        return transfer(source, target, progress=_progress())
    except TargetNotEmpty as exc:
        fail(
            f"{exc} `pinch migrate` copies only into an empty target: nothing was written. "
            + advice
        )
        raise  # fail() exits; this keeps the type checker informed
    except TransferFailed as exc:
        for line in exc.report.lines():
            click.echo(line, err=True)
        fail(str(exc))
        raise


def _progress() -> Any:
    """A progress line per table on stderr: at most one a second, and the table's last."""
    shown: list[tuple[str, float]] = [("", 0.0)]

    def show(table: str, done: int, total: int) -> None:
        now = time.monotonic()
        last_table, last_at = shown[0]
        if done < total and table == last_table and now - last_at < _PROGRESS_EVERY_S:
            return
        shown[0] = (table, now)
        click.echo(f"  {table}: {done:,} / {total:,} rows", err=True)

    return show


@contextlib.contextmanager
def _source(settings: Settings) -> Iterator[Any]:
    """The agent's database on its current backend, opened read-only."""
    if settings.store.backend == "postgres":
        from memory.store.postgres.database import agent_schema
        from memory.store.postgres.transfer import open_postgres_source

        with open_postgres_source(
            settings.store.dsn_text(), agent_schema(settings.agent_id)
        ) as source:
            yield source
    else:
        from memory.store.transfer_sqlite import open_sqlite_source

        with open_sqlite_source(settings.database_path) as source:
            yield source


@contextlib.contextmanager
def _target(settings: Settings, backend: str, given: str | None) -> Iterator[Any]:
    """The empty database the agent is copied to."""
    if backend == "postgres":
        from memory.store.postgres.database import agent_schema
        from memory.store.postgres.transfer import open_postgres_target

        on_postgres = settings.store.backend == "postgres"
        dsn = given or ("" if on_postgres else settings.store.dsn_text())
        if not dsn.strip():
            fail(
                "Say which PostgreSQL to copy to: `pinch migrate --to postgres "
                "postgresql://USER@HOST:5432/DATABASE`, or set PINCH_STORE__DSN (keep a password "
                "there or in ~/.pgpass, not on the command line)."
            )
        if on_postgres and dsn == settings.store.dsn_text():
            fail("The agent is already on that PostgreSQL database: nothing to migrate.")
        schema = agent_schema(settings.agent_id)

        def waiting() -> None:
            click.echo(
                f"Waiting for another process on the schema {schema} there (another `pinch "
                "migrate`, or a gateway setting it up); Ctrl-C stops, nothing written…",
                err=True,
            )

        with open_postgres_target(dsn, schema, on_wait=waiting) as target:
            yield target
    else:
        from memory.store.transfer_sqlite import open_sqlite_target

        path = Path(given).expanduser() if given else settings.database_path
        if path.is_dir():
            fail(f"{path} is a folder: give the PATH of a new file (e.g. {path / 'agent.sqlite'}).")
        if (
            settings.store.backend == "sqlite"
            and path.resolve() == settings.database_path.resolve()
        ):
            fail(
                f"The agent already lives in {path}: give another PATH to copy it to "
                "(`pinch migrate --to sqlite /path/to/copy.sqlite`)."
            )
        with open_sqlite_target(path) as file_target:
            yield file_target


def _switch_advice(settings: Settings, backend: str, target_label: str) -> str:
    """What to set so the agent runs on the copy, and how to go back."""
    from app.config_layers import agent_file, env_prefix

    name = settings.agent_id
    config = agent_file(settings.home, name)
    if settings.store.backend == "postgres":
        back = (
            'To go back, set backend = "postgres" and its DSN again: the PostgreSQL schema was '
            "not changed."
        )
    else:
        back = (
            f'To go back, set backend = "sqlite" again: {settings.database_path} was not changed.'
        )
    if backend == "postgres":
        return (
            f"To switch agent {name!r} to PostgreSQL: stop its gateway, set in {config}\n"
            '    [store]\n    backend = "postgres"\n'
            f"and the DSN in the environment (secret): PINCH_STORE__DSN, or "
            f"{env_prefix(name)}STORE__DSN for this agent only — the one copied to: "
            f"{target_label}. Then start the gateway again. {back}"
        )
    path = target_label
    moved = (
        ""
        if Path(path).resolve() == settings.database_path.resolve()
        else f"move {path} to {settings.database_path} (where the agent reads it), then "
    )
    return (
        f"To switch agent {name!r} to SQLite: stop its gateway, {moved}set in {config}\n"
        '    [store]\n    backend = "sqlite"\n'
        "(or remove the [store] table and PINCH_STORE__BACKEND). Then start the gateway again. "
        + back
    )
