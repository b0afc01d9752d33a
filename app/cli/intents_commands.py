"""`pinch intents …`: list, show and cancel standing intents."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from app.cli.support import friendly_errors, load_settings

if TYPE_CHECKING:
    from app.config import Settings


@click.group()
def intents() -> None:
    """Standing intents: what Pinch does when something is mentioned ("when someone mentions
    Hangzhou, remind me to confirm the return ticket"). Create them by asking in your chat."""


def _intent_store(settings: Settings) -> Any:
    from app.store_factory import open_agent_database
    from memory.lifecycle.intents import IntentStore

    if settings.store.backend == "sqlite" and not settings.database_path.exists():
        raise ValueError("There is no agent database yet: run `pinch init` or `pinch chat` first.")
    return IntentStore.open(open_agent_database(settings))


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

    settings = load_settings()
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
        where = i.scope.chat + (f" (project {i.scope.project})" if i.scope.project else "")
        click.echo(f"  in {where}, {until if i.active else 'ended ' + _when(i.ended_at, settings)}")


@intents.command("show")
@click.argument("intent_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@friendly_errors
def intents_show(intent_id: int, as_json: bool) -> None:
    """Show one standing intent and every time it fired."""
    import time
    from dataclasses import asdict

    settings = load_settings()
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
    if intent.scope.project:
        click.echo(f"  project:   {intent.scope.project} (fires only while it is active)")
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

    settings = load_settings()
    store = _intent_store(settings)
    try:
        intent = store.cancel(intent_id, now=time.time())
    finally:
        store.db.close()
    click.echo(f"Cancelled standing intent #{intent.id} ({intent.action}).")
