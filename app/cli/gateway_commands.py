"""`pinch chat`, `pinch gateway` and `pinch pairing …`: talking to Pinch, and who may."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from app.cli.support import TEMPLATE_DIR, fail, friendly_errors, load_settings

if TYPE_CHECKING:
    from app.config import Settings


@click.command()
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

    settings = load_settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
        click.secho(f"Set up {settings.home} (as `pinch init` does).", dim=True, err=True)
    sys.exit(asyncio.run(run_chat(settings, session=session_name)))


@click.command()
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

    settings = load_settings()
    if not settings.workspace_dir.exists():
        initialise(settings, TEMPLATE_DIR)
    configure_logging(settings)
    try:
        sys.exit(asyncio.run(run_gateway(settings, note=lambda line: click.echo(line, err=True))))
    except GatewayError as exc:
        fail(str(exc))


@click.group()
def pairing() -> None:
    """Approve or reject people who asked to talk to Pinch (their pairing codes)."""


def _pairing_store(settings: Settings) -> Any:
    from app.gateway.access import Pairing
    from app.store_factory import open_agent_database
    from memory.store.backends import store_for

    return Pairing(store_for("PairingStore", open_agent_database(settings, vector_backend="numpy")))


@pairing.command("list")
@friendly_errors
def pairing_list() -> None:
    """Pending pairing codes (valid for an hour) and the people already approved."""
    import time

    store = _pairing_store(load_settings())
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
    store = _pairing_store(load_settings())
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
    store = _pairing_store(load_settings())
    try:
        req = store.decide(code, approve=False)
    finally:
        store.close()
    click.echo(f"Rejected the request of {req.channel} user {req.sender_id}.")
