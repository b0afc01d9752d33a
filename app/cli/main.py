"""The `pinch` command: the top-level group, `pinch init` and `pinch doctor`; the other commands
live beside it, one module per concern (memory_commands, lifecycle_commands, gateway_commands,
intents_commands, jobs, web_commands, mcp_commands — MCP servers and skills). Heavy modules are
imported inside commands so `--help` stays instant."""

from __future__ import annotations

import json
import os
import sys

import click

from app.cli.agents_commands import agents
from app.cli.backup_commands import backup, restore
from app.cli.gateway_commands import chat, gateway, pairing
from app.cli.intents_commands import intents
from app.cli.jobs import jobs
from app.cli.mcp_commands import mcp, skills
from app.cli.memory_commands import memory
from app.cli.migrate_commands import migrate
from app.cli.support import TEMPLATE_DIR, add_agent_option, friendly_errors, load_settings
from app.cli.web_commands import web

__all__ = ["TEMPLATE_DIR", "main"]


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
    from app.agents import select_agent

    ctx.call_on_close(lambda: select_agent(None))  # `--agent` holds for this run only

    from app.logging_setup import install_log_redaction

    install_log_redaction()  # no secret reaches the screen through a log record


@main.command()
@friendly_errors
def init() -> None:
    """Create the home, the workspace (from the template) and the agent database."""
    from app.cli.setup import initialise

    settings = load_settings()
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
    from app.cli.channel_checks import channel_checks
    from app.cli.doctor import CheckResult, gateway_health, run_checks
    from app.config import ConfigError

    try:
        settings = load_settings()
    except ConfigError as exc:
        results = [CheckResult("config", False, " ".join(str(exc).split()))]
    else:
        if health:
            problem = gateway_health(settings)
            click.echo(f"unhealthy: {problem}" if problem else "healthy")
            sys.exit(1 if problem else 0)
        files = [settings.config_path]
        if not settings.is_default_agent:
            from app.config_layers import agent_file

            files.append(agent_file(settings.home, settings.agent_id))
        where = " + ".join(str(f) for f in files if f.exists()) or "defaults"
        results = [CheckResult("config", True, f"valid ({where}; agent {settings.agent_id})")]
        try:
            extra = channel_checks(settings)  # one per configured channel
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


for command in (
    chat,
    gateway,
    pairing,
    memory,
    intents,
    jobs,
    backup,
    restore,
    web,
    mcp,
    skills,
    agents,
):
    main.add_command(command)
main.add_command(migrate)  # pinch migrate --to postgres|sqlite (issue 19)
add_agent_option(main)  # `--agent NAME` on every command and group: `pinch --agent bob ...` too

if __name__ == "__main__":
    main()
