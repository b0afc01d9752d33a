"""`pinch backup` and `pinch restore` (the archive's making and restoring live in app/backup)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.cli.support import fail, friendly_errors, load_settings, open_index

if TYPE_CHECKING:
    from app.backup.manifest import Manifest
    from app.config import Settings


def _say(text: str) -> None:
    """Print `text`, which may quote an archive (its manifest, its config's workspace, file
    names): an archive from elsewhere may not drive the terminal."""
    from common.printable import printable

    click.echo(printable(text))


def _counts_line(counts: dict[str, int]) -> str:
    names = (
        ("transcript_events", "transcript events"),
        ("sessions", "sessions"),
        ("chunks", "chunks"),
        ("jobs", "jobs"),
        ("intents", "intents"),
        ("pairing_approvals", "pairing approvals"),
        ("workspace_files", "workspace files"),
    )
    return ", ".join(f"{counts.get(key, 0):,} {label}" for key, label in names)


def _describe(manifest: Manifest) -> list[str]:
    secrets = "with secrets" if manifest.include_secrets else "secrets left out"
    return [
        f"made {manifest.created_at} by Pinch {manifest.pinch_version} from "
        f"{manifest.source_home} ({secrets})",
        _counts_line(manifest.counts()),
    ]


@click.command()
@click.option(
    "--to",
    "to",
    type=click.Path(),
    help="The archive file, or a folder for it (default: [backup] path, else ~/.pinch/backups).",
)
@click.option(
    "--include-secrets",
    is_flag=True,
    help="Also store the secrets of this environment (tokens, API keys) and credential files.",
)
@friendly_errors
def backup(to: str | None, include_secrets: bool) -> None:
    """Write one archive of the agent (`--agent NAME`; default: the default agent): its
    workspace, its settings file and a consistent snapshot of its database (safe while the
    gateway runs), with a manifest of counts and hashes. Another agent's archives go to a folder
    of their own ([backup] path/NAME)."""
    from app.backup.archive import BackupError, make_backup
    from app.backup.schedule import call_niced

    settings = load_settings()
    try:  # at a lower priority: a running gateway's turns come first
        result = call_niced(lambda: make_backup(settings, to=to, include_secrets=include_secrets))
    except BackupError as exc:
        fail(str(exc))
        return
    click.echo(f"{result.path}  ({result.size / 1e6:.1f} MB, {result.seconds:.1f} s)")
    for line in _describe(result.manifest) + result.notes:
        _say(f"  {line}")
    if include_secrets:
        click.secho("  This archive holds secrets: keep it as safe as your API keys.", fg="yellow")


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Verify the archive and the target; write nothing.")
@friendly_errors
def restore(path: Path, dry_run: bool) -> None:
    """Restore an archive made by `pinch backup` into an empty home (PINCH_HOME or ~/.pinch);
    another agent's archive into <home>/agents/NAME/, beside the agents there.

    The archive is verified (every file's sha256, the manifest, the schema) before anything is
    written; a running gateway's home (or agent), or one with data in it, is refused."""
    from app.agents import selected_agent
    from app.backup.restore import RestoreError, restore_backup
    from app.config import load_settings as installation_settings

    # The agent may not exist yet (restoring it creates it): the installation's settings, and
    # the archive says which agent it holds.
    settings = installation_settings()
    try:
        report = restore_backup(settings, path, agent=selected_agent(), dry_run=dry_run)
    except RestoreError as exc:
        fail(str(exc))
        return
    for line in _describe(report.manifest):
        _say(line)
    if dry_run:
        _say(
            f"The archive is whole. It would be restored into {report.home} (workspace "
            f"{report.workspace}); nothing was written (--dry-run)."
        )
        return
    _say(f"Restored into {report.home} (workspace {report.workspace}).")
    expected = report.manifest.counts()
    mismatched = [k for k, v in report.restored.items() if expected.get(k) != v]
    if mismatched:
        fail(f"Restored, but the counts differ from the manifest's: {', '.join(mismatched)}.")
    _say("Counts checked against the manifest: equal.")
    for note in report.notes:
        _say(note)
    if report.agent is not None:
        _say(f"Agent {report.agent!r} is back: `pinch agents list` shows it.")
        _say(index_advice(installation_settings(agent_id=report.agent)))
    else:
        _say(index_advice(load_settings()))


def index_advice(settings: Settings) -> str:
    """What the memory index of the restored home needs (a re-index is not a failure)."""
    try:
        index = open_index(settings)
    except Exception as exc:  # the restore itself succeeded; the index is advice
        return f"Index: could not be checked ({exc}); run `pinch memory index`."
    try:
        status = index.status(deep=True)
    finally:
        index.close()
    if status.generation is None:
        return "Index: none yet; run `pinch memory index` to build it from the restored files."
    if status.pending_rebuild:
        return (
            "Index: built with other settings (embedding model or chunking) than this "
            "installation's; run `pinch memory index --force` to rebuild it. Keyword search "
            "works meanwhile."
        )
    dirty = status.dirty_files or []
    if dirty:
        return (
            f"Index: {len(dirty)} file(s) changed since it was last updated; `pinch memory "
            "index` (or the gateway's start) brings it up to date."
        )
    return f"Index: up to date ({status.files} files, {status.chunks} chunks)."
