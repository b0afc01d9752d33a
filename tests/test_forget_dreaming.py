"""Forgetting a session reaches what Dreaming made of it: its recall signals, the MEMORY.md lines
promoted from its entries, the preimages and undo copies holding them, and DREAMS.md's quotes;
and dreaming again never brings it back.

A real agent database and keyword-only index in tmp_path; the session's entry is appended by the
real WorkspaceWriter with its origin marker and lineage row (what memory_append does); signals are
recorded through `record_recall` (what `MemoryIndex.search` calls); dreams run without a model
(every gated candidate is added).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.dream_run import DreamReport, dream
from app.cli.main import main
from app.config import load_settings
from memory.files.writes import WorkspaceWriter
from memory.index.chunking import hash_text
from memory.index.index import MemoryIndex
from memory.lifecycle.dreaming import DreamingConfig, undo_last
from memory.lifecycle.forget import ForgetPlan, forget, plan_forget
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.hybrid import SearchHit
from memory.search.signal_recording import record_recall
from memory.store.lineage import LineageStore, record_session_note
from memory.store.sessions import SqliteSessionStore
from tests.agent_support import OWNER

NOW = datetime(2026, 11, 5, 3, 0)
DAY = datetime(2026, 11, 3, 12, 0)
LOG = "memory/2026-11-03.md"
MEMORY = "# MEMORY.md\n\n- The owner lives in Lisbon.\n"
OWNER_LOG = "# 2026-11-03\n\n- The owner prefers window seats on long flights.\n"  # line 3
SECRET = "The zeppelin leaves Friedrichshafen at 07:10 sharp."
PROMOTED = f"- {SECRET} <!-- source: {LOG}#L4 -->"


@dataclass
class World:
    index: MemoryIndex
    writer: WorkspaceWriter
    sid: str

    @property
    def workspace(self) -> Path:
        return self.index.workspace

    def read(self, rel: str) -> str:
        return (self.workspace / rel).read_text(encoding="utf-8")

    def recall(self, line: int, times: int = 5) -> None:
        """`times` distinct searches over two days, each returning LOG:`line`."""
        for q in range(times):
            hit = SearchHit(LOG, line, line, 0.9, f"line {line}", "memory", "agent")
            record_recall(
                self.index.db, f"query {q} on {line}", [hit], now=datetime(2026, 11, 3 + q % 2)
            )

    def dream(self) -> DreamReport:
        return asyncio.run(
            dream(
                self.index.db, self.workspace, None, DreamingConfig(), budget_chars=20_000, now=NOW
            )
        )

    def signals(self, path: str = LOG) -> list[tuple[int, int]]:
        rows = self.index.db.execute(
            "SELECT start_line, end_line FROM recall_signals WHERE path = ? ORDER BY id", (path,)
        )
        return [(int(r[0]), int(r[1])) for r in rows]

    def plan(self) -> ForgetPlan:
        return plan_forget(self.index, self.sid)

    def forget(self) -> ForgetPlan:
        return forget(self.index, self.writer, self.plan())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A session appended SECRET to the day's log (line 4, just after the owner's line 3)."""
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    (ws / LOG).write_text(OWNER_LOG, encoding="utf-8")
    config = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    index = MemoryIndex.open(ws, tmp_path / "agent.sqlite", config)
    writer = WorkspaceWriter(ws)
    sid = SqliteSessionStore(index.db).current(OWNER).id
    entry = writer.append_daily_entry(f"- {SECRET}", now=DAY, origin="agent", session_id=sid)
    detail = {"hash": hash_text(entry.text), "lines": 1}
    LineageStore(index.db).record(sid, "daily_entry", path=entry.path, detail=detail)
    index.sync()
    yield World(index, writer, sid)
    index.close()


def promoted(world: World, count: int = 1) -> None:
    """Recall the session's entry 5× and dream: it is promoted into MEMORY.md (with `count` - 1
    other entries recalled before)."""
    world.recall(4)
    assert world.dream().promoted == count
    assert PROMOTED in world.read("MEMORY.md")


def listed(plan: ForgetPlan) -> list[tuple[str, str, str | None, str | None, int]]:
    return [(i.kind, i.action, i.path, i.lines, i.count) for i in plan.items]


# ---- recall signals ---------------------------------------------------------------------------


def test_forget_removes_the_sessions_recall_signals_and_keeps_the_owners(world: World) -> None:
    world.recall(4)
    world.recall(3, times=2)  # the owner's line
    world.forget()
    assert world.signals() == [(3, 3), (3, 3)]


def test_signals_below_the_cut_move_up_with_their_lines(world: World) -> None:
    log = world.workspace / LOG
    log.write_text(log.read_text() + "\n- The owner's passport expires in March.\n")  # line 6
    world.recall(6, times=2)
    world.forget()
    [(start, end), _] = world.signals()
    assert (start, end) == (5, 5)
    assert "passport" in log.read_text().splitlines()[start - 1]


def test_the_dry_run_counts_the_recall_signals_that_would_go(world: World) -> None:
    world.recall(4)
    world.recall(3, times=2)
    plan = world.plan()
    assert ("recall_signals", "remove", LOG, None, 5) in listed(plan)
    assert len(world.signals()) == 7  # a dry run changes nothing
    assert ("recall_signals", "remove", LOG, None, 5) in listed(world.forget())


# ---- MEMORY.md promotions ---------------------------------------------------------------------


def test_forget_removes_the_memory_entry_dreaming_promoted_from_the_session(world: World) -> None:
    promoted(world)
    plan = world.plan()
    assert ("memory_entry", "remove", "MEMORY.md", "7", 1) in listed(plan)
    assert PROMOTED in world.read("MEMORY.md")  # not yet: a dry run
    world.forget()
    memory = world.read("MEMORY.md")
    assert "zeppelin" not in memory.lower()
    assert memory.startswith(MEMORY)  # the owner's entries stay


def test_a_promotion_from_the_sessions_note_is_removed_with_the_note(world: World) -> None:
    note = "memory/2026-11-03-zeppelin.md"
    text = f"# Zeppelin trip\n<!-- session: {world.sid} | main:cli:direct:owner -->\n\n"
    (world.workspace / note).write_text(text + "- The zeppelin hotel is the Seehotel, room 12.\n")
    record_session_note(world.index.db, world.workspace, world.sid, note)
    world.index.sync()
    for q in range(4):
        hit = SearchHit(note, 4, 4, 0.9, "x", "memory", "agent")
        record_recall(world.index.db, f"hotel {q}", [hit], now=datetime(2026, 11, 3 + q % 2))
    assert world.dream().promoted == 1
    assert f"<!-- source: {note}#L4 -->" in world.read("MEMORY.md")
    world.forget()
    assert "Seehotel" not in world.read("MEMORY.md")
    assert not (world.workspace / note).exists()


def test_a_promoted_entry_the_owner_edited_is_kept_and_reported(world: World) -> None:
    promoted(world)
    memory = world.workspace / "MEMORY.md"
    memory.write_text(memory.read_text().replace("07:10 sharp", "07:15 (checked)"))
    done = world.forget()
    [kept] = [i for i in done.kept if i.kind == "memory_entry"]
    assert kept.path == "MEMORY.md" and "edited by hand" in (kept.reason or "")
    assert "07:15 (checked)" in memory.read_text()


def test_an_unrelated_promotion_stays(world: World) -> None:
    world.recall(3)
    promoted(world, 2)
    world.forget()
    assert "window seats" in world.read("MEMORY.md")


# ---- preimages and undo -----------------------------------------------------------------------


def test_preimages_and_undo_copies_lose_the_forgotten_entry(world: World) -> None:
    promoted(world)
    world.recall(3)  # a second dream: its preimage holds the promoted SECRET
    assert world.dream().promoted == 1
    preimages = sorted((world.workspace / "memory" / ".dreams").glob("MEMORY-*.md"))
    assert any(SECRET in p.read_text() for p in preimages)
    plan = world.plan()
    kinds = [i.kind for i in plan.items]
    assert "dream_preimage" in kinds and "dream_preimage_db" in kinds
    world.forget()
    assert not any(SECRET in p.read_text() for p in preimages)
    copies = world.index.db.execute("SELECT preimage_text FROM dream_runs")
    assert not any(SECRET in str(r[0]) for r in copies)
    undo_last(world.index.db, world.workspace)  # still possible: forget kept its hash in step
    memory = world.read("MEMORY.md")
    assert SECRET not in memory and "window seats" not in memory


# ---- DREAMS.md --------------------------------------------------------------------------------


def test_dreams_md_lines_quoting_the_entry_are_redacted(world: World) -> None:
    world.recall(3)
    promoted(world, 2)
    assert SECRET in world.read("DREAMS.md")
    plan = world.plan()
    assert ("dream_report", "remove", "DREAMS.md", None, 1) in listed(plan)
    world.forget()
    diary = world.read("DREAMS.md")
    assert "zeppelin" not in diary.lower()
    assert f"- {LOG}#L4: (an entry here was removed by `pinch memory forget`)" in diary
    assert "window seats" in diary  # the rest of the report stays


# ---- dreaming again ---------------------------------------------------------------------------


def test_dreaming_after_forget_never_promotes_it_again(world: World) -> None:
    log = world.workspace / LOG
    backup = log.read_text()
    promoted(world)
    world.forget()
    log.write_text(backup)  # even a restored backup of the log
    world.index.sync(force=True)
    world.recall(4)  # and fresh recall signals on its old lines
    report = world.dream()
    assert report.promoted == 0
    assert all(SECRET not in r.candidate.text for r in report.candidates)
    assert "zeppelin" not in world.read("MEMORY.md").lower()
    assert "zeppelin" not in world.read("DREAMS.md").lower()


# ---- the command ------------------------------------------------------------------------------


def test_the_dry_run_command_lists_what_dreaming_holds(pinch_home: Path) -> None:
    runner = CliRunner()
    env = {"PINCH_MEMORY__EMBEDDING__PROVIDER": "none"}
    assert runner.invoke(main, ["init"], env=env).exit_code == 0
    settings = load_settings()
    index = MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)
    writer = WorkspaceWriter(settings.workspace_dir)
    sid = SqliteSessionStore(index.db).current(OWNER).id
    entry = writer.append_daily_entry(f"- {SECRET}", origin="agent", session_id=sid)
    detail = {"hash": hash_text(entry.text), "lines": 1}
    LineageStore(index.db).record(sid, "daily_entry", path=entry.path, detail=detail)
    line = (settings.workspace_dir / entry.path).read_text().splitlines().index(entry.text) + 1
    for q in range(4):
        hit = SearchHit(entry.path, line, line, 0.9, "x", "memory", "agent")
        record_recall(index.db, f"q{q}", [hit])
    index.close()
    out = runner.invoke(main, ["memory", "forget", "--session", sid, "--dry-run"], env=env)
    assert out.exit_code == 0, out.output
    assert f"4 recall signals on {entry.path}" in out.output
