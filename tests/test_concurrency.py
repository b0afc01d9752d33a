"""One agent database, several processes: indexers, a rebuild and a chat at once.

Every scenario runs real `pinch` processes on one home. Where an overlap must happen at an exact
point, the process runs the real CLI with a *gate*: a few lines that stop it at that point, say
so on stderr, and go on when the test writes to a pipe — events, not sleeps. Keyword-only memory
(provider "none") keeps each process fast; the model is the scripted fake server.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from tests.fakes.model_server import FakeModelServer, text_reply

REPO = Path(__file__).resolve().parents[1]
API_KEY = "test-key"

# Shared by every gate: pause(label) prints the label on stderr once, then waits for a line on
# the pipe whose descriptor PINCH_TEST_GATE_FD names.
GATE = textwrap.dedent(
    """
    import contextlib, importlib, os, sys
    _gate = os.fdopen(int(os.environ["PINCH_TEST_GATE_FD"]), "r")
    _paused = []

    def pause(label):
        if not _paused:
            _paused.append(label)
            print(label, file=sys.stderr, flush=True)
            _gate.readline()
    """
)

# Stops a sync just before it chunks the first file it reads: it has decided which generation
# to write to and is about to write (old and new code alike).
CHUNK_GATE = GATE + textwrap.dedent(
    """
    import memory.index.chunking
    _real_chunk = memory.index.chunking.chunk_markdown

    def _gated_chunk(*args, **kwargs):
        pause("PAUSED BEFORE WRITING")
        return _real_chunk(*args, **kwargs)

    for _name in ("memory.index.index", "memory.index.sync"):
        with contextlib.suppress(ImportError):
            _module = importlib.import_module(_name)
            if hasattr(_module, "chunk_markdown"):
                _module.chunk_markdown = _gated_chunk
    """
)

# Stops a rebuild once its new generation holds the first file's chunks.
REBUILD_GATE = GATE + textwrap.dedent(
    """
    import memory.store.db
    _real_transaction = memory.store.db.Database.transaction
    _BUILT = (
        "SELECT count(*) FROM memory_chunks c JOIN memory_generations g "
        "ON g.id = c.generation WHERE g.state = 'building'"
    )

    @contextlib.contextmanager
    def _gated_transaction(self):
        with _real_transaction(self) as conn:
            yield conn
        if self.execute(_BUILT)[0][0]:
            pause("REBUILD PAUSED")

    memory.store.db.Database.transaction = _gated_transaction
    """
)

RUN_CLI = "\nfrom app.cli.main import main\nmain(sys.argv[1:], prog_name='pinch')\n"


@dataclass
class Gated:
    """A pinch process with a gate: wait for its label, release it, collect its output."""

    proc: subprocess.Popen[str]
    release_fd: int
    stderr_seen: list[str] = field(default_factory=list)

    def wait_for(self, *labels: str) -> str:
        """Block until stderr shows one of `labels` (returned); fail if the process ends first."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_seen.append(line)
            for label in labels:
                if label in line:
                    return label
        self.proc.wait()
        pytest.fail(f"exited {self.proc.returncode} before {labels}: {''.join(self.stderr_seen)}")

    def release(self) -> None:
        with contextlib.suppress(BrokenPipeError):  # it has exited already
            os.write(self.release_fd, b"go\n")

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        self.release()  # harmless when it never paused: nobody reads the line
        out, err = self.proc.communicate(timeout=timeout)
        os.close(self.release_fd)
        return self.proc.returncode, out, "".join(self.stderr_seen) + err


def start_gated(gate: str, *args: str, stdin: str | None = None) -> Gated:
    read_end, write_end = os.pipe()
    env = {**os.environ, "PINCH_TEST_GATE_FD": str(read_end)}
    proc = subprocess.Popen(
        [sys.executable, "-c", gate + RUN_CLI, *args],
        cwd=REPO,
        env=env,
        pass_fds=(read_end,),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(read_end)
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.stdin = None  # written and closed: communicate() has nothing more to send
    return Gated(proc, write_end)


def run_pinch(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`pinch ARGS` in its own process (python -m, so it runs this checkout's code)."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=API_KEY) as fake:
        yield fake


@pytest.fixture(autouse=True)
def home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised home with a few memory files; subprocesses inherit the environment."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("PINCH_AGENT__MAX_RETRIES", "0")
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    notes = pinch_home / "workspace" / "memory"
    for day in range(1, 6):
        (notes / f"2026-01-0{day}.md").write_text(f"# Day {day}\n\nWalked the dog, day {day}.\n")
    return pinch_home


def open_index(home: Path) -> MemoryIndex:
    config = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    return MemoryIndex.open(home / "workspace", home / "agents" / "main" / "agent.sqlite", config)


def states(home: Path) -> list[str]:
    idx = open_index(home)
    try:
        return [r[0] for r in idx.db.execute("SELECT state FROM memory_generations ORDER BY id")]
    finally:
        idx.close()


def assert_one_live_generation(home: Path) -> None:
    idx = open_index(home)
    try:
        gens = idx.db.execute("SELECT id, state FROM memory_generations")
        assert [state for _, state in gens] == ["active"], gens
        assert idx.db.execute("SELECT * FROM memory_rebuild_lease") == []
        (active,) = gens
        stray = idx.db.execute(
            "SELECT count(*) FROM memory_chunks WHERE generation != ?", (active[0],)
        )
        assert stray == [(0,)]
    finally:
        idx.close()


def keyword_hits(query: str) -> set[str]:
    done = run_pinch("memory", "search", query, "--preset", "keyword", "--json")
    assert done.returncode == 0, done.stderr
    import json

    return {hit["path"] for hit in json.loads(done.stdout)["results"]}


# ---- several indexers -------------------------------------------------------------------------


def test_three_indexers_on_a_fresh_home_build_one_generation(home: Path) -> None:
    indexers = [start_gated(CHUNK_GATE, "memory", "index") for _ in range(3)]
    # One builds (and stops at its gate); the other two see its lease and wait for it.
    events = sorted(p.wait_for("PAUSED BEFORE WRITING", "Already indexing") for p in indexers)
    for p in indexers:
        p.release()

    results = [p.finish() for p in indexers]

    assert events == ["Already indexing", "Already indexing", "PAUSED BEFORE WRITING"]
    assert [rc for rc, _, _ in results] == [0, 0, 0], results
    assert_one_live_generation(home)
    assert keyword_hits("dog") >= {f"memory/2026-01-0{d}.md" for d in range(1, 6)}


def test_an_index_run_during_a_forced_rebuild_waits_for_it(home: Path) -> None:
    assert run_pinch("memory", "index").returncode == 0
    rebuild = start_gated(REBUILD_GATE, "memory", "index", "--force")
    rebuild.wait_for("REBUILD PAUSED")
    # Written after the rebuild listed the files: its catch-up pass must pick it up.
    (home / "workspace" / "memory" / "2026-02-01.md").write_text("Booked a zeppelin ride.\n")

    index = start_gated(GATE, "memory", "index")
    said = index.wait_for("Already indexing")
    rebuild_rc, _, rebuild_err = rebuild.finish()
    index_rc, index_out, index_err = index.finish()

    assert said == "Already indexing"
    assert f"pid {rebuild.proc.pid} on {socket.gethostname()}" in index_err
    assert (rebuild_rc, index_rc) == (0, 0), rebuild_err + index_err
    assert "Index updated after the other process's rebuild" in index_out
    assert_one_live_generation(home)
    assert keyword_hits("zeppelin") == {"memory/2026-02-01.md"}


def test_a_second_forced_rebuild_waits_instead_of_building_beside_the_first(home: Path) -> None:
    assert run_pinch("memory", "index").returncode == 0
    first = start_gated(REBUILD_GATE, "memory", "index", "--force")
    first.wait_for("REBUILD PAUSED")

    second = start_gated(CHUNK_GATE, "memory", "index", "--force")
    event = second.wait_for("Already indexing", "PAUSED BEFORE WRITING")
    results = [first.finish(), second.finish()]

    assert event == "Already indexing"
    assert [rc for rc, _, _ in results] == [0, 0], results
    assert_one_live_generation(home)


def test_a_second_index_run_waits_for_the_first_instead_of_embedding_the_same_files(
    home: Path,
) -> None:
    assert run_pinch("memory", "index").returncode == 0
    (home / "workspace" / "memory" / "2026-02-01.md").write_text("Booked a zeppelin ride.\n")
    first = start_gated(CHUNK_GATE, "memory", "index")
    first.wait_for("PAUSED BEFORE WRITING")

    # Without waiting, it read and wrote the same new file beside the first (with a model:
    # every changed passage embedded twice, twice the time on two cores).
    second = start_gated(CHUNK_GATE, "memory", "index")
    event = second.wait_for("Already indexing", "PAUSED BEFORE WRITING")
    first_rc, _, first_err = first.finish()
    second_rc, second_out, second_err = second.finish()

    assert event == "Already indexing"
    assert f"pid {first.proc.pid} on {socket.gethostname()}" in second_err
    assert (first_rc, second_rc) == (0, 0), first_err + second_err
    assert f"Index updated after the other process's run (pid {first.proc.pid}" in second_out
    assert "0 files indexed" in second_out
    assert_one_live_generation(home)
    assert keyword_hits("zeppelin") == {"memory/2026-02-01.md"}


# ---- chat beside a rebuild --------------------------------------------------------------------


def test_chat_started_during_a_rebuild_answers_and_its_sync_survives_the_swap(
    home: Path, server: FakeModelServer
) -> None:
    server.script(text_reply("Still here."))
    assert run_pinch("memory", "index").returncode == 0
    rebuild = start_gated(REBUILD_GATE, "memory", "index", "--force")
    rebuild.wait_for("REBUILD PAUSED")
    (home / "workspace" / "memory" / "2026-02-01.md").write_text("Booked a zeppelin ride.\n")
    # The chat's start-up sync reads the new file, then stops before writing it to the live
    # generation — which the rebuild then swaps out and drops.
    chat = start_gated(CHUNK_GATE, "chat", stdin="hello\n")
    chat.wait_for("PAUSED BEFORE WRITING")
    rebuild_rc, _, rebuild_err = rebuild.finish()

    chat_rc, chat_out, chat_err = chat.finish()

    assert rebuild_rc == 0, rebuild_err
    assert chat_rc == 0, chat_err
    assert "FOREIGN KEY" not in chat_err
    assert "Still here." in chat_out
    assert_one_live_generation(home)
    assert keyword_hits("zeppelin") == {"memory/2026-02-01.md"}


def test_status_names_the_process_that_is_rebuilding(home: Path) -> None:
    assert run_pinch("memory", "index").returncode == 0
    rebuild = start_gated(REBUILD_GATE, "memory", "index", "--force")
    rebuild.wait_for("REBUILD PAUSED")

    status = run_pinch("memory", "status")
    rc, _, err = rebuild.finish()

    assert status.returncode == 0, status.stderr
    assert f"rebuilding      by pid {rebuild.proc.pid} on {socket.gethostname()}" in status.stdout
    assert rc == 0, err
    assert states(home) == ["active"]
