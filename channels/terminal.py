"""The terminal as a channel: `pinch chat` is one more channel of the gateway.

    channel = CliChannel(TerminalIO(console, history_path) or PipedIO(), clean=printable)
    channel.on_cancel = lambda: gateway.cancel_turn(key)    # Ctrl-C while a reply runs
    await channel.start(gateway.on_message)                   # reads lines until Ctrl-D / EOF
    status = await channel.finished()                         # the chat's exit status

Each line typed (or piped) becomes an `InboundMessage` on channel "cli" from the owner, and goes
the same way as a Telegram or Slack message: access, session key, durable queue, turn, delivery.
The reply streams in through `send`/`edit` like any platform message; when the turn is over the
gateway hands the channel its `TurnOutcome` (answered, a command's output, failed, cancelled),
because the terminal shows each differently (a command's lines verbatim, an error in red or on
stderr, "(cancelled)"). The next line is read only after the reply, as in a conversation.

Interactive: prompt_toolkit reads the line (history file, Esc Enter for a new line), rich renders
the reply as Markdown while it streams; Ctrl-C cancels the running reply, Ctrl-D exits. Piped:
one message per input line, replies as plain text on stdout, one line on stderr per failed
message and exit status 1 if any message got no answer or the last answer was cut off.

Nothing here imports from app/: text is made safe for the terminal by the `clean` function the
caller passes (common.printable.printable).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

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

from channels.base import (
    Channel,
    ChannelHealth,
    InboundMessage,
    MessageHandler,
    OutboundMessage,
    SentMessage,
)

EXIT_COMMANDS = frozenset({"/exit", "/quit"})
CHAT_HELP = "  /exit     leave the chat (or /quit, or Ctrl-D); Ctrl-C cancels a running reply"
PROMPT = "› "
CHAT_ID = "terminal"
OWNER_ID = "owner"


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended, for a channel that presents the end of a turn itself.

    `text`: the reply (answered), the command's output (`command` set), the advice (failed), or
    what had streamed before Ctrl-C (cancelled)."""

    kind: Literal["answered", "silent", "failed", "cancelled"]
    text: str
    command: str | None = None
    cut_off: bool = False  # answered, but the answer stopped early


@runtime_checkable
class TurnAware(Protocol):
    """A channel the gateway tells when a turn ends and while a turn waits for another
    process's turn on the same session (the terminal; platforms need neither)."""

    async def turn_done(self, chat_id: str, outcome: TurnOutcome) -> None: ...

    async def waiting(self, chat_id: str, text: str) -> None: ...


class ChatIO(Protocol):
    """Where the chat's lines come from and its replies go (a terminal or a pipe)."""

    async def read(self) -> str | None:
        """The next message, None at the end of input (Ctrl-D); "" for nothing."""

    def begin(self, cancel: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
        """The time a reply runs: Ctrl-C calls `cancel`."""

    def show(self, text: str) -> None:
        """The reply so far (the whole text, each time)."""

    def status(self, text: str) -> None:
        """A line about the wait (another channel's reply in progress)."""

    def started(self) -> None:
        """The turn has begun after a wait (the wait's line can go)."""

    def end(self, outcome: TurnOutcome, streamed: str) -> bool:
        """Present the turn's end; False when the message got no answer."""


class CliChannel(Channel):
    name = "cli"
    max_message_chars = 1_000_000  # a terminal has no message limit: one reply, one message
    min_edit_interval_s = 0.05

    def __init__(self, io: ChatIO, *, session: str | None = None) -> None:
        self.io = io
        self.session = session  # a named thread of the owner's chat (`--session NAME`)
        self.instance = f"cli-{uuid.uuid4().hex[:12]}"
        self.on_cancel: Callable[[], None] = lambda: None
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[int] | None = None
        self._done: asyncio.Event | None = None
        self._outcome: TurnOutcome | None = None
        self._shown = ""
        self._waited = False

    # -- the Channel interface ------------------------------------------------------------

    async def start(self, on_message: MessageHandler) -> None:
        self._reader = asyncio.ensure_future(self._read_loop(on_message))

    async def stop(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        self._show(message.text)
        return [SentMessage(self.name, message.chat_id, str(next(self._ids)), message.thread_id)]

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        self._show(text)
        return [sent]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        # The reply view shows a spinner until the first words; the gateway types once a turn
        # runs, so after a wait for another process's turn the wait's line gives way.
        if self._waited:
            self._waited = False
            self.io.started()

    async def check(self) -> ChannelHealth:
        return ChannelHealth(True, "terminal")

    # -- TurnAware ------------------------------------------------------------------------

    async def turn_done(self, chat_id: str, outcome: TurnOutcome) -> None:
        self._outcome = outcome
        if self._done is not None:
            self._done.set()

    async def waiting(self, chat_id: str, text: str) -> None:
        self._waited = True
        self.io.status(text)

    # -- the chat -------------------------------------------------------------------------

    async def finished(self) -> int:
        """Wait for Ctrl-D, /exit or the end of input; the exit status (1: some message got
        no answer, or the last answer was cut off)."""
        assert self._reader is not None, "start() first"
        return await self._reader

    def message(self, text: str) -> InboundMessage:
        n = next(self._ids)
        return InboundMessage(
            channel=self.name,
            sender_id=OWNER_ID,
            chat_id=CHAT_ID,
            chat_type="direct",
            text=text,
            message_id=str(n),
            dedup_key=f"{self.instance}:{n}",
            thread_id=self.session,
            mentioned=True,
        )

    async def _read_loop(self, on_message: MessageHandler) -> int:
        status = 0
        cut_off = False  # the last answer stopped early: a script must be able to tell
        while True:
            line = await self.io.read()
            if line is None or (line.strip().lower() in EXIT_COMMANDS):
                return 1 if cut_off else status
            text = line.strip()
            if not text:
                continue
            if not await self._exchange(on_message, text):
                status = 1
            cut_off = self._outcome is not None and self._outcome.cut_off

    async def _exchange(self, on_message: MessageHandler, text: str) -> bool:
        """Hand one message to the gateway and wait for its turn to end."""
        self._done, self._outcome, self._shown = asyncio.Event(), None, ""
        self._waited = False
        with self.io.begin(self.on_cancel):
            try:
                await on_message(self.message(text))
            except Exception as exc:  # the database refused it: nothing will answer
                self._outcome = TurnOutcome("failed", f"Could not queue the message: {exc}")
            else:
                await self._done.wait()
        assert self._outcome is not None
        return self.io.end(self._outcome, self._shown)

    def _show(self, text: str) -> None:
        self._shown = text
        self.io.show(text)


# -- scripts and pipes -------------------------------------------------------------------------


class PipedIO:
    """One message per stdin line; the reply as plain text on stdout while it streams; a failed
    message's advice as one line on stderr."""

    def __init__(self, clean: Callable[[str], str]) -> None:
        self.clean = clean
        self._printed = ""

    async def read(self) -> str | None:
        line = await asyncio.to_thread(sys.stdin.readline)
        return line or None

    @contextlib.contextmanager
    def begin(self, cancel: Callable[[], None]) -> Iterator[None]:
        self._printed = ""
        yield

    def show(self, text: str) -> None:
        if text.startswith(self._printed):  # streamed text only grows; print what is new
            self._write(text[len(self._printed) :])
            self._printed = text

    def status(self, text: str) -> None:
        print(self.clean(text), file=sys.stderr, flush=True)

    def started(self) -> None:
        return None

    def end(self, outcome: TurnOutcome, streamed: str) -> bool:
        if outcome.kind in ("failed", "cancelled"):
            if self._printed:
                self._write("\n")
            if outcome.kind == "failed":
                print(self.clean(outcome.text), file=sys.stderr, flush=True)
            return False
        text = _with_help(outcome)
        if not self._printed:
            self._write(text)
        elif text.startswith(self._printed):
            self._write(text[len(self._printed) :])
        self._write("\n\n")
        return True

    def _write(self, text: str) -> None:
        sys.stdout.write(self.clean(text))
        sys.stdout.flush()


def _with_help(outcome: TurnOutcome) -> str:
    """/help also lists the chat's own keys."""
    return f"{outcome.text}\n{CHAT_HELP}" if outcome.command == "/help" else outcome.text


# -- the terminal ------------------------------------------------------------------------------


class TerminalIO:
    """prompt_toolkit for input, rich for the streamed Markdown reply."""

    def __init__(self, console: Console, history_path: Path, clean: Callable[[str], str]) -> None:

        self.console = console
        self.clean = clean
        bindings = KeyBindings()

        @bindings.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        history_path.parent.mkdir(parents=True, exist_ok=True)
        self.prompt: PromptSession[str] = PromptSession(
            FormattedText([("bold ansicyan", PROMPT)]),
            history=FileHistory(str(history_path)),
            key_bindings=bindings,
            prompt_continuation="  ",
            enable_history_search=False,
        )
        self._view: StreamingMarkdown | None = None
        self._cancelled = False

    async def read(self) -> str | None:
        while True:
            try:
                return await self.prompt.prompt_async()
            except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh line
                continue
            except EOFError:  # Ctrl-D
                return None

    @contextlib.contextmanager
    def begin(self, cancel: Callable[[], None]) -> Iterator[None]:
        self._view = StreamingMarkdown(self.console, self.clean)
        self._cancelled = False

        def on_ctrl_c() -> None:
            self._cancelled = True
            cancel()

        with _on_sigint(on_ctrl_c), _input_hidden(), self._view:
            yield

    def show(self, text: str) -> None:
        if self._view is not None:
            self._view.set(text)

    def status(self, text: str) -> None:
        if self._view is not None:
            self._view.waiting(text)

    def started(self) -> None:
        if self._view is not None and not self._view.text:
            self._view.waiting("thinking…")

    def end(self, outcome: TurnOutcome, streamed: str) -> bool:
        view = self._view
        assert view is not None
        if outcome.kind == "answered" and outcome.command:  # command output is laid out in lines
            self.console.print(Text(self.clean(_with_help(outcome))))
        elif outcome.kind == "answered":
            view.print_markdown(outcome.text or streamed)
        elif streamed:
            view.print_markdown(streamed, dim=True)
        if outcome.kind == "cancelled":
            self.console.print("[dim](cancelled)[/]")
        if outcome.kind == "failed":
            self.console.print(Text(self.clean(outcome.text), style="red"))
        self.console.print()
        return True  # the owner saw what happened; the exit status matters to scripts only


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

    def __init__(self, console: Console, clean: Callable[[str], str]) -> None:

        self.console = console
        self.clean = clean
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

    def set(self, text: str) -> None:
        self.text = self.clean(text)
        self.live.update(_Tail(Markdown(self.text)))

    def waiting(self, text: str) -> None:

        self.live.update(Spinner("dots", text=" " + self.clean(text), style="dim"))

    def print_markdown(self, text: str, *, dim: bool = False) -> None:
        self.console.print(Markdown(self.clean(text)), style="dim" if dim else None)


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
