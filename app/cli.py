"""The `pinch` command. Heavy modules are imported inside commands so `--help` stays instant."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from app.config import Settings
    from memory.index import MemoryIndex

F = TypeVar("F", bound=Callable[..., Any])
TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "workspace_template"


def _fail(message: str) -> None:
    click.secho(message, fg="red", err=True)
    sys.exit(1)


def friendly_errors(fn: F) -> F:
    """Turn the errors a user can meet into a one-paragraph message and exit status 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from app.config import ConfigError
        from memory.embeddings import EmbeddingError
        from memory.errors import MemoryError_

        try:
            return fn(*args, **kwargs)
        except (ConfigError, MemoryError_, EmbeddingError, ValueError) as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail("Interrupted; nothing was lost (the index keeps its last complete state).")

    return wrapper  # type: ignore[return-value]


def _settings() -> Settings:
    from app.config import load_settings

    return load_settings()


def _open_index(settings: Settings) -> MemoryIndex:
    from memory.errors import WorkspaceError
    from memory.index import MemoryIndex

    if not settings.workspace_dir.is_dir():
        raise WorkspaceError(
            f"There is no workspace at {settings.workspace_dir}: run `pinch init` first "
            "(or set PINCH_HOME / PINCH_WORKSPACE to where your memory files are)."
        )
    return MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pinch")
def main() -> None:
    """Pinch — a personal AI assistant that remembers, in plain Markdown files.

    Home: ~/.pinch (or $PINCH_HOME): config.toml, workspace/ (your memory files) and
    agents/<id>/agent.sqlite (the index, sessions and jobs).
    """


@main.command()
@friendly_errors
def init() -> None:
    """Create the home, the workspace (from the template) and the agent database."""
    from app.setup import initialise

    settings = _settings()
    created = initialise(settings, TEMPLATE_DIR)
    if created:
        for item in created:
            click.echo(f"created {item}")
        click.echo(
            f"\nPinch is set up. Your memory files are in {settings.workspace_dir}.\n"
            'Next: `pinch memory index`, then `pinch memory search "..."`.'
        )
    else:
        click.echo(f"Already set up in {settings.home}; nothing changed.")


@main.command()
@click.option(
    "--session",
    "session_name",
    metavar="NAME",
    default=None,
    help="A named conversation beside your usual one (its own history, the same memory).",
)
@friendly_errors
def chat(session_name: str | None) -> None:
    """Talk to Pinch in the terminal. Ctrl-C cancels a reply, Ctrl-D exits, /help lists commands.

    With input from a pipe, each line is one message and replies are plain text.
    """
    import asyncio

    from app.repl import run_chat
    from app.setup import initialise

    settings = _settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
        click.secho(f"Set up {settings.home} (as `pinch init` does).", dim=True, err=True)
    sys.exit(asyncio.run(run_chat(settings, session=session_name)))


@main.group()
def memory() -> None:
    """Index, search and read the memory files."""


@memory.command("status")
@click.option("--deep", is_flag=True, help="Also check every file against the index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_status(deep: bool, as_json: bool) -> None:
    """What is indexed, with which model and vector backend, and what is wrong."""
    from dataclasses import asdict

    settings = _settings()
    idx = _open_index(settings)
    try:
        st = idx.status(deep=deep)
    finally:
        idx.close()
    if as_json:
        click.echo(json.dumps(asdict(st), indent=2, ensure_ascii=False))
        return
    click.echo(f"workspace       {st.workspace}")
    click.echo(f"database        {st.database} (SQLite {st.sqlite_version} via {st.driver})")
    embed = f"{st.provider} {st.model} ({st.dimensions} dims)" if st.dimensions else st.provider
    click.echo(f"embeddings      {embed}")
    click.echo(f"vector search   {st.vector_backend}")
    click.echo(f"indexed         {st.files} files, {st.chunks} chunks (generation {st.generation})")
    click.echo(f"embedding cache {st.cache_entries} vectors")
    if st.degraded:
        click.secho(f"DEGRADED        {st.degraded}", fg="yellow")
    if st.pending_rebuild:
        click.secho(
            "pending         the index needs a (re)build: run `pinch memory index`", fg="yellow"
        )
    for path, problem in st.problems.items():
        click.secho(f"problem         {path}: {problem}", fg="yellow")
    if st.dirty_files is not None:
        if st.dirty_files:
            click.echo("changed since last index: " + ", ".join(st.dirty_files))
        else:
            click.echo("every file matches the index")


@memory.command("index")
@click.option("--force", is_flag=True, help="Rebuild everything beside the current index.")
@friendly_errors
def memory_index(force: bool) -> None:
    """Bring the index up to date with the memory files."""
    settings = _settings()
    idx = _open_index(settings)
    try:
        report = _sync_with_progress(idx, force)
    finally:
        idx.close()
    what = "rebuilt" if report.rebuilt else "updated"
    click.echo(
        f"Index {what} in {report.seconds:.1f}s: {len(report.files_indexed)} files indexed, "
        f"{report.files_unchanged} unchanged, {len(report.files_removed)} removed; "
        f"{report.chunks_embedded} passages embedded, {report.chunks_from_cache} from cache."
    )
    for path, problem in report.problems.items():
        click.secho(f"  {path}: {problem}", fg="yellow", err=True)
    degraded = idx.degraded_reason()
    if degraded:
        click.secho(f"Note: search is {degraded}.", fg="yellow", err=True)


def _sync_with_progress(idx: MemoryIndex, force: bool) -> Any:
    if not sys.stderr.isatty():
        return idx.sync(force=force)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("embedding chunks", total=None)

        def on_progress(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total)

        return idx.sync(force=force, on_progress=on_progress)


@memory.command("search")
@click.argument("query")
@click.option(
    "--preset", default=None, help="Search preset: pinch (default), openclaw, keyword, vector."
)
@click.option("--max-results", "-n", type=click.IntRange(1, 100), default=None)
@click.option("--min-score", type=click.FloatRange(0, 1), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_search(
    query: str, preset: str | None, max_results: int | None, min_score: float | None, as_json: bool
) -> None:
    """Search memory by meaning and by keyword."""
    settings = _settings()
    idx = _open_index(settings)
    try:
        hits = idx.search(query, preset=preset, max_results=max_results, min_score=min_score)
        degraded = idx.degraded_reason()
    finally:
        idx.close()
    if as_json:
        out = {"results": [h.to_dict() for h in hits], "degraded": degraded}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    if degraded:
        click.secho(f"({degraded})", fg="yellow", err=True)
    if not hits:
        click.echo("No matching memory found.")
        return
    for h in hits:
        click.secho(f"{h.path}:{h.start_line}-{h.end_line}  score {h.score:.2f}", bold=True)
        for line in h.snippet.splitlines():
            click.echo(f"  {line}")
        click.echo()


@memory.command("get")
@click.argument("path")
@click.option(
    "--from", "from_line", type=int, default=1, show_default=True, help="First line (1-based)."
)
@click.option("--lines", type=int, default=None, help="How many lines (default: to the end).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_get(path: str, from_line: int, lines: int | None, as_json: bool) -> None:
    """Print lines of a memory file (MEMORY.md, USER.md, memory/...)."""
    from dataclasses import asdict

    from memory.workspace import read_memory_lines

    settings = _settings()
    result = read_memory_lines(
        settings.workspace_dir, path, from_line, lines, settings.memory.extra_paths
    )
    if as_json:
        click.echo(json.dumps(asdict(result), ensure_ascii=False))
    elif result.text:
        click.echo(result.text)
    else:
        click.secho(f"(no lines: {result.path} has {result.total_lines})", fg="yellow", err=True)


# ---- standing intents ----------------------------------------------------------------------


@main.group()
def intents() -> None:
    """Standing intents: what Pinch does when something is mentioned ("when someone mentions
    Hangzhou, remind me to confirm the return ticket"). Create them by asking in your chat."""


def _intent_store(settings: Settings) -> Any:
    from memory.db import open_database
    from memory.intents import IntentStore

    if not settings.database_path.exists():
        raise ValueError("There is no agent database yet: run `pinch init` or `pinch chat` first.")
    return IntentStore.open(open_database(settings.database_path))


def _when(ts: float | None, settings: Settings) -> str:
    from datetime import datetime

    from agent.clock import load_timezone

    if ts is None:
        return "never"
    return f"{datetime.fromtimestamp(ts, load_timezone(settings.agent.timezone)):%Y-%m-%d %H:%M}"


@intents.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also done, cancelled and expired ones.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def intents_list(show_all: bool, as_json: bool) -> None:
    """List standing intents (active ones unless --all)."""
    import time
    from dataclasses import asdict

    settings = _settings()
    store = _intent_store(settings)
    try:
        store.expire_due(now=time.time())
        found = store.intents(include_ended=show_all)
    finally:
        store.db.close()
    if as_json:
        click.echo(json.dumps([asdict(i) for i in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("No standing intents." if show_all else "No active standing intents.")
        return
    for i in found:
        triggers = " / ".join(i.triggers)
        click.secho(
            f"#{i.id}  {i.state}  fired {i.fire_count}/{i.max_fires}  on {triggers}", bold=True
        )
        click.echo(f"  {i.action}")
        click.echo(f"  in {i.scope.chat}, until {_when(i.expires_at, settings)}")


@intents.command("show")
@click.argument("intent_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def intents_show(intent_id: int, as_json: bool) -> None:
    """Show one standing intent and every time it fired."""
    import time
    from dataclasses import asdict

    settings = _settings()
    store = _intent_store(settings)
    try:
        store.expire_due(now=time.time())
        intent = store.get(intent_id)
        fires = store.fires(intent_id) if intent else []
    finally:
        store.db.close()
    if intent is None:
        raise ValueError(f"There is no standing intent #{intent_id}: `pinch intents list --all`.")
    if as_json:
        out = {**asdict(intent), "fires": [asdict(f) for f in fires]}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    w = _when
    click.secho(f"#{intent.id}  {intent.state}", bold=True)
    click.echo(f"  do:        {intent.action}")
    click.echo(f"  triggers:  {' / '.join(intent.triggers)} (all words of one must appear)")
    click.echo(f"  scope:     {intent.scope.chat}, messages from the {intent.scope.sender_kind}")
    click.echo(f"  fired:     {intent.fire_count} of {intent.max_fires} times, ")
    click.echo(f"             at least {intent.cooldown_s / 3600:g} h apart")
    click.echo(f"  created:   {w(intent.created_at, settings)} by {intent.creator}")
    click.echo(f"  expires:   {w(intent.expires_at, settings)}")
    if intent.ended_at is not None:
        click.echo(f"  ended:     {w(intent.ended_at, settings)} ({intent.state})")
    for f in fires:
        click.echo(f"  fired at {w(f.fired_at, settings)} in {f.session_key}: {f.excerpt[:80]}")


@intents.command("cancel")
@click.argument("intent_id", metavar="ID", type=int)
@friendly_errors
def intents_cancel(intent_id: int) -> None:
    """Cancel a standing intent (it stays in the history)."""
    import time

    settings = _settings()
    store = _intent_store(settings)
    try:
        intent = store.cancel(intent_id, now=time.time())
    finally:
        store.db.close()
    click.echo(f"Cancelled standing intent #{intent.id} ({intent.action}).")


if __name__ == "__main__":
    main()
