"""Slash commands: answered by the agent itself, stored as `command` events, not sent to the model.

/new, /reset   start a fresh session (the old one becomes a note in memory/, and stays searchable)
/status        model, context size, compactions, usage, memory index state, last recall
/context list  what the next request contains, one line per part, in tokens
/context detail  the same per bootstrap file, tool schema, MCP server, skill and turn
/skills        the skills in skills/ (name, description) and any malformed SKILL.md
/project       the session's project (and the known ones); /project NAME sets it, none clears it
/help          this list
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Protocol

from agent.active_memory import ActiveMemory
from agent.agent_config import AgentConfig
from agent.compaction import Compactor
from agent.context import Context, render_context
from agent.policy import policy_for
from agent.projects import ProjectDirectory, project_command
from agent.skills import SkillSet, discover_skills
from common.clock import Clock
from memory.index.index import IndexStatus, MemoryIndex
from memory.store.sessions import Session, SessionKey, SessionStore

HELP = {
    "/new": "start a fresh session; the current one is saved as a note in memory/",
    "/reset": "the same as /new",
    "/status": "model, context size, compactions, token usage, memory index state",
    "/context": "list | detail — what the model sees on the next turn, in tokens",
    "/skills": "the skills in skills/ the assistant may use, and any malformed one",
    "/project": "NAME | none — the project this session is in (memory prefers its notes)",
    "/help": "this list",
}
_COMMAND_WORD = re.compile(r"/[A-Za-z_]+(?:@\w+)?")


@dataclass(frozen=True)
class Command:
    name: str  # "/new", "/status", … (or an unknown "/word")
    argument: str
    text: str  # as typed


@dataclass(frozen=True)
class CommandResult:
    text: str
    follow_up: str | None = None  # a message to handle after the command ("/new <message>")


@dataclass(frozen=True)
class AgentStatus:
    """What /status shows: the model, the session, its context size and usage, the index."""

    model: str
    fallback_models: tuple[str, ...]
    session: Session
    context_tokens: int
    threshold: int
    context_window: int
    usage_totals: dict[str, int]
    index: IndexStatus
    project: str | None = None  # the session's active project


class CommandHost(Protocol):
    """What the commands use of the agent (`agent.runtime.Agent` is one)."""

    @property
    def store(self) -> SessionStore: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def config(self) -> AgentConfig: ...
    @property
    def compactor(self) -> Compactor: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def recall(self) -> object: ...  # an `ActiveMemory` reports its last recall in /status
    @property
    def projects(self) -> ProjectDirectory: ...
    @property
    def index(self) -> MemoryIndex: ...

    async def new_session(self, key: SessionKey) -> tuple[Session, str | None, bool]: ...
    async def status(self, key: SessionKey) -> AgentStatus: ...
    async def context(self, key: SessionKey) -> Context: ...


def parse_command(text: str) -> Command | None:
    """The command `text` is, or None for an ordinary message (including paths like /etc/hosts)."""
    stripped = text.strip()
    parts = stripped.split(None, 1)
    if not parts or not _COMMAND_WORD.fullmatch(parts[0]):
        return None
    name = parts[0].split("@", 1)[0].lower()  # Telegram adds @botname in groups
    return Command(name, parts[1].strip() if len(parts) > 1 else "", stripped)


async def run_command(
    agent: CommandHost, key: SessionKey, command: Command, *, channel: str | None = None
) -> CommandResult:
    """Answer `command` in `key`'s conversation; the command is stored as a `command` event.
    `channel` (where it arrived) decides whether columns go in a code block (a chat) or stay
    plain lines (the terminal)."""
    session = await asyncio.to_thread(agent.store.current, key)
    await asyncio.to_thread(agent.store.append, session.id, "command", {"text": command.text})
    if command.name in ("/new", "/reset"):
        _, note, pending = await agent.new_session(key)
        saved = f" The last one is saved in {note}." if note else ""
        if pending:
            saved = " The last one is being saved as a note in memory/."
        return CommandResult(f"Started a new session.{saved}", command.argument or None)
    if command.name == "/status":
        text = render_status(await agent.status(key), agent.clock.tz)
        if isinstance(agent.recall, ActiveMemory) and (report := agent.recall.last_turn(key)):
            text += "\n" + report.describe()
        return CommandResult(text)
    if command.name == "/context":
        mode = command.argument.lower() or "list"
        if mode not in ("list", "detail"):
            return CommandResult("Usage: /context list, or /context detail")
        context = await agent.context(key)
        text = render_context(
            context,
            detail=mode == "detail",
            window=agent.config.context_window,
            threshold=agent.compactor.threshold,
        )
        return CommandResult(_columns_for(text, channel or key.channel))
    if command.name == "/skills":
        if not policy_for(key).owner_private:
            return CommandResult("Skills are used in the owner's direct chat only.")
        found = await asyncio.to_thread(discover_skills, agent.workspace)
        return CommandResult(render_skills(found))
    if command.name == "/project":
        return CommandResult(
            await project_command(
                agent.store, agent.projects, key, command.argument, agent.index.project_counts
            )
        )
    if command.name == "/help":
        return CommandResult(render_help())
    return CommandResult(f"Unknown command {command.name}.\n{render_help()}")


def _columns_for(text: str, channel: str) -> str:
    """Columns aligned with spaces stay aligned in a chat only in a code block (fixed width)."""
    return f"```\n{text}\n```" if channel in ("telegram", "slack", "web") else text


def render_skills(found: SkillSet) -> str:
    if not found.skills and not found.problems:
        return "No skills yet: add skills/NAME/SKILL.md (front matter: name, description)."
    lines = [f"Skills ({len(found.skills)}):"] if found.skills else []
    lines += [f"  {s.name} — {s.description}" for s in found.skills]
    lines += [f"  MALFORMED {p.path}: {p.reason}" for p in found.problems]
    return "\n".join(lines)


def render_help() -> str:
    return "Commands:\n" + "\n".join(f"  {name:<9} {what}" for name, what in HELP.items())


def render_status(status: AgentStatus, tz: tzinfo | None = None) -> str:
    fallbacks = (
        f" (fallbacks: {', '.join(status.fallback_models)})" if status.fallback_models else ""
    )
    started = datetime.fromtimestamp(status.session.created_at, tz).strftime("%Y-%m-%d %H:%M")
    u = status.usage_totals
    prompt = u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"]
    index = status.index
    if index.degraded:
        search = f"DEGRADED, {index.degraded}"
    else:
        search = f"hybrid, embeddings {index.provider}/{index.model or 'default'}, "
        search += f"vectors {index.vector_backend}"
    lines = [
        f"Model: {status.model}{fallbacks}",
        f"Session: {status.session.id[:8]}, started {started}, "
        f"{status.session.compactions} compaction(s); project {status.project or 'none'}",
        f"Context: ~{status.context_tokens:,} of {status.context_window:,} tokens "
        f"(memory flush and compaction at {status.threshold:,})",
        f"Usage this session: {prompt:,} prompt tokens ({u['cache_read_tokens']:,} read from "
        f"cache, {u['cache_write_tokens']:,} written to it), {u['output_tokens']:,} output, "
        f"{u['calls']} call(s)",
        f"Memory index: {index.files} files, {index.chunks} chunks; search {search}"
        + (" (rebuild pending)" if index.pending_rebuild else ""),
    ]
    if index.problems:
        lines.append(f"  {len(index.problems)} file(s) could not be indexed: `pinch memory status`")
    return "\n".join(lines)
