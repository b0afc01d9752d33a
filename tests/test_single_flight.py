"""One sync at a time in a process: the watcher, agent writes and transcript indexing all call
`MemoryIndex.sync()` from their own threads; calls that arrive while a sync runs share one
following run, and nothing they do disturbs a rebuild in flight.

A gate stops the running sync just before it chunks a file (threading events, no sleeps).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import memory.index.sync
from memory.errors import WorkspaceError
from memory.index.index import MemoryIndex
from memory.index.sync import SyncReport
from tests.conftest import IndexFactory, WorkspaceFactory

FILES = {
    "MEMORY.md": "# Memory\n\n- The cat is called Tom.\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\nWent hiking in the Alps.\n",
}


@dataclass
class Gate:
    """Once armed, stops the next sync that chunks a file until released."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    armed: bool = False

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def gated(*args: Any, **kwargs: Any) -> Any:
            if self.armed:
                self.armed = False
                self.entered.set()
                assert self.release.wait(30), "the test never released the gate"
            return real(*args, **kwargs)

        return gated


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    monkeypatch.setattr(
        memory.index.sync, "chunk_markdown", g.wrap(memory.index.sync.chunk_markdown)
    )
    yield g
    g.release.set()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=6) as executor:
        yield executor


def count_runs(idx: MemoryIndex) -> list[bool]:
    """Record the `force` of every sync run the index actually performs."""
    runs: list[bool] = []
    real = idx._pipeline.run

    def counted(**kwargs: Any) -> SyncReport:
        runs.append(kwargs["force"])
        return real(**kwargs)

    idx._pipeline.run = counted  # type: ignore[method-assign]
    return runs


def wait_until_queued(idx: MemoryIndex, callers: int) -> None:
    """Block until `callers` sync calls are waiting for the following run."""
    flight = idx._flight
    with flight._cv:
        assert flight._cv.wait_for(lambda: sum(flight._waiters.values()) >= callers, timeout=10)


def test_calls_during_a_sync_share_one_following_run(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, gate: Gate, pool: ThreadPoolExecutor
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    (ws / "MEMORY.md").write_text("# Memory\n\n- The cat is called Felix now.\n")
    runs = count_runs(idx)
    gate.armed = True
    first = pool.submit(idx.sync)
    assert gate.entered.wait(10)
    (ws / "memory" / "2026-01-11.md").write_text("Bought a kayak.\n")  # while the first runs

    waiting = [pool.submit(idx.sync) for _ in range(4)]
    wait_until_queued(idx, 4)
    gate.release.set()
    reports = [f.result(timeout=30) for f in waiting]

    assert first.result(timeout=30).files_indexed == ["MEMORY.md"]
    assert len(runs) == 2  # the first, and one following run for all four callers
    assert all(r is reports[0] for r in reports)
    assert reports[0].files_indexed == ["memory/2026-01-11.md"]
    assert {h.path for h in idx.search("kayak", preset="keyword")} == {"memory/2026-01-11.md"}


def test_a_rebuild_asked_for_during_a_sync_is_the_following_run(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, gate: Gate, pool: ThreadPoolExecutor
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    (Path(idx.workspace) / "memory" / "2026-01-11.md").write_text("Bought a kayak.\n")
    runs = count_runs(idx)
    gate.armed = True
    plain = pool.submit(idx.sync)
    assert gate.entered.wait(10)

    forced = [pool.submit(idx.sync, force=True), pool.submit(idx.sync)]
    wait_until_queued(idx, 2)
    gate.release.set()

    assert not plain.result(timeout=30).rebuilt
    assert [f.result(timeout=30).rebuilt for f in forced] == [True, True]
    assert runs == [False, True]


def test_an_error_in_the_shared_run_reaches_every_caller(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, gate: Gate, pool: ThreadPoolExecutor
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    (ws / "MEMORY.md").write_text("# Memory\n\n- The cat is called Felix now.\n")
    gate.armed = True
    first = pool.submit(idx.sync)
    assert gate.entered.wait(10)
    waiting = [pool.submit(idx.sync) for _ in range(2)]
    wait_until_queued(idx, 2)
    moved = ws.rename(ws.with_name("moved-away"))

    gate.release.set()

    assert first.result(timeout=30).files_indexed == ["MEMORY.md"]  # it had read the file
    for f in waiting:
        with pytest.raises(WorkspaceError, match="does not exist"):
            f.result(timeout=30)
    moved.rename(ws)
    assert idx.sync().problems == {}  # the index is intact and usable
    assert {h.path for h in idx.search("hiking", preset="keyword")} == {"memory/2026-01-10.md"}


def test_a_sync_during_a_rebuild_leaves_the_rebuild_its_lease(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, gate: Gate, pool: ThreadPoolExecutor
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.sync()
    gate.armed = True
    rebuild: Future[SyncReport] = pool.submit(idx.sync, force=True)
    assert gate.entered.wait(10)
    lease = idx.generations.lease_holder()
    assert lease is not None

    later = pool.submit(idx.sync)  # e.g. the watcher, during the CLI's --force
    wait_until_queued(idx, 1)

    assert idx.generations.lease_holder() == lease  # untouched while it waits
    gate.release.set()
    assert rebuild.result(timeout=30).rebuilt
    assert not later.result(timeout=30).rebuilt
    assert idx.generations.lease_holder() is None
    assert [s for (s,) in idx.db.execute("SELECT state FROM memory_generations")] == ["active"]


def test_another_index_in_the_same_process_syncs_the_live_generation_beside_a_rebuild(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, gate: Gate, pool: ThreadPoolExecutor
) -> None:
    ws = make_workspace(FILES)
    idx = make_index(ws)
    idx.sync()
    live = idx.active_generation()
    assert live is not None
    gate.armed = True
    rebuild = pool.submit(idx.sync, force=True)
    assert gate.entered.wait(10)
    lease = idx.generations.lease_holder()
    other = make_index(ws)  # e.g. a gateway conversation's index on the same database
    (ws / "memory" / "2026-01-11.md").write_text("Bought a kayak.\n")

    report = other.sync()

    assert report.generation == live[0] and not report.rebuilt
    assert report.files_indexed == ["memory/2026-01-11.md"]
    assert other.generations.lease_holder() == lease
    gate.release.set()
    assert rebuild.result(timeout=30).rebuilt
    assert {h.path for h in other.search("kayak", preset="keyword")} == {"memory/2026-01-11.md"}


def test_sync_called_from_inside_a_sync_is_refused(
    make_workspace: WorkspaceFactory, make_index: IndexFactory
) -> None:
    idx = make_index(make_workspace(FILES))
    idx.rebuild_hooks.append(lambda index, generation: index.sync())

    with pytest.raises(RuntimeError, match="inside a sync"):
        idx.sync()

    assert idx.active_generation() is None  # the failed rebuild was dropped
