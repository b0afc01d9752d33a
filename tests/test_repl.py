"""`pinch chat`: the installed command, run for real, talking to the scripted model server.

Piped input is one message per line with plain-text replies; on a pseudo-terminal prompt_toolkit
reads keys and rich renders the stream, so Ctrl-C and Ctrl-D are tested as the owner presses them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from app.config import load_settings
from memory.store.db import open_database
from memory.store.sessions import SqliteSessionStore
from tests.agent_support import all_text
from tests.fakes.model_server import FakeModelServer, fault_reply, text_reply

PINCH = Path(sys.executable).parent / "pinch"
API_KEY = "test-key"
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]|\r")


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture(autouse=True)
def home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised home, and the environment (inherited by subprocesses) pointing Pinch at
    the fake server, with keyword-only memory for speed."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    return pinch_home


def run_pinch_chat(lines: str) -> subprocess.CompletedProcess[str]:
    """The installed `pinch chat`, in its own process, with `lines` piped in."""
    return subprocess.run(
        [str(PINCH), "chat"], input=lines, capture_output=True, text=True, timeout=30
    )


def chat(lines: str, *args: str) -> Result:
    """`pinch chat` in this process (faster: the SDKs are imported once), `lines` piped in."""
    return CliRunner().invoke(main, ["chat", *args], input=lines)


# ---- piped: one message per line --------------------------------------------------------------


def test_piped_chat_prints_the_reply_then_the_status(server: FakeModelServer) -> None:
    server.script(text_reply("Hello! How can I *help*?"))

    done = run_pinch_chat("hello\n/status\n")

    assert done.returncode == 0, done.stderr
    reply_at = done.stdout.index("Hello! How can I *help*?")  # plain text, not rendered
    assert done.stdout.index("Model: claude-test") > reply_at
    assert "Memory index:" in done.stdout
    assert [r.last_user_text() for r in server.requests] == ["hello"]  # /status is not sent


def test_piped_chat_exits_non_zero_when_the_last_answer_was_cut_off(
    server: FakeModelServer,
) -> None:
    server.script(fault_reply("cut_off", text="The first half of"))

    done = run_pinch_chat("tell me everything\n")

    assert "The first half of" in done.stdout and "cut off" in done.stdout
    assert done.returncode == 1


def test_piped_chat_exits_zero_when_a_cut_off_answer_was_completed_later(
    server: FakeModelServer,
) -> None:
    server.script(fault_reply("cut_off", text="The first half of"), text_reply("The rest."))

    done = run_pinch_chat("tell me everything\ngo on\n")

    assert "The rest." in done.stdout
    assert done.returncode == 0, done.stderr


def test_a_restarted_chat_resumes_the_same_session(server: FakeModelServer) -> None:
    server.script(text_reply("Noted: locker 4711."), text_reply("It is 4711."))

    first = chat("My locker code is 4711.\n")
    second = run_pinch_chat("What is my locker code?\n")

    assert first.exit_code == second.returncode == 0, first.output + second.stderr
    assert "It is 4711." in second.stdout
    history = all_text(server.requests[1])
    assert "My locker code is 4711." in history
    assert "Noted: locker 4711." in history


def test_a_named_session_has_its_own_history(server: FakeModelServer) -> None:
    server.script(text_reply("Noted."), text_reply("Hi."))

    chat("The usual chat mentions pineapples.\n")
    done = chat("hello\n", "--session", "trip")

    assert done.exit_code == 0, done.output
    assert "pineapples" not in all_text(server.requests[1])


def test_an_ollama_model_needs_no_key(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("PINCH_AGENT__MODEL", "ollama/llama3.2")  # as the README shows
    server.script(text_reply("Hello from llama."))

    done = chat("hello\n")

    assert done.exit_code == 0, done.output
    assert "Hello from llama." in done.stdout
    assert server.requests[0].api == "ollama"


def test_exit_ends_the_chat_before_later_lines() -> None:
    done = chat("/exit\nhello\n")

    assert done.exit_code == 0, done.output
    assert done.stdout == ""


def test_a_missing_api_key_is_one_line_of_advice_and_the_chat_goes_on(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")

    done = chat("hello\n/status\n")

    assert done.stderr.strip().splitlines() == [
        "ANTHROPIC_API_KEY is not set: export it, or choose another model with model = "
        f'"ollama/llama3.2" in {os.environ["PINCH_HOME"]}/config.toml'  # where it really is
    ]
    assert "Model: claude-test" in done.stdout  # the next line was still answered
    assert done.exit_code == 1  # a script learns that a message went unanswered
    assert server.requests == []


def test_invalid_settings_stop_the_chat_with_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINCH_AGENT__TIMEOUT_S", "-1")

    done = chat("hello\n")

    assert done.exit_code == 1
    assert "agent.timeout_s" in done.stderr
    assert "PINCH_AGENT__TIMEOUT_S" in done.stderr
    assert done.exception is None or isinstance(done.exception, SystemExit)


# ---- a real terminal ----------------------------------------------------------------------------


class Terminal:
    """`pinch chat` on a pseudo-terminal: keys in, screen text (escape codes removed) out."""

    def __init__(self, rows: int = 40, cols: int = 120) -> None:
        env = {**os.environ, "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a session leader on the new terminal
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.execve(str(PINCH), [str(PINCH), "chat"], env)
            finally:
                os._exit(127)
        self.screen = ""
        self.seen = 0  # `expect` looks only after what it found last

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while (found := self.screen.find(text, self.seen)) < 0:
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"{text!r} did not appear; the screen:\n{self.screen}")
        self.seen = found + len(text)

    def wait(self, timeout: float = 20) -> int:
        """The exit status, once the program has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(time.monotonic() + 0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"pinch chat did not exit; the screen:\n{self.screen}")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):  # already ended
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)

    def _read(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the program has ended
            return False
        self.screen += ANSI.sub("", data.decode(errors="replace"))
        return bool(data)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    yield term
    term.close()


def test_ctrl_c_cancels_the_running_reply_and_ctrl_d_exits(
    terminal: Terminal, server: FakeModelServer
) -> None:
    server.script(
        text_reply(" ".join(["word"] * 300), chunk_delay_s=0.05),  # 15 s unless cancelled
        text_reply("Second answer."),
    )
    terminal.expect("Ctrl-D exits")
    terminal.expect("›")

    terminal.send("write slowly\r")
    terminal.expect("word word word")
    terminal.send("\x03")  # Ctrl-C while the reply streams
    terminal.expect("(cancelled)")
    terminal.expect("›")
    terminal.send("and now?\r")
    terminal.expect("Second answer.")
    terminal.expect("›")
    terminal.send("\x04")  # Ctrl-D

    assert terminal.wait() == 0
    assert server.requests[1].last_user_text().endswith("and now?")


def test_a_cancelled_message_is_kept_marked_cancelled_and_not_answered_later(
    terminal: Terminal, server: FakeModelServer
) -> None:
    server.script(
        text_reply(" ".join(["word"] * 300), chunk_delay_s=0.05),  # 15 s unless cancelled
        text_reply("Second answer."),
    )
    terminal.expect("›")
    terminal.send("write slowly\r")
    terminal.expect("word word word")
    terminal.send("\x03")  # Ctrl-C while the reply streams
    terminal.expect("(cancelled)")
    terminal.expect("›")
    terminal.send("and now?\r")
    terminal.expect("Second answer.")
    terminal.expect("›")
    terminal.send("\x04")
    assert terminal.wait() == 0

    assert "write slowly" not in json.dumps(server.requests[1].body["messages"])
    settings = load_settings()
    db = open_database(settings.database_path)
    try:
        store = SqliteSessionStore(db)
        events = [e for s in store.all_sessions() for e in store.events(s.id)]
    finally:
        db.close()
    texts = [e.content.get("text") for e in events if e.kind == "user"]
    assert texts == ["write slowly", "and now?"]
    cancelled = [e for e in events if e.content.get("cancelled")]
    assert len(cancelled) == 1 and events[events.index(cancelled[0]) - 1].kind == "user"


# ---- the chat is the gateway's cli channel ------------------------------------------------------


def test_piped_help_lists_the_chats_own_keys() -> None:
    done = chat("/help\n")

    assert done.exit_code == 0, done.output
    assert "/status" in done.stdout
    assert "/exit     leave the chat" in done.stdout


def test_the_chat_runs_beside_a_running_gateway(server: FakeModelServer, home: Path) -> None:
    from app.config import load_settings
    from app.gateway.run import acquire_lock

    server.script(text_reply("Hello beside the gateway."))
    lock = acquire_lock(load_settings().agent_dir / "gateway.lock")  # as `pinch gateway` holds it
    try:
        done = chat("hello\n")  # flock: a second open of the lock file would be refused here too
    finally:
        lock.close()

    assert done.exit_code == 0, done.output
    assert "Hello beside the gateway." in done.stdout


def test_a_chat_message_goes_through_the_gateways_durable_queue(
    server: FakeModelServer, home: Path
) -> None:
    import sqlite3

    from app.config import load_settings

    server.script(text_reply("Queued and answered."))
    assert chat("hello\n").exit_code == 0

    with contextlib.closing(sqlite3.connect(load_settings().agent_dir / "agent.sqlite")) as db:
        rows = db.execute("SELECT channel, state, claimant FROM inbound_queue").fetchall()
    [(channel, state, claimant)] = rows
    assert (channel, state) == ("cli", "done") and claimant.startswith("cli-")


HOLD_THE_MAIN_SESSION = """
import sys
from app.config import load_settings
from app.gateway.queue import GatewayStore, this_process
from memory.store.db import open_database
from memory.store.queue_store import SqliteQueueStore
from memory.store.sessions import SessionKey

db = open_database(load_settings().database_path, vector_backend="numpy")
store = GatewayStore(SqliteQueueStore(db))
me = this_process("telegram", "a-gateway")
store.acquire_lease(str(SessionKey.owner_main("main")), me, stale_s=30)
print("held", flush=True)
sys.stdin.readline()
store.release_lease(str(SessionKey.owner_main("main")), me)
"""


def test_the_chat_waits_while_another_process_writes_the_main_session(
    server: FakeModelServer,
) -> None:
    server.script(text_reply("Your turn now."))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_MAIN_SESSION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    chat = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        chat = subprocess.Popen(
            [str(PINCH), "chat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert chat.stdin is not None and chat.stderr is not None
        chat.stdin.write("hello\n")
        chat.stdin.flush()
        assert chat.stderr.readline() == "waiting for a reply on Telegram to finish…\n"
        assert server.requests == []
        holder.communicate("done\n", timeout=20)  # the Telegram reply is finished
        chat.stdin.close()
        assert chat.wait(timeout=30) == 0
        assert chat.stdout is not None and "Your turn now." in chat.stdout.read()
    finally:
        for process in (holder, chat):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_help_in_the_terminal_lists_the_chats_own_keys(terminal: Terminal) -> None:
    terminal.expect("Ctrl-D exits")
    terminal.expect("›")

    terminal.send("/help\r")
    terminal.expect("/status")
    terminal.expect("/exit     leave the chat")
    terminal.expect("›")
    terminal.send("/exit\r")

    assert terminal.wait() == 0
