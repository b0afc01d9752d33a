"""Dreaming: the gate, the safe writes of MEMORY.md, undo, the caps, the lease, and "disabled".

A real agent database and keyword-only index in tmp_path; recall signals are recorded through
`record_recall` (what `MemoryIndex.search` calls) with chosen days and scores; the consolidation
model is the scripted FakeModelServer behind the real anthropic SDK.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agent.dream_run import DreamReport, Phase, dream, parse_choice
from memory.errors import WorkspaceError
from memory.index.index import MemoryIndex
from memory.lifecycle.dreaming import (
    Candidate,
    DreamBusyError,
    DreamingConfig,
    Reinforced,
    acquire_lease,
    undo_last,
)
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.hybrid import SearchHit
from memory.search.signal_recording import record_recall
from memory.store.lineage import LineageStore
from tests.agent_support import model_client
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply

NOW = datetime(2026, 11, 5, 3, 0)
LOG = "memory/2026-11-03.md"
MEMORY = "# MEMORY.md\n\n- The owner lives in Lisbon.\n- The owner's cat is called Miso.\n"
NOTES = (
    "# 2026-11-03\n\n"
    "- The owner prefers window seats on long flights.\n"  # line 3
    "- The quarterly report is due on the 15th of each month.\n"  # line 4
    "- Bought oat milk.\n"  # line 5
)
ADDED = text_reply('{"action": "added"}')


def open_index(tmp_path: Path, files: dict[str, str]) -> MemoryIndex:
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (workspace / name).write_text(text, encoding="utf-8")
    config = MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    index = MemoryIndex.open(workspace, tmp_path / "agent.sqlite", config)
    index.sync()
    return index


def recall(
    index: MemoryIndex,
    line: int,
    *,
    queries: int = 3,
    days: int = 2,
    score: float = 0.9,
    path: str = LOG,
    origin: str = "agent",
) -> None:
    """`queries` distinct searches, spread over `days` days, each returning `path`:`line`."""
    for q in range(queries):
        day = 1 + q % days
        hit = SearchHit(path, line, line, score, f"line {line}", "memory", origin)
        record_recall(index.db, f"query {q} about line {line}", [hit], now=datetime(2026, 11, day))


def run(
    index: MemoryIndex,
    server: FakeModelServer | None = None,
    *,
    config: DreamingConfig | None = None,
    phase: Phase = "deep",
    dry_run: bool = False,
    budget: int = 20_000,
    before_write: object = None,
) -> DreamReport:
    model = model_client(server) if server is not None else None
    return asyncio.run(
        dream(
            index.db,
            index.workspace,
            model,
            config or DreamingConfig(),
            budget_chars=budget,
            phase=phase,
            dry_run=dry_run,
            now=NOW,
            before_write=before_write,  # type: ignore[arg-type]
        )
    )


def memory_text(index: MemoryIndex) -> str:
    return (index.workspace / "MEMORY.md").read_text(encoding="utf-8")


@pytest.fixture
def index(tmp_path: Path) -> Iterator[MemoryIndex]:
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: NOTES})
    yield idx
    idx.close()


# ---- promotion and the gate -------------------------------------------------------------------


def test_a_reinforced_note_is_promoted_with_its_source_cited(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        report = run(index, server)
    assert report.promoted == 1
    text = memory_text(index)
    assert (
        "- The owner prefers window seats on long flights. <!-- source: memory/2026-11-03.md#L3 -->"
        in text
    )
    assert text.startswith(MEMORY)  # the prior entries are kept as they were


def test_a_note_never_recalled_is_not_promoted(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        run(index, server)
    assert "oat milk" not in memory_text(index)


@pytest.mark.parametrize(
    ("signals", "reason"),
    [
        ({"score": 0.6}, "score 0.60 < 0.75"),
        ({"queries": 2, "days": 2}, "recalls 2 < 3"),
        ({"days": 1}, "days 1 < 2"),
    ],
)
def test_a_candidate_below_a_threshold_is_not_promoted_and_dry_run_says_why(
    index: MemoryIndex, signals: dict[str, float], reason: str
) -> None:
    recall(index, 4, **signals)  # type: ignore[arg-type]
    report = run(index, dry_run=True)
    line = next(x for x in report.lines() if "quarterly report" in x)
    assert reason in line and "not promoted" in line
    with FakeModelServer([ADDED]) as server:
        assert run(index, server).promoted == 0
        assert server.requests == []  # nothing passed the gate: no model call
    assert memory_text(index) == MEMORY


def test_the_same_query_repeated_is_one_distinct_query(index: MemoryIndex) -> None:
    for day in (1, 2, 3, 4):
        hit = SearchHit(LOG, 4, 4, 0.9, "x", "memory", "agent")
        record_recall(index.db, "Quarterly  REPORT", [hit], now=datetime(2026, 11, day))
    line = next(x for x in run(index, dry_run=True).lines() if "quarterly" in x)
    assert "distinct queries 1 < 3" in line


def test_an_entry_longer_than_160_tokens_is_not_promoted(tmp_path: Path) -> None:
    long_note = "- " + " ".join(f"word{i}" for i in range(400)) + "\n"
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: "# 2026-11-03\n\n" + long_note})
    try:
        recall(idx, 3)
        line = run(idx, dry_run=True).lines()[1]
        assert "tokens" in line and "> 160" in line
    finally:
        idx.close()


def test_the_gate_thresholds_are_settings(index: MemoryIndex) -> None:
    recall(index, 4, queries=1, days=1, score=0.5)
    lenient = DreamingConfig(min_score=0.4, min_recalls=1, min_queries=1, min_days=1)
    with FakeModelServer([ADDED]) as server:
        assert run(index, server, config=lenient).promoted == 1


def test_dry_run_writes_nothing_and_calls_no_model(index: MemoryIndex) -> None:
    recall(index, 3)
    report = run(index, dry_run=True)
    assert any("would be added" in x for x in report.lines())
    assert memory_text(index) == MEMORY
    assert not (index.workspace / "DREAMS.md").exists()
    assert not (index.workspace / "memory" / ".dreams").exists()


def test_light_phase_stages_notes_and_skips_what_memory_already_holds(tmp_path: Path) -> None:
    notes = NOTES + "- The owner lives in Lisbon.\n- Bought oat milk.\n"
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: notes})
    try:
        report = run(idx, phase="light", dry_run=True)
        staged = [r.candidate.text for r in report.candidates]
        assert staged == [
            "- The owner prefers window seats on long flights.",
            "- The quarterly report is due on the 15th of each month.",
            "- Bought oat milk.",
        ]
    finally:
        idx.close()


# ---- the model's choice -----------------------------------------------------------------------


def _item() -> Reinforced:
    return Reinforced(Candidate("k", LOG, 3, 3, "- x", "2026-11-03"))


@pytest.mark.parametrize(
    "answer",
    ["yes", '{"action": "deleted"}', '{"action": "merged"}', '{"action": "merged", "entry": 9}'],
)
def test_an_invalid_answer_is_no_choice(answer: str) -> None:
    assert parse_choice(answer, _item(), 2) is None


def test_an_invalid_answer_skips_that_candidate_only(index: MemoryIndex) -> None:
    recall(index, 3)
    recall(index, 4, score=0.8)
    with FakeModelServer([text_reply("I think it is new!"), ADDED]) as server:
        report = run(index, server)
    assert report.promoted == 1
    text = memory_text(index)
    assert "window seats" not in text and "quarterly report" in text
    assert any("not a valid choice" in x for x in report.lines())


def test_merged_cites_the_note_on_the_existing_entry(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([text_reply('{"action": "merged", "entry": 0}')]) as server:
        run(index, server)
    assert memory_text(index).splitlines()[2] == (
        "- The owner lives in Lisbon. <!-- source: memory/2026-11-03.md#L3 -->"
    )


def test_superseded_replaces_the_entry_when_little_is_dropped(tmp_path: Path) -> None:
    memory = "# MEMORY.md\n\n" + "".join(f"- Fact number {i}.\n" for i in range(4))
    idx = open_index(tmp_path, {"MEMORY.md": memory, LOG: NOTES})
    try:
        recall(idx, 3)
        with FakeModelServer([text_reply('{"action": "superseded", "entry": 1}')]) as server:
            report = run(idx, server)
        text = memory_text(idx)
        assert report.write is not None and report.write.mode == "rewrite"
        assert "Fact number 1." not in text and "window seats" in text
    finally:
        idx.close()


def test_a_rewrite_dropping_more_than_a_quarter_of_entries_is_appended_instead(
    index: MemoryIndex,
) -> None:
    recall(index, 3)  # MEMORY.md has 2 entries: superseding one would drop 50 %
    with FakeModelServer([text_reply('{"action": "superseded", "entry": 0}')]) as server:
        report = run(index, server)
    text = memory_text(index)
    assert report.write is not None and report.write.mode == "append"
    assert text.startswith(MEMORY) and "window seats" in text
    assert "drop 1 of 2" in report.note


# ---- safe writes ------------------------------------------------------------------------------


def test_an_edit_during_the_dream_aborts_the_rewrite_and_is_kept(tmp_path: Path) -> None:
    memory = "# MEMORY.md\n\n" + "".join(f"- Fact number {i}.\n" for i in range(4))
    idx = open_index(tmp_path, {"MEMORY.md": memory, LOG: NOTES})
    edited = memory + "- The owner added this by hand.\n"

    def owner_edits() -> None:
        (idx.workspace / "MEMORY.md").write_text(edited, encoding="utf-8")

    try:
        recall(idx, 3)
        with FakeModelServer([text_reply('{"action": "superseded", "entry": 1}')]) as server:
            report = run(idx, server, before_write=owner_edits)
        text = memory_text(idx)
        assert report.write is not None and report.write.mode == "append"
        assert text.startswith(edited)  # the owner's edit and Fact number 1 survive
        assert "window seats" in text
        assert "changed during the dream" in report.note
    finally:
        idx.close()


def test_the_preimage_is_kept_and_undo_restores_it(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        report = run(index, server)
    assert report.write is not None and report.write.preimage
    assert (index.workspace / report.write.preimage).read_text(encoding="utf-8") == MEMORY
    assert "restored" in undo_last(index.db, index.workspace)
    assert memory_text(index) == MEMORY


def test_undo_refuses_when_memory_was_edited_after_the_dream(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        run(index, server)
    after = memory_text(index) + "- A hand edit.\n"
    (index.workspace / "MEMORY.md").write_text(after, encoding="utf-8")
    with pytest.raises(WorkspaceError, match="edited after the last dream"):
        undo_last(index.db, index.workspace)
    assert memory_text(index) == after


def test_undo_with_no_dream_says_so(index: MemoryIndex) -> None:
    with pytest.raises(WorkspaceError, match="no dream to undo"):
        undo_last(index.db, index.workspace)


def test_memory_stays_within_its_bootstrap_budget(index: MemoryIndex) -> None:
    recall(index, 3)
    recall(index, 4)
    budget = len(MEMORY) + 160  # room for the heading and one entry, not two
    with FakeModelServer([ADDED, ADDED]) as server:
        report = run(index, server, budget=budget)
    assert report.promoted == 1
    assert len(memory_text(index)) <= budget
    assert any("budget" in x for x in report.lines())


def test_each_run_appends_a_report_to_dreams_md(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        run(index, server)
        run(index, server)
    diary = (index.workspace / "DREAMS.md").read_text(encoding="utf-8")
    assert diary.count("## 2026-11-05 03:00 dream #") == 2
    assert "window seats" in diary and "added" in diary


# ---- caps, the lease, disabled ----------------------------------------------------------------


def test_a_run_makes_at_most_max_model_calls(tmp_path: Path) -> None:
    facts = "".join(f"- Distinct fact {i} about topic {i}.\n" for i in range(15))
    notes = "# 2026-11-03\n\n" + facts
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: notes})
    try:
        for line in range(3, 18):
            recall(idx, line)
        with FakeModelServer() as server:
            server.respond_with(lambda _request: text_reply("not json, ask me again"))
            report = run(idx, server)
        assert len(server.requests) == 10 and report.model_calls == 10
        assert sum("model call cap 10 reached" in x for x in report.lines()) == 5
    finally:
        idx.close()


def test_a_run_stops_asking_once_its_token_budget_is_spent(index: MemoryIndex) -> None:
    recall(index, 3)
    recall(index, 4)
    with FakeModelServer() as server:
        server.respond_with(lambda _request: ADDED)
        report = run(index, server, config=DreamingConfig(max_tokens=100))
    assert len(server.requests) == 1
    assert any("token cap 100 reached" in x for x in report.lines())


def test_a_second_run_while_one_holds_the_lease_is_refused(index: MemoryIndex) -> None:
    acquire_lease(index.db, lease_s=600)
    recall(index, 3)
    with FakeModelServer([ADDED]) as server, pytest.raises(DreamBusyError):
        run(index, server)
    assert memory_text(index) == MEMORY


def test_an_expired_lease_does_not_block_forever(index: MemoryIndex) -> None:
    acquire_lease(index.db, lease_s=600, now=0.0)  # a crashed run, long ago
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        assert run(index, server).promoted == 1


def test_disabled_means_nothing_runs_and_nothing_is_written(index: MemoryIndex) -> None:
    recall(index, 3)
    with FakeModelServer([ADDED]) as server:
        report = run(index, server, config=DreamingConfig(enabled=False))
        assert server.requests == []
    assert not report.ran and "disabled" in report.lines()[0]
    assert memory_text(index) == MEMORY
    assert sorted(p.name for p in index.workspace.iterdir()) == ["MEMORY.md", "memory"]
    assert sorted(p.name for p in (index.workspace / "memory").iterdir()) == ["2026-11-03.md"]
    assert index.db.execute("SELECT count(*) FROM dream_runs")[0][0] == 0


def test_a_dream_started_while_another_runs_is_refused(index: MemoryIndex) -> None:
    recall(index, 3)
    first_asked, second_tried = threading.Event(), threading.Event()

    def slow(_request: RecordedRequest) -> Reply:
        first_asked.set()
        second_tried.wait(10)  # hold the first dream inside its model call
        return ADDED

    async def both(server: FakeModelServer) -> int:
        config = DreamingConfig()
        first = asyncio.create_task(
            dream(
                index.db,
                index.workspace,
                model_client(server),
                config,
                budget_chars=20_000,
                now=NOW,
            )
        )
        assert await asyncio.to_thread(first_asked.wait, 10)
        try:
            with pytest.raises(DreamBusyError, match="already running"):
                await dream(index.db, index.workspace, None, config, budget_chars=20_000, now=NOW)
        finally:
            second_tried.set()
        return (await first).promoted

    with FakeModelServer() as server:
        server.respond_with(slow)
        assert asyncio.run(both(server)) == 1
        assert len(server.requests) == 1
    assert memory_text(index).count("window seats") == 1


def test_a_dream_prunes_signals_older_than_twice_the_lookback(index: MemoryIndex) -> None:
    old = SearchHit(LOG, 3, 3, 0.9, "x", "memory", "agent")
    record_recall(index.db, "long ago", [old], now=datetime(2026, 1, 1))
    recall(index, 4)
    with FakeModelServer([ADDED]) as server:
        run(index, server)
    days = {r[0] for r in index.db.execute("SELECT day FROM recall_signals")}
    assert days == {"2026-11-01", "2026-11-02"}


def test_lines_appended_during_scheduled_job_turns_are_not_staged(tmp_path: Path) -> None:
    notes = (
        "# 2026-11-03\n\n"
        "- The owner prefers aisle seats. <!-- origin: agent · session: jobsession1 -->\n"
        "- The owner prefers window seats. <!-- origin: agent · session: ownersession -->\n"
    )
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: notes})
    try:
        with idx.db.transaction() as conn:
            for sid, key, channel, thread in (
                ("jobsession1", "main:telegram:direct:owner:job:4", "telegram", "job:4"),
                ("ownersession", "main:telegram:direct:owner", "telegram", None),
            ):
                conn.execute(
                    "INSERT INTO sessions(id, key, agent_id, channel, chat_type, peer_id, "
                    "thread_id, state, created_at) VALUES (?, ?, 'main', ?, 'direct', 'owner', "
                    "?, 'current', 0)",
                    (sid, key, channel, thread),
                )
        staged = [r.candidate.text for r in run(idx, phase="light", dry_run=True).candidates]
        assert len(staged) == 1 and "window seats" in staged[0]
    finally:
        idx.close()


def test_a_promoted_note_is_not_staged_again_the_next_night(tmp_path: Path) -> None:
    notes = (
        "# 2026-11-03\n\n- The owner prefers window seats. <!-- origin: agent · session: s1 -->\n"
    )
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: notes})
    try:
        recall(idx, 3)
        with FakeModelServer([ADDED]) as server:
            assert run(idx, server).promoted == 1
        assert "<!-- origin" not in memory_text(idx)  # markers are not copied into MEMORY.md
        assert run(idx, phase="light", dry_run=True).candidates == []
    finally:
        idx.close()


def test_entries_of_a_forgotten_session_are_never_staged(tmp_path: Path) -> None:
    notes = (
        "# 2026-11-03\n\n"
        "- The owner prefers aisle seats. <!-- origin: agent · session: gone1 -->\n"
        "- The owner prefers window seats. <!-- origin: agent · session: kept1 -->\n"
    )
    idx = open_index(tmp_path, {"MEMORY.md": MEMORY, LOG: notes})
    try:
        LineageStore(idx.db)  # its tables
        with idx.db.transaction() as conn:  # what `pinch memory forget` leaves behind
            conn.execute(
                "INSERT INTO lineage_tombstones(session_id, forgotten_at, summary) "
                "VALUES ('gone1', 0, '{}')"
            )
        staged = [r.candidate.text for r in run(idx, phase="light", dry_run=True).candidates]
        assert len(staged) == 1 and "window seats" in staged[0]
    finally:
        idx.close()
