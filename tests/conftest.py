"""Shared fixtures: an isolated Pinch home, workspace factories, and memory indexes on real
SQLite files in tmp_path.

Every test runs with PINCH_HOME in its own tmp_path and no other PINCH_* variable set (but
PINCH_AGENT__RECALL_MODE=triggers: no deep-recall model call unless a test asks for one), so no
test can read or write the developer's ~/.pinch; XDG_RUNTIME_DIR (machine-wide locks) is in
tmp_path too. One PostgreSQL server (pgserver) serves the whole run's PostgreSQL store tests
(tests/pg_support.py), started only when a test asks for it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agent.runtime
from memory.embeddings.providers import create_provider
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.db import Database, open_database
from tests.pg_support import pg_database, pg_dsn, pg_server  # noqa: F401 - fixtures
from tests.store_backends import backend  # noqa: F401 - a fixture

WorkspaceFactory = Callable[..., Path]
IndexFactory = Callable[..., MemoryIndex]


@pytest.fixture(autouse=True)
def collectable() -> Iterator[None]:
    """A long-running process's warm-up ends by freezing the garbage collector's view of what
    is loaded (memory/search/schedule.py); in this one process of many tests, each test ends
    with everything collectable again."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def pinch_home(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """An empty Pinch home in tmp_path, and no PINCH_* setting leaking in from the shell."""
    for name in list(os.environ):
        if name.startswith("PINCH_"):
            monkeypatch.delenv(name)
    home = tmp_path / "pinch-home"
    monkeypatch.setenv("PINCH_HOME", str(home))
    # Deep recall adds a model call before a reply that looks back; tests scripting a model's
    # replies for other features would see it eat one. Tests of recall set the mode themselves.
    monkeypatch.setenv("PINCH_AGENT__RECALL_MODE", "triggers")
    # Machine-wide locks (one poller per Telegram token) live here: tests elsewhere on this
    # machine use the same fake token and must not see this test's lock. (Beside tmp_path, not
    # in it: tests count what they leave in tmp_path.)
    runtime_dir = tmp_path_factory.mktemp("xdg-run")
    runtime_dir.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    # /new answers after at most NOTE_WAIT_S and finishes the note in the background; tests
    # that read the note right after /new wait for it (tests of the background set it back).
    monkeypatch.setattr(agent.runtime, "NOTE_WAIT_S", 60.0)
    return home


@pytest.fixture(scope="session")
def use_model() -> None:
    """Load the USE model once per session (providers share the process-wide instance)."""
    create_provider(EmbeddingConfig(provider="use"))


def use_config(*, batch_size: int = 16, **changes: object) -> MemoryConfig:
    """Memory settings with the fast offline USE embeddings (512 dimensions)."""
    embedding = EmbeddingConfig(provider="use", batch_size=batch_size)
    return MemoryConfig(embedding=embedding, **changes)  # type: ignore[arg-type]


def keyword_config(**changes: object) -> MemoryConfig:
    """Memory settings without embeddings: keyword-only search (the degraded mode)."""
    return MemoryConfig(embedding=EmbeddingConfig(provider="none"), **changes)  # type: ignore[arg-type]


@pytest.fixture
def make_workspace(tmp_path: Path) -> WorkspaceFactory:
    """make_workspace({"MEMORY.md": "...", "memory/2026-01-10.md": b"..."}) -> workspace path.

    Calling it again with the same name adds files to the same workspace.
    """

    def make(files: dict[str, str | bytes] | None = None, name: str = "workspace") -> Path:
        ws = tmp_path / name
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        for rel, content in (files or {}).items():
            path = ws / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        return ws

    return make


@pytest.fixture
def make_index(tmp_path: Path) -> Iterator[IndexFactory]:
    """make_index(workspace, config, db_name="agent.sqlite") -> an open MemoryIndex.

    Defaults to keyword-only settings; every index is closed after the test.
    """
    opened: list[MemoryIndex] = []

    def make(
        workspace: Path, config: MemoryConfig | None = None, db_name: str = "agent.sqlite"
    ) -> MemoryIndex:
        idx = MemoryIndex.open(workspace, tmp_path / db_name, config or keyword_config())
        opened.append(idx)
        return idx

    yield make
    for idx in opened:
        with contextlib.suppress(Exception):  # a test may have closed it already
            idx.close()


@functools.cache
def sqlite_vec_loads() -> bool:
    """Whether this Python's SQLite can load sqlite-vec (pysqlite3 wheels exist for x86_64)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "probe.sqlite")
        try:
            return db.vec_version is not None
        finally:
            db.close()


@pytest.fixture
def vec_db(tmp_path: Path) -> Iterator[Database]:
    """An agent database with sqlite-vec loaded (skips where it cannot load)."""
    if not sqlite_vec_loads():
        pytest.skip("sqlite-vec cannot be loaded by this Python's SQLite")
    db = open_database(tmp_path / "agent.sqlite")
    yield db
    db.close()


@pytest.fixture
def numpy_db(tmp_path: Path) -> Iterator[Database]:
    """An agent database using the numpy vector backend."""
    db = open_database(tmp_path / "agent.sqlite", vector_backend="numpy")
    yield db
    db.close()
