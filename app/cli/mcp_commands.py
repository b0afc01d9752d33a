"""`pinch mcp list` and `pinch skills list`, and `pinch doctor`'s checks of each MCP server and
of the skills folder.

`pinch mcp list` shows the live state the running gateway (or chat) keeps in
<agent dir>/mcp/status.json — state, tools, last error, restarts. With no Pinch process running
(or with `--probe`) it starts each enabled server the way the gateway does (lazy ones too),
waits for it to be ready or to fail (≤ its `timeout_s`, 30 s at most), prints the same and
stops it again: what the gateway will meet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from typing import TYPE_CHECKING

import click

from app.cli.checks import Check, CheckResult
from app.cli.support import friendly_errors, load_settings
from memory.store.liveness import pid_alive

if TYPE_CHECKING:
    from agent.mcp.connection import ServerStatus
    from app.config import Settings

PROBE_MAX_S = 30.0


@click.group()
def mcp() -> None:
    """MCP servers ([mcp.servers.NAME] in config.toml): their state and tools."""


@mcp.command("list")
@click.option("--probe", is_flag=True, help="Start each server now, even if Pinch is running.")
@friendly_errors
def mcp_list(probe: bool) -> None:
    """Each server: transport, state, tools (as the model sees them), last error."""
    settings = load_settings()
    if not settings.mcp.servers:
        click.echo(
            "No MCP server configured: add [mcp.servers.NAME] with command (and args) or url "
            "to config.toml."
        )
        return
    live = None if probe else live_statuses(settings)
    if live is not None:
        pid, updated, statuses = live
        when = time.strftime("%H:%M:%S", time.localtime(updated))
        click.echo(f"Live, from the running Pinch process {pid} (updated {when}):")
    else:
        statuses = asyncio.run(probe_servers(settings))
    for status in statuses:
        click.echo(describe(status))


def live_statuses(settings: Settings) -> tuple[int, float, list[ServerStatus]] | None:
    """The servers' state as a running gateway or chat last wrote it, or None when no Pinch
    process that wrote it is alive."""
    from agent.mcp.connection import ServerStatus
    from agent.mcp.mcp_tools import STATUS_FILE

    try:
        data = json.loads((settings.agent_dir / "mcp" / STATUS_FILE).read_text("utf-8"))
        pid, updated = int(data["pid"]), float(data["updated"])
        statuses = [
            ServerStatus(**{**s, "tools": tuple(s["tools"])})
            for s in data["servers"]
            if s["name"] in settings.mcp.servers
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, updated, statuses) if _alive(pid) else None


def _alive(pid: int) -> bool:
    """Another process that is still running (this process's own status file is not live)."""
    return 0 < pid != os.getpid() and pid_alive(pid)


def describe(status: ServerStatus) -> str:
    """What `pinch mcp list` prints of one server: tool names and errors come from the server,
    so nothing of them may drive the terminal or show a secret."""
    from agent.mcp.mcp_config import SEPARATOR
    from common.printable import printable
    from common.redact import redact

    restarts = f", restarted {status.restarts} time(s)" if status.restarts else ""
    lines = [f"{status.name}  ({status.transport})  {status.state}{restarts}"]
    if status.tools:
        names = ", ".join(f"{status.name}{SEPARATOR}{t}" for t in status.tools)
        lines.append(f"  tools ({len(status.tools)}): {names}")
    if status.last_error:
        lines.append(f"  last error: {status.last_error}")
    return printable(redact("\n".join(lines)))


async def probe_servers(settings: Settings, only: str | None = None) -> list[ServerStatus]:
    """Start the configured servers (or `only` that one), wait for each to settle, stop them."""
    from agent.mcp.connection import McpConnection

    connections = [
        McpConnection(
            name,
            config.model_copy(update={"lazy": False}),
            stderr_path=settings.agent_dir / "mcp" / f"{name}.probe.stderr.log",
            first_backoff_s=PROBE_MAX_S * 2,  # a probe reports the first attempt: no retry
        )
        for name, config in settings.mcp.servers.items()
        if only in (None, name)
    ]
    try:
        for connection in connections:
            connection.start()
        waits = [min(c.config.timeout_s + 5, PROBE_MAX_S) for c in connections]
        await asyncio.gather(*(c.wait_settled(w) for c, w in zip(connections, waits, strict=True)))
        return [_settled(c.status(), w) for c, w in zip(connections, waits, strict=True)]
    finally:
        await asyncio.gather(*(c.aclose() for c in connections))


def _settled(status: ServerStatus, waited_s: float) -> ServerStatus:
    """A server still starting when the probe gives up says why it is not ready: it never
    answered the MCP handshake (a program that is not an MCP server, or one waiting for
    something)."""
    if status.state != "starting":
        return status
    why = (
        f"no answer to the MCP start-up handshake within {waited_s:g} s: is it an MCP server "
        "speaking stdio (or, with url, streamable HTTP)? Its stderr log may say more"
    )
    return dataclasses.replace(status, state="failed", last_error=why)


def mcp_checks(settings: Settings) -> list[Check]:
    """One `pinch doctor` check per configured MCP server."""

    def check_for(name: str) -> Check:
        async def check(settings: Settings) -> CheckResult:
            config = settings.mcp.servers[name]
            if not config.enabled:
                return CheckResult(f"mcp {name}", True, "disabled")
            (status,) = await probe_servers(settings, only=name)
            if status.state == "ready":
                return CheckResult(f"mcp {name}", True, f"ready, {len(status.tools)} tool(s)")
            why = status.last_error or f"not ready after {config.timeout_s:g} s"
            return CheckResult(f"mcp {name}", False, why)

        check.__name__ = f"mcp {name}"
        return check

    return [check_for(name) for name in settings.mcp.servers]


def check_skills(settings: Settings) -> CheckResult:
    from agent.skills import discover_skills

    found = discover_skills(settings.workspace_dir)
    count = f"{len(found.skills)} skill(s)"
    if found.problems:
        first = found.problems[0]
        more = f" (and {len(found.problems) - 1} more)" if len(found.problems) > 1 else ""
        return CheckResult("skills", False, f"{count}; {first.path}: {first.reason}{more}")
    return CheckResult("skills", True, count)


@click.group()
def skills() -> None:
    """Skills: workspace/skills/NAME/SKILL.md (name and description in YAML front matter)."""


@skills.command("list")
@friendly_errors
def skills_list() -> None:
    """Each skill's name and description, and every malformed SKILL.md with the reason."""
    from agent.skills import SKILLS_DIR, discover_skills

    settings = load_settings()
    found = discover_skills(settings.workspace_dir)
    if not found.skills and not found.problems:
        click.echo(
            f"No skills: add a folder {settings.workspace_dir / SKILLS_DIR}/NAME/ with a "
            "SKILL.md (front matter: name, description; then the instructions)."
        )
        return
    for skill in found.skills:
        click.echo(f"{skill.name}  {skill.description}")
        click.echo(f"  {skill.path}")
    for problem in found.problems:
        click.echo(f"MALFORMED {problem.path}: {problem.reason}")
