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
@click.option(
    "--agents",
    "agent_list",
    metavar="A,B",
    default=None,
    help="Serve only these agents (comma-separated; default: every agent with a channel "
    "account or a web page of its own; `--agent NAME` serves that one).",
)
@friendly_errors
def gateway(agent_list: str | None) -> None:
    """Run the agents' channels (Telegram, Slack), web pages and memory watchers until stopped.

    Every agent of the installation with a channel account (a Telegram or Slack token of its
    own) or a web page runs in this one process, each answered by its own bot. Several
    `pinch gateway` processes share the agents: each agent is served by one of them at a time
    (a lease; [gateway] agent_lease_s), and another takes it over when that one dies.
    SIGTERM or Ctrl-C lets running replies finish ([gateway] shutdown_grace_s); queued messages
    are answered after the next start.
    """
    import asyncio

    from app.gateway.run import GatewayError, configure_logging, run_agents

    def note(line: str) -> None:
        click.echo(line, err=True)

    listed = _gateway_agents(agent_list, note)
    agents = [s for s in listed if _initialised(s, note, alone=len(listed) == 1)]
    if not agents:
        fail("No agent could start: each one's database stayed locked by another process.")
    from app.web.auth import web_port_clashes

    for line in web_port_clashes(agents):  # said up front; its page's start then fails alone
        note(line)
    configure_logging(agents[0], secrets_of=agents[1:])
    try:
        sys.exit(asyncio.run(run_agents(agents, note=note)))
    except GatewayError as exc:
        fail(str(exc))


def _initialised(settings: Settings, note: Any, *, alone: bool) -> bool:
    """Create the agent's workspace and database the first time it is served. Another gateway
    starting beside this one may be creating them at the same moment: wait for it (a few tries);
    if the database stays locked, leave that agent to the other gateways (the only agent:
    the error, with its advice)."""
    from app.cli.setup import initialise
    from memory.errors import DatabaseError
    from memory.store.db import opened_when_free

    if settings.workspace_dir.exists():
        return True
    try:
        opened_when_free(lambda: initialise(settings, TEMPLATE_DIR))
    except DatabaseError as exc:
        if alone:
            raise
        note(f"{settings.agent_id}: not served by this gateway: {exc}")
        return False
    return True


def _gateway_agents(agent_list: str | None, note: Any) -> list[Settings]:
    """The settings of the agents `pinch gateway` serves: `--agents`, else `--agent`, else every
    agent with something to run (an agent whose settings are broken is reported and left out);
    the default agent alone when none has (its advice then says what to set)."""
    from app.agents import agent_names, load_agent_settings, selected_agent
    from app.config import ConfigError
    from app.config_layers import home_from
    from app.gateway.agent_service import wants_serving

    if agent_list is not None:
        names = [n.strip() for n in agent_list.split(",") if n.strip()]
        if not names:
            fail("--agents needs at least one agent name (e.g. --agents alice,bob).")
        return [load_agent_settings(name) for name in dict.fromkeys(names)]
    if selected_agent() is not None:
        return [load_settings()]
    found: list[Settings] = []
    names = agent_names(home_from({}))
    for name in names:  # listed just now: no need to list them again for each (1,000 agents)
        try:
            settings = load_agent_settings(name, listed=names)
        except ConfigError as exc:
            if len(names) == 1:
                raise
            note(f"{name}: not served ({exc})")
            continue
        if wants_serving(settings):
            found.append(settings)
    return found or [load_settings()]


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
