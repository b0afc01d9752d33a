"""The `pinch` command. Heavy modules are imported inside commands so `--help` stays instant."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from app.config import Settings
    from memory.index.index import MemoryIndex
    from memory.lifecycle.dreaming import LastDream

F = TypeVar("F", bound=Callable[..., Any])
TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "workspace_template"


def _fail(message: str) -> None:
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
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail("Interrupted; nothing was lost (the index keeps its last complete state).")
        except Exception as exc:
            advice = _database_damage(exc)
            if advice is None:
                raise
            _fail(advice)

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
        path = _settings().database_path
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


def _settings() -> Settings:
    from app.config import load_settings

    return load_settings()


def _open_index(settings: Settings) -> MemoryIndex:
    from memory.errors import WorkspaceError
    from memory.index.index import MemoryIndex

    if not settings.workspace_dir.is_dir():
        raise WorkspaceError(
            f"There is no workspace at {settings.workspace_dir}: run `pinch init` first "
            "(or set PINCH_HOME / PINCH_WORKSPACE to where your memory files are)."
        )
    index = MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)
    if not settings.dreaming.enabled:
        from memory.lifecycle.signals import stop_recording

        stop_recording(index.db)  # disabled means nothing is written for it, signals included
    return index


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pinch")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Pinch — a personal AI assistant that remembers, in plain Markdown files.

    Home: ~/.pinch (or $PINCH_HOME): config.toml, workspace/ (your memory files) and
    agents/<id>/agent.sqlite (the index, sessions and jobs).
    """
    # Every file Pinch (or a library it drives: SQLite, the chat history) creates holds the
    # owner's memory or chats: private to the owner whatever the shell's umask.
    previous = os.umask(0o077)
    os.umask(previous | 0o077)
    ctx.call_on_close(lambda: os.umask(previous))

    from app.logging_setup import install_log_redaction

    install_log_redaction()  # no secret reaches the screen through a log record


@main.command()
@friendly_errors
def init() -> None:
    """Create the home, the workspace (from the template) and the agent database."""
    from app.cli.setup import initialise

    settings = _settings()
    created = initialise(settings, TEMPLATE_DIR)
    for item in created:
        click.echo(item)
    if any(item.startswith("created") for item in created):
        click.echo(
            f"\nPinch is set up. Your memory files are in {settings.workspace_dir}.\n"
            'Next: `pinch memory index`, then `pinch memory search "..."`.'
        )
    elif not created:
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

    from app.cli.setup import initialise
    from app.gateway.repl import run_chat

    settings = _settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
        click.secho(f"Set up {settings.home} (as `pinch init` does).", dim=True, err=True)
    sys.exit(asyncio.run(run_chat(settings, session=session_name)))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--offline", is_flag=True, help="Skip the 1-token request to the model.")
@click.option(
    "--health",
    is_flag=True,
    help="Only: is the gateway alive? (fast; for a container HEALTHCHECK).",
)
def doctor(as_json: bool, offline: bool, health: bool) -> None:
    """Check the installation: config, secrets, files, database, index, model, channels.

    One line per check; exit status 1 if any fails. Secrets are shown as set/missing only.
    """
    from app.cli.doctor import CheckResult, gateway_health, plugin_checks, run_checks
    from app.config import ConfigError, load_settings

    try:
        settings = load_settings()
    except ConfigError as exc:
        results = [CheckResult("config", False, " ".join(str(exc).split()))]
    else:
        if health:
            problem = gateway_health(settings)
            click.echo(f"unhealthy: {problem}" if problem else "healthy")
            sys.exit(1 if problem else 0)
        where = settings.config_path if settings.config_path.exists() else "defaults"
        results = [CheckResult("config", True, f"valid ({where})")]
        try:
            extra = plugin_checks(settings)
        except Exception as exc:  # a broken plug-in is one failed check, not a traceback
            extra = []
            results.append(CheckResult("channels", False, f"channel checks unavailable: {exc}"))
        results += run_checks(settings, extra, offline=offline)
    ok = all(r.ok for r in results)
    if as_json:
        click.echo(json.dumps({"ok": ok, "checks": [r.to_dict() for r in results]}, indent=2))
    else:
        for r in results:
            mark = click.style("ok  ", fg="green") if r.ok else click.style("FAIL", fg="red")
            click.echo(f"{mark} {r.name:<10} {r.detail}")
    sys.exit(0 if ok else 1)


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

    from common.printable import printable
    from memory.lifecycle.dreaming import last_dream
    from memory.store.compact import COMPACT_FREE_SHARE

    settings = _settings()
    idx = _open_index(settings)
    try:
        idx.db.check_integrity()  # a damaged page is reported as such, not as odd numbers
        st = idx.status(deep=deep)
        dreams = _dreaming_status(settings, last_dream(idx.db))
    finally:
        idx.close()
    extra = _extra_path_problems(settings)
    if as_json:
        out = {**asdict(st), "extra_paths": extra, "dreaming": dreams}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    click.echo(f"workspace       {st.workspace}")
    click.echo(f"database        {st.database} (SQLite {st.sqlite_version} via {st.driver})")
    embed = f"{st.provider} {st.model} ({st.dimensions} dims)" if st.dimensions else st.provider
    click.echo(f"embeddings      {embed}")
    click.echo(f"vector search   {st.vector_backend}")
    click.echo(f"indexed         {st.files} files, {st.chunks} chunks (generation {st.generation})")
    click.echo(f"embedding cache {st.cache_entries} vectors")
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
    elif st.pending_rebuild:
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

    settings = _settings()
    idx = _open_index(settings)
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
    """Give back the space a rebuild freed (the database file shrinks)."""
    settings = _settings()
    idx = _open_index(settings)
    try:
        _compact(idx, after_rebuild=False)
    finally:
        idx.close()


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def _compact(idx: MemoryIndex, *, after_rebuild: bool) -> None:
    from memory.errors import DatabaseError
    from memory.store.compact import compact, space_usage

    before = space_usage(idx.db)
    if not before.free_bytes:
        click.echo(f"Nothing to compact: {_mb(before.file_bytes)}, no free space inside.")
        return
    click.echo(
        f"Compacting the database ({_mb(before.free_bytes)} of {_mb(before.file_bytes)} free"
        + (", left by the old index)…" if after_rebuild else ")…"),
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


def _extra_path_problems(settings: Any) -> dict[str, str]:
    """Configured extra paths that yield nothing (missing, or a symbolic link), and symbolic
    links in the workspace where memory files would be, with why."""
    from memory.files.workspace import extra_path_problems, skipped_links

    workspace = settings.workspace_dir
    links = skipped_links(workspace) if workspace.is_dir() else {}
    return {**extra_path_problems(workspace, settings.memory.extra_paths), **links}


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
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_search(
    query: str, preset: str | None, max_results: int | None, min_score: float | None, as_json: bool
) -> None:
    """Search memory by meaning and by keyword."""
    from common.printable import printable

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
    for h in hits:  # file names and snippets are the files' own bytes: no escape codes through
        where = printable(f"{h.path}:{h.start_line}-{h.end_line}")
        mark = "  UNTRUSTED (from outside)" if h.untrusted else ""
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

    settings = _settings()
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


@memory.command("dream")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show what would be promoted and why not (with --undo: what would be restored); "
    "write nothing.",
)
@click.option(
    "--phase",
    type=click.Choice(["light", "rem", "deep"]),
    default="deep",
    show_default=True,
    help="Stop after this phase (light: staged notes; rem: recall figures; deep: the gate).",
)
@click.option(
    "--undo",
    is_flag=True,
    help="Restore MEMORY.md as it was before the last dream (works with dreaming disabled).",
)
@click.pass_context
@friendly_errors
def memory_dream(ctx: click.Context, dry_run: bool, phase: str, undo: bool) -> None:
    """Consolidate often-recalled notes into MEMORY.md (what the nightly job does)."""
    import asyncio

    from agent.model.errors import ModelError
    from app.automations.nightly_dream import dream_once
    from common.printable import printable

    if undo and ctx.get_parameter_source("phase") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--undo restores the last dream's saved copy; it takes no --phase.")
    settings = _settings()
    if undo:
        _undo_dream(settings, dry_run=dry_run)
        return
    if not settings.dreaming.enabled and not dry_run:
        _fail(
            "Dreaming is disabled ([dreaming] enabled = false, or PINCH_DREAMING__ENABLED=false), "
            "so nothing was done. To dream, set enabled = true under [dreaming] in "
            f"{settings.config_path}. `pinch memory dream --undo` works either way."
        )
    try:
        report = asyncio.run(dream_once(settings, phase=phase, dry_run=dry_run))  # type: ignore[arg-type]
    except ModelError as exc:
        _fail(
            f"Dreaming needs the model, and it cannot be used: {exc}. Nothing was written. "
            "`pinch memory dream --dry-run` shows what would be promoted without a model."
        )
        return
    for line in report.lines():
        click.echo(printable(line))


def _undo_dream(settings: Settings, *, dry_run: bool) -> None:
    """`--undo`: allowed with dreaming disabled, so a dream that did harm can be undone after
    turning dreaming off."""
    from common.printable import printable
    from memory.lifecycle.dreaming import plan_undo, undo_last

    idx = _open_index(settings)
    try:
        if dry_run:
            lines = plan_undo(idx.db, settings.workspace_dir).lines()
        else:
            lines = [undo_last(idx.db, settings.workspace_dir)]
    finally:
        idx.close()
    for line in lines:
        click.echo(printable(line))


@memory.command("forget")
@click.option(
    "--session",
    "ref",
    required=True,
    metavar="ID|KEY",
    help="A session id, or a session key (then its latest session).",
)
@click.option("--dry-run", is_flag=True, help="List exactly what would go; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_forget(ref: str, dry_run: bool, as_json: bool) -> None:
    """Remove everything one session left in memory, and keep it from coming back."""
    from memory.files.writes import WorkspaceWriter
    from memory.lifecycle.forget import forget, plan_forget

    settings = _settings()
    idx = _open_index(settings)
    try:
        plan = plan_forget(idx, ref)
        if not dry_run:
            plan = forget(idx, WorkspaceWriter(settings.workspace_dir), plan)
    finally:
        idx.close()
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
        return
    if plan.forgotten_at is not None:
        from datetime import datetime

        when = datetime.fromtimestamp(plan.forgotten_at).strftime("%Y-%m-%d %H:%M")
        click.echo(
            f"Session {plan.session_id} ({plan.session_key or 'key unknown'}) was already "
            f"forgotten on {when}; nothing changed. A copy of its note restored from a backup "
            "is indexed as empty (`pinch memory status` lists it): delete the file yourself."
        )
        return
    verb = "Forgot" if plan.done else "Would forget"
    click.secho(
        f"{verb} session {plan.session_id} ({plan.session_key or 'key unknown'}):", bold=True
    )
    for item in plan.items:
        where = item.path or ""
        if item.lines:
            where += f" lines {item.lines}"
        what = f"{item.kind} ×{item.count}" if item.count != 1 else item.kind
        if item.kind == "recall_signals":
            what = f"{item.count} recall signals on"
        elif item.kind == "dream_preimage_db":
            what = f"{item.count} pre-dream copies of MEMORY.md kept for undo (in the database)"
        if item.action == "keep":
            click.secho(f"  kept     {what} {where} ({item.reason})", fg="yellow")
        else:
            click.echo(f"  {'removed' if plan.done else 'remove '}  {what} {where}".rstrip())
    if not plan.items:
        click.echo("  nothing attributable to it is left")
    if plan.kept:
        click.secho(
            "Kept items were edited by hand after Pinch wrote them: remove them yourself if "
            "you want them gone.",
            fg="yellow",
        )
    if plan.done:
        click.echo(
            "Backups, copies of the workspace and what a model provider already received are "
            "not erased by this."
        )


# -- the gateway and who may use it ------------------------------------------------------------


@main.command()
@friendly_errors
def gateway() -> None:
    """Run every configured channel (Telegram, Slack) and the memory watcher until stopped.

    A channel starts when its token is set (PINCH_TELEGRAM__BOT_TOKEN, PINCH_SLACK__BOT_TOKEN
    and PINCH_SLACK__APP_TOKEN). SIGTERM or Ctrl-C lets running replies finish
    ([gateway] shutdown_grace_s); queued messages are answered after the next start.
    """
    import asyncio

    from app.cli.setup import initialise
    from app.gateway.run import GatewayError, configure_logging, run_gateway

    settings = _settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
    configure_logging(settings)
    try:
        sys.exit(asyncio.run(run_gateway(settings, note=lambda line: click.echo(line, err=True))))
    except GatewayError as exc:
        _fail(str(exc))


@main.group()
def pairing() -> None:
    """Approve or reject people who asked to talk to Pinch (their pairing codes)."""


def _pairing_store(settings: Settings) -> Any:
    from app.gateway.access import Pairing
    from memory.store.db import open_database
    from memory.store.pairing_store import SqlitePairingStore

    return Pairing(
        SqlitePairingStore(open_database(settings.database_path, vector_backend="numpy"))
    )


@pairing.command("list")
@friendly_errors
def pairing_list() -> None:
    """Pending pairing codes (valid for an hour) and the people already approved."""
    import time

    store = _pairing_store(_settings())
    try:
        pending, approved = store.pending(), store.approved()
    finally:
        store.close()
    if not pending:
        click.echo("No pending pairing requests.")
    for req in pending:
        minutes = max(0, int((req.expires_at - time.time()) // 60))
        who = f"{req.sender_id} ({req.sender_name})" if req.sender_name else req.sender_id
        click.echo(f"{req.code}  {req.channel} user {who}, expires in {minutes} min")
    for channel, sender_id, name, _at in approved:
        who = f"{sender_id} ({name})" if name else sender_id
        click.echo(f"approved  {channel} user {who}")


@pairing.command("approve")
@click.argument("code")
@friendly_errors
def pairing_approve(code: str) -> None:
    """Let the person who got CODE send direct messages (groups have their own allowlists)."""
    store = _pairing_store(_settings())
    try:
        req = store.decide(code, approve=True)
    finally:
        store.close()
    who = f"{req.sender_id} ({req.sender_name})" if req.sender_name else req.sender_id
    click.echo(f"Approved {req.channel} user {who}: their next message will be answered.")


@pairing.command("reject")
@click.argument("code")
@friendly_errors
def pairing_reject(code: str) -> None:
    """Refuse CODE's request; the person can ask again after an hour."""
    store = _pairing_store(_settings())
    try:
        req = store.decide(code, approve=False)
    finally:
        store.close()
    click.echo(f"Rejected the request of {req.channel} user {req.sender_id}.")


# ---- standing intents ----------------------------------------------------------------------


@main.group()
def intents() -> None:
    """Standing intents: what Pinch does when something is mentioned ("when someone mentions
    Hangzhou, remind me to confirm the return ticket"). Create them by asking in your chat."""


def _intent_store(settings: Settings) -> Any:
    from memory.lifecycle.intents import IntentStore
    from memory.store.db import open_database

    if not settings.database_path.exists():
        raise ValueError("There is no agent database yet: run `pinch init` or `pinch chat` first.")
    return IntentStore.open(open_database(settings.database_path))


def _when(ts: float | None, settings: Settings) -> str:
    from datetime import datetime

    from common.clock import owner_zone

    if ts is None:
        return "never"
    zone = owner_zone(settings.agent.timezone, settings.workspace_dir)
    return f"{datetime.fromtimestamp(ts, zone):%Y-%m-%d %H:%M}"


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
            f"#{i.id}  {i.state} ({i.fire_count} of {i.max_fires})  on {triggers}", bold=True
        )
        click.echo(f"  {i.action}")
        until = f"until {_when(i.expires_at, settings)}"
        click.echo(
            f"  in {i.scope.chat}, {until if i.active else 'ended ' + _when(i.ended_at, settings)}"
        )


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
    hours = intent.cooldown_s / 3600
    click.echo(f"  fired:     {intent.fire_count} of {intent.max_fires} times, {hours:g} h apart")
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


from app.cli.jobs import jobs  # noqa: E402  (its heavy imports happen inside the commands)

main.add_command(jobs)

if __name__ == "__main__":
    main()
