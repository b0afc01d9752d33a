"""`pinch memory dream` and `pinch memory forget`: the commands that change what memory holds
(added to the `memory` group in app/cli/memory_commands.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from app.cli.support import fail, friendly_errors, load_settings, open_index

if TYPE_CHECKING:
    from app.config import Settings


@click.command("dream")
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
    settings = load_settings()
    if undo:
        _undo_dream(settings, dry_run=dry_run)
        return
    if not settings.dreaming.enabled and not dry_run:
        fail(
            "Dreaming is disabled ([dreaming] enabled = false, or PINCH_DREAMING__ENABLED=false), "
            "so nothing was done. To dream, set enabled = true under [dreaming] in "
            f"{settings.config_path}. `pinch memory dream --undo` works either way."
        )
    try:
        report = asyncio.run(dream_once(settings, phase=phase, dry_run=dry_run))  # type: ignore[arg-type]
    except ModelError as exc:
        fail(
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

    idx = open_index(settings)
    try:
        if dry_run:
            lines = plan_undo(idx.db, settings.workspace_dir).lines()
        else:
            lines = [undo_last(idx.db, settings.workspace_dir)]
    finally:
        idx.close()
    for line in lines:
        click.echo(printable(line))


@click.command("forget")
@click.option(
    "--session",
    "ref",
    required=True,
    metavar="ID|KEY",
    help="A session id or its start (as /status shows it), or a session key (its latest session).",
)
@click.option("--dry-run", is_flag=True, help="List exactly what would go; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def memory_forget(ref: str, dry_run: bool, as_json: bool) -> None:
    """Remove everything one session left in memory, and keep it from coming back."""
    from memory.files.writes import WorkspaceWriter
    from memory.lifecycle.forget import forget, plan_forget

    settings = load_settings()
    idx = open_index(settings)
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
