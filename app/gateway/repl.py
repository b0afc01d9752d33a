"""`pinch chat`: the owner talks to the agent in the terminal — the `cli` channel of the gateway.

The chat runs the gateway's machinery in this process with one channel, the terminal
(channels/terminal.py): each line goes the same way as a Telegram or Slack message — access (the
terminal user is the owner), session key (the owner's main session, or `--session NAME`, a
thread of it), the durable queue in the agent database, the turn, the streamed delivery. No
Telegram/Slack pollers and no gateway lock, so `pinch gateway` can run beside it: the queue rows
the chat writes are claimed only by this process, and a session lease in the database keeps
the two from running turns of the same session at once (the second waits; the terminal says
"waiting for a reply on Telegram to finish…").

In a terminal, prompt_toolkit reads the message and rich renders the reply as Markdown while it
streams; Ctrl-C cancels the running reply (`Gateway.cancel_turn`), Ctrl-D exits. With stdin or
stdout not a terminal, each input line is one message, replies are plain text, and the exit
status is 1 if any message got no answer.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from agent.projects import start_in_project
from app.gateway.routing import session_key_for
from app.process import Runtime
from app.wiring import build_gateway, build_runtime
from channels.terminal import ChatIO, CliChannel, PipedIO, TerminalIO
from common.printable import printable
from common.redact import redact
from memory.errors import MemoryError_
from memory.store.sessions import SessionKey

if TYPE_CHECKING:
    from app.config import Settings

SLOW_SYNC_S = 0.3  # show "indexing memory…" only when the start-up sync takes longer than this
STOP_GRACE_S = 5.0


def session_key(agent_id: str, name: str | None = None) -> SessionKey:
    """The owner's CLI conversation, or a named one beside it (`pinch chat --session NAME`).

    A named session is a thread of the owner's direct chat: the same private context and memory
    scope, its own history."""
    owner = SessionKey.owner_main(agent_id)
    return replace(owner, thread_id=name) if name else owner


async def run_chat(settings: Settings, *, session: str | None = None) -> int:
    """Run the chat until Ctrl-D or the end of input; returns the exit status."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    console = Console(highlight=False)
    restore_logging = _log_to_file(settings.own_dir / "chat.log")
    try:
        return await _run_chat(settings, session, interactive, console)
    finally:
        restore_logging()


async def _run_chat(
    settings: Settings, session: str | None, interactive: bool, console: Console
) -> int:
    # The model SDK loads in the background while the index syncs (and the owner types).
    async with await build_runtime(settings) as runtime:
        io: ChatIO
        if interactive:
            await _sync_with_status(runtime, console)
            io = TerminalIO(console, settings.own_dir / "chat_history", printable)
        else:
            await _sync_index(runtime, _warn_plain)
            io = PipedIO(printable)
        runtime.watcher.start()
        await runtime.start_mcp()  # ended with the runtime when the chat exits: no orphans
        channel = CliChannel(io, session=session)
        gateway = build_gateway(settings, runtime, {"cli": channel}, chat_claimant=channel.instance)
        key = session_key_for(
            channel.message(""),
            agent_id=settings.agent_id,
            is_owner=True,
            owner_dm_scope=settings.gateway.owner_dm_scope,
        )

        def cancel() -> None:
            gateway.cancel_turn(str(key))

        channel.on_cancel = cancel
        project = await _start_in_folder_project(runtime, key)
        if interactive:
            _greet(console, runtime, session, project)
        await gateway.start()
        try:
            return await channel.finished()
        finally:
            await gateway.stop(STOP_GRACE_S)


async def _start_in_folder_project(runtime: Runtime, key: SessionKey) -> str | None:
    """Start the chat in the project of the folder it runs in (`[projects.NAME] folders`, or a
    git repository named like a project), if any; returns the session's active project."""
    agent = runtime.agent
    known = await asyncio.to_thread(runtime.index.project_counts)
    try:
        project = agent.projects.folder_default(Path.cwd(), known)
    except OSError:  # the folder was deleted or cannot be read: no project from it
        project = None
    if project is not None:
        session = await asyncio.to_thread(start_in_project, runtime.store, key, project)
    else:
        session = await asyncio.to_thread(runtime.store.current, key)
    return agent.projects.active(session)


def _greet(
    console: Console, runtime: Runtime, session: str | None, project: str | None = None
) -> None:
    name = f", session {session}" if session else ""
    name += f", project {project}" if project else ""
    console.print(
        f"[bold]Pinch[/] · {runtime.agent.config.model}{name}\n"
        "[dim]/help lists the commands · Ctrl-C cancels a reply · Ctrl-D exits[/]\n"
    )


async def _sync_index(runtime: Runtime, warn: Callable[[str], None]) -> None:
    try:
        await runtime.sync_index()
    except MemoryError_ as exc:  # chat still works; search serves the last complete index
        warn(f"The memory index could not be updated: {exc}")


async def _sync_with_status(runtime: Runtime, console: Console) -> None:
    """Bring the memory index up to date, saying so when that takes a while."""

    def warn(message: str) -> None:
        console.print(Text(printable(redact(message)), style="red"))

    task = asyncio.ensure_future(_sync_index(runtime, warn))
    done, _ = await asyncio.wait({task}, timeout=SLOW_SYNC_S)
    if not done:
        with console.status("indexing memory…", spinner="dots"):
            await task
    await task


def _warn_plain(message: str) -> None:
    print(printable(redact(message)), file=sys.stderr, flush=True)


def _log_to_file(path: Path) -> Callable[[], None]:
    """Send the chat's log records (tracebacks included) to `path`, redacted, instead of the
    terminal, where Python's last-resort handler would print them between replies; errors the
    owner must see are printed by the chat itself, in one line. Returns the undo."""
    from app.logging_setup import add_redacted_handler

    root = logging.getLogger()
    try:
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        return lambda: None  # no log file: the last-resort handler prints, redacted
    level = root.level
    add_redacted_handler(handler)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()

    return undo
