"""`pinch chat`: the owner talks to the agent in the terminal.

In a terminal, prompt_toolkit reads the message (line editing, history in <home>/chat_history,
Esc Enter for a new line) and rich renders the reply as Markdown while it streams. Ctrl-C cancels
the running reply and returns to the prompt; at the prompt it clears the line; Ctrl-D exits.
With stdin or stdout not a terminal, each input line is one message and replies are plain text, so
`echo "hello" | pinch chat` works in scripts.

The chat is built by `app.wiring.build_runtime`, like the gateway: the same agent database,
the index synced on start and kept in step with edited files (MemoryWatcher) while it is open.
Each line goes to the agent as an `AgentRequest` from the owner (`Agent.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from agent.model_errors import ModelError
from agent.redact import redact
from agent.requests import AgentReply, AgentRequest, Notice, TextDelta
from agent.runtime import Agent
from app.terminal import printable
from app.wiring import Runtime, build_runtime
from memory.errors import MemoryError_
from memory.sessions import SessionKey

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

EXIT_COMMANDS = frozenset({"/exit", "/quit"})
SLOW_SYNC_S = 0.3  # show "indexing memory…" only when the start-up sync takes longer than this
PROMPT = "› "
CHAT_HELP = "  /exit     leave the chat (or /quit, or Ctrl-D); Ctrl-C cancels a running reply"


def session_key(agent_id: str, name: str | None = None) -> SessionKey:
    """The owner's CLI conversation, or a named one beside it (`pinch chat --session NAME`).

    A named session is a thread of the owner's direct chat: the same private context and memory
    scope, its own history."""
    owner = SessionKey.owner_main(agent_id)
    return replace(owner, thread_id=name) if name else owner


async def run_chat(settings: Settings, *, session: str | None = None) -> int:
    """Run the chat until Ctrl-D or the end of input; returns the exit status."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    # The model SDK loads in the background while the index syncs (and the owner types).
    async with await build_runtime(settings) as runtime:
        key = session_key(settings.agent_id, session)
        if interactive:
            terminal = TerminalChat(runtime.agent, key, settings)
            await terminal.sync_index(runtime)
            runtime.watcher.start()
            return await terminal.run()
        await _sync_index(runtime, _warn_plain)
        runtime.watcher.start()
        return await PipedChat(runtime.agent, key).run()


async def _sync_index(runtime: Runtime, warn: Callable[[str], None]) -> None:
    try:
        await runtime.sync_index()
    except MemoryError_ as exc:  # chat still works; search serves the last complete index
        warn(f"The memory index could not be updated: {exc}")


async def ask(agent: Agent, request: AgentRequest, on_text: Callable[[str], None]) -> AgentReply:
    """Run `request`, handing streamed text (and notices) to `on_text`; returns the reply."""
    async for event in agent.run(request):
        if isinstance(event, TextDelta):
            on_text(event.text)
        elif isinstance(event, Notice):
            on_text(event.text + "\n\n")
        else:
            return event.reply
    raise RuntimeError("The agent's turn ended without a reply.")  # run() always ends in Final


def shown_text(reply: AgentReply) -> str:
    """The reply as the chat shows it: /help also lists the chat's own keys."""
    return f"{reply.text}\n{CHAT_HELP}" if reply.command == "/help" else reply.text


def _warn_plain(message: str) -> None:
    print(printable(redact(message)), file=sys.stderr, flush=True)


def _problem(exc: Exception) -> str:
    """One line for a failed message: our own errors are worded as advice; anything else says
    what it was (the chat goes on; the transcript has everything stored before it)."""
    if isinstance(exc, (ModelError, MemoryError_)):
        return str(exc)
    log.debug("A message failed", exc_info=True)
    detail = " ".join(str(exc).split())[:300]
    return f"Something went wrong ({type(exc).__name__}): {detail}"


# -- scripts and pipes -------------------------------------------------------------------------


class PipedChat:
    """One message per input line, replies as plain text on stdout, errors on stderr: one line
    per failed message, and the chat goes on with the next line (every message is stored).

    The exit status is 1 if any message could not be answered, so scripts notice; an answer that
    was cut off still counts as answered (its notice is part of the reply on stdout). Replies are
    printed without control characters or escape sequences (app.terminal.printable)."""

    def __init__(self, agent: Agent, key: SessionKey) -> None:
        self.agent = agent
        self.key = key

    async def run(self) -> int:
        status = 0
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                return status
            text = line.strip()
            if not text:
                continue
            if text.lower() in EXIT_COMMANDS:
                return status
            if not await self._answer(text):
                status = 1

    async def _answer(self, text: str) -> bool:
        streamed = False

        def on_text(delta: str) -> None:
            nonlocal streamed
            streamed = True
            sys.stdout.write(printable(delta))
            sys.stdout.flush()

        try:
            reply = await ask(self.agent, AgentRequest(self.key, text), on_text)
        except Exception as exc:
            if streamed:
                print(flush=True)
            _warn_plain(_problem(exc))
            return False
        print("" if streamed else printable(shown_text(reply)), flush=True)
        print(flush=True)
        return True


# -- the terminal ------------------------------------------------------------------------------


class TerminalChat:
    """prompt_toolkit for input, rich for streamed Markdown replies."""

    def __init__(self, agent: Agent, key: SessionKey, settings: Settings) -> None:
        self.agent = agent
        self.key = key
        self.settings = settings
        self.console = Console(highlight=False)

    async def sync_index(self, runtime: Runtime) -> None:
        """Bring the memory index up to date, saying so when that takes a while."""
        task = asyncio.ensure_future(_sync_index(runtime, self._warn))
        done, _ = await asyncio.wait({task}, timeout=SLOW_SYNC_S)
        if not done:
            with self.console.status("indexing memory…", spinner="dots"):
                await task
        await task

    async def run(self) -> int:
        session = self._prompt_session()
        self._greet()
        while True:
            try:
                text = await session.prompt_async()
            except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh line
                continue
            except EOFError:  # Ctrl-D
                return 0
            text = text.strip()
            if not text:
                continue
            if text.lower() in EXIT_COMMANDS:
                return 0
            await self._answer(text)

    def _prompt_session(self) -> PromptSession[str]:
        bindings = KeyBindings()

        @bindings.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        self.settings.home.mkdir(parents=True, exist_ok=True)
        return PromptSession(
            FormattedText([("bold ansicyan", PROMPT)]),
            history=FileHistory(str(self.settings.home / "chat_history")),
            key_bindings=bindings,
            prompt_continuation="  ",
            enable_history_search=False,
        )

    def _greet(self) -> None:
        name = f", session {self.key.thread_id}" if self.key.thread_id else ""
        self.console.print(
            f"[bold]Pinch[/] · {self.agent.config.model}{name}\n"
            "[dim]/help lists the commands · Ctrl-C cancels a reply · Ctrl-D exits[/]\n"
        )

    async def _answer(self, text: str) -> None:
        view = StreamingMarkdown(self.console)
        task = asyncio.ensure_future(ask(self.agent, AgentRequest(self.key, text), view.add))
        interrupted = False

        def cancel() -> None:
            nonlocal interrupted
            if task.cancel():  # False when the reply has just completed
                interrupted = True

        reply: AgentReply | None = None
        error: str | None = None
        with _on_sigint(cancel), _input_hidden(), view:
            try:
                reply = await task
            except asyncio.CancelledError:
                if not interrupted:
                    raise
            except Exception as exc:  # keep the chat alive; the transcript has what was stored
                error = _problem(exc)
        if view.text:
            view.print_final(dim=reply is None)
        elif reply is not None:
            if reply.command:  # command output is laid out in lines, not Markdown
                self.console.print(Text(printable(shown_text(reply))))
            else:
                view.print_markdown(reply.text)
        if interrupted:
            self.console.print("[dim](cancelled)[/]")
        if error:
            self._warn(error)
        self.console.print()

    def _warn(self, message: str) -> None:
        self.console.print(Text(printable(redact(message)), style="red"))


@contextlib.contextmanager
def _on_sigint(callback: Callable[[], None]) -> Iterator[None]:
    """Call `callback` on Ctrl-C instead of raising KeyboardInterrupt, inside the block."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, callback)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)  # asyncio.run's own handler, not the default


@contextlib.contextmanager
def _input_hidden() -> Iterator[None]:
    """Keys typed while a reply streams are not echoed over it (they wait for the next prompt);
    Ctrl-C still sends SIGINT."""
    import termios

    fd = sys.stdin.fileno()
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ICANON)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class StreamingMarkdown:
    """A reply rendered as Markdown while it streams (a spinner until the first words).

    While streaming, only the tail that fits the screen is live, so a long reply scrolls instead
    of smearing; when it ends the live view is replaced by the whole reply, printed once."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.text = ""
        self.live = Live(
            Spinner("dots", text=" thinking…", style="dim"),
            console=console,
            refresh_per_second=12,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=True,
        )

    def __enter__(self) -> StreamingMarkdown:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def add(self, delta: str) -> None:
        self.text += printable(delta)
        self.live.update(_Tail(Markdown(self.text)))

    def print_final(self, *, dim: bool = False) -> None:
        self.print_markdown(self.text, dim=dim)

    def print_markdown(self, text: str, *, dim: bool = False) -> None:
        self.console.print(Markdown(printable(text)), style="dim" if dim else None)


@dataclass
class _Tail:
    """The last lines of `renderable` that fit the terminal."""

    renderable: RenderableType

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options.update(height=None), pad=False)
        room = max(1, console.size.height - 1)
        for i, line in enumerate(lines[-room:]):
            if i:
                yield Segment.line()
            yield from line
