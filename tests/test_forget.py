"""Forgetting a session: its notes, its daily-log entries, its transcript and its chunks go; the
owner's own lines stay; a tombstone keeps re-indexing from bringing any of it back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.config import load_settings
from memory.errors import SessionError
from memory.files.writes import WorkspaceWriter
from memory.index.chunking import hash_text
from memory.index.index import MemoryIndex
from memory.lifecycle.dreaming import stage_candidates
from memory.lifecycle.forget import forget, plan_forget
from memory.store import sessions
from memory.store.lineage import LineageStore
from memory.store.sessions import SqliteSessionStore
from memory.store.transcripts import transcript_path
from tests.agent_support import OWNER, Kit, make_kit, responder, template_workspace
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply, tool_reply

DAY = "memory/2026-01-10.md"
OWNER_LINES = "# 2026-01-10\n\n- Owner: dentist moved to Thursday.\n"


def _turns(*replies: Reply) -> Callable[[RecordedRequest], Reply]:
    queue = list(replies)

    def turn(request: RecordedRequest) -> Reply:
        return queue.pop(0) if queue else text_reply("Ok.")

    return responder(turn=turn, slug=text_reply("zeppelin trip"))


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[tuple[Kit, FakeModelServer]]:
    with FakeModelServer() as model:
        ws = template_workspace(tmp_path, **{DAY: OWNER_LINES})
        kit = make_kit(tmp_path, model, workspace=ws)
        yield kit, model
    kit.index.close()


def chat(kit: Kit, model: FakeModelServer, text: str, *replies: Reply) -> str:
    """One owner turn with scripted replies; returns the session id it ran in."""
    model.respond_with(_turns(*replies))
    return asyncio.run(kit.agent.handle(OWNER, text)).session_id


def forgettable_session(kit: Kit, model: FakeModelServer) -> str:
    """A session that appended two entries (around an owner's line), then ended with /new."""
    sid = chat(
        kit,
        model,
        "Plan the zeppelin trip to Friedrichshafen.",
        tool_reply("memory_append", {"text": "- Zeppelin trip: leave at 07:10."}),
        text_reply("Noted the zeppelin departure."),
    )
    log = kit.workspace / DAY
    log.write_text(log.read_text() + "\n- Owner: call the bank.\n")  # by hand, mid-session
    chat(
        kit,
        model,
        "Also the hotel.",
        tool_reply("memory_append", {"text": "Zeppelin hotel: Seehotel,\nroom 12."}),
        text_reply("Hotel noted."),
    )
    asyncio.run(kit.agent.handle(OWNER, "/new"))
    return sid


def found(kit: Kit, words: str) -> list[str]:
    hits = kit.index.search(words, max_results=50, scopes=("", OWNER.memory_scope))
    return [f"{h.path}: {h.snippet}" for h in hits if "eppelin" in h.snippet]


def test_forget_leaves_nothing_of_the_session_to_search_or_reindex(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    assert found(k, "zeppelin")  # in the log, the session note and the transcript
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    assert found(k, "zeppelin") == []
    k.index.sync(force=True)  # a full re-index replays files and transcripts
    assert found(k, "zeppelin") == []
    assert k.store.get(sid) is None and k.store.events(sid) == []
    assert not list((k.workspace / "memory").glob("*zeppelin*"))


def test_the_owners_own_lines_in_the_same_log_survive(kit: tuple[Kit, FakeModelServer]) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    assert (k.workspace / DAY).read_text() == (
        "# 2026-01-10\n\n- Owner: dentist moved to Thursday.\n\n- Owner: call the bank.\n"
    )


def test_a_dry_run_lists_exactly_what_goes_and_changes_nothing(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    before = {p: p.read_bytes() for p in (k.workspace / "memory").iterdir()}
    plan = plan_forget(k.index, sid)
    assert {p: p.read_bytes() for p in (k.workspace / "memory").iterdir()} == before
    assert k.store.get(sid) is not None
    [note] = [p.relative_to(k.workspace).as_posix() for p in before if "zeppelin" in p.name]
    events = len(k.store.events(sid))
    chunks = k.index.db.execute(
        "SELECT count(*) FROM memory_chunks WHERE path = ?", (transcript_path(sid),)
    )[0][0]
    listed = [(i.kind, i.action, i.path, i.lines, i.count) for i in plan.items]
    assert listed == [
        ("session_note", "remove", note, None, 1),
        ("daily_entry", "remove", DAY, "4-4", 1),
        ("daily_entry", "remove", DAY, "8-9", 1),
        ("transcript_events", "remove", None, None, events),
        ("index_chunks", "remove", transcript_path(sid), None, chunks),
    ]
    done = forget(k.index, k.agent.writer, plan)
    assert [(i.kind, i.action, i.path, i.lines, i.count) for i in done.items] == listed


def test_other_sessions_entries_stay(kit: tuple[Kit, FakeModelServer]) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    chat(k, model, "Note the ferry.", tool_reply("memory_append", {"text": "- Ferry at 9."}))
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    assert "- Ferry at 9. <!-- origin: agent · session: " in (k.workspace / DAY).read_text()


def test_an_entry_the_owner_edited_is_kept_and_reported(kit: tuple[Kit, FakeModelServer]) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    log = k.workspace / DAY
    log.write_text(log.read_text().replace("leave at 07:10", "leave at 07:30 (mine now)"))
    done = forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    [kept] = done.kept
    assert (kept.kind, kept.path, kept.reason) == ("daily_entry", DAY, "edited by hand")
    assert "07:30 (mine now)" in log.read_text() and "Seehotel" not in log.read_text()
    # Kept means kept: it names no session any more, so re-indexing does not blank it.
    assert f"session: {sid}" not in log.read_text()
    assert "(mine now). <!-- origin: agent · session: kept-by-owner -->" in log.read_text()
    k.index.sync(force=True)
    assert [h for h in found(k, "zeppelin") if "07:30 (mine now)" in h]


def test_a_session_note_the_owner_edited_is_kept(kit: tuple[Kit, FakeModelServer]) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    [note] = (k.workspace / "memory").glob("*zeppelin*")
    note.write_text(note.read_text() + "\nMy own thoughts on it.\n")
    done = forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    assert note.exists() and [i.kind for i in done.kept] == ["session_note"]


def test_a_restored_backup_does_not_bring_forgotten_entries_back(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    log = k.workspace / DAY
    backup = log.read_text()
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    log.write_text(backup)
    k.index.sync(force=True)
    assert [h for h in found(k, "zeppelin") if h.startswith(DAY)] == []
    assert LineageStore(k.index.db).is_forgotten(sid)
    assert k.index.search("call the bank")  # the owner's lines are still indexed


def test_a_forgotten_sessions_note_restored_from_a_backup_is_indexed_as_empty(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    [note] = (k.workspace / "memory").glob("*zeppelin*")
    backup = note.read_text()
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    note.write_text(backup)  # copied back from a backup
    report = k.index.sync()
    rel = note.relative_to(k.workspace).as_posix()
    assert found(k, "zeppelin") == []
    assert f"session {sid}" in report.problems[rel]  # said, never silent
    assert "indexed as empty" in k.index.status().problems[rel]  # `pinch memory status`
    staged = stage_candidates(k.index.db, k.workspace, today="2026-01-10")
    assert [c for c in staged if c.path == rel] == []
    k.index.sync(force=True)
    assert found(k, "zeppelin") == []


def test_a_note_forget_kept_stays_the_owners_and_searchable(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    [note] = (k.workspace / "memory").glob("*zeppelin*")
    note.write_text(note.read_text() + "\nMy own zeppelin thoughts.\n")
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    k.index.sync(force=True)
    assert any("own zeppelin thoughts" in h for h in found(k, "zeppelin thoughts"))


def test_forgetting_a_session_twice_says_when_and_changes_nothing(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    before = {p: p.read_bytes() for p in k.workspace.rglob("*.md")}
    tombstone = LineageStore(k.index.db).tombstone(sid)
    again = plan_forget(k.index, sid)
    assert tombstone is not None and again.forgotten_at == tombstone[0]
    assert forget(k.index, k.agent.writer, again) == again and again.items == ()
    assert {p: p.read_bytes() for p in k.workspace.rglob("*.md")} == before
    assert LineageStore(k.index.db).tombstone(sid) == tombstone


def test_a_session_key_names_its_latest_session(kit: tuple[Kit, FakeModelServer]) -> None:
    k, model = kit
    forgettable_session(k, model)
    sid = chat(k, model, "Note it.", tool_reply("memory_append", {"text": "- Latest."}))
    assert plan_forget(k.index, str(OWNER)).session_id == sid


def test_the_short_id_status_shows_names_its_session(kit: tuple[Kit, FakeModelServer]) -> None:
    """`/status` shows 8 hex characters of the session id: any unique prefix names the session."""
    k, model = kit
    sid = forgettable_session(k, model)
    assert plan_forget(k.index, sid[:8]).session_id == sid
    assert plan_forget(k.index, f"sessions/{sid[:5]}").session_id == sid


def test_a_prefix_of_two_sessions_is_an_error_naming_both(
    kit: tuple[Kit, FakeModelServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    k, model = kit
    ids = iter(["abcd1111" + "0" * 24, "abcd2222" + "0" * 24])
    fake_uuid = SimpleNamespace(uuid4=lambda: SimpleNamespace(hex=next(ids)))
    monkeypatch.setattr(sessions, "uuid", fake_uuid)
    chat(k, model, "First.")
    asyncio.run(k.agent.handle(OWNER, "/new"))
    chat(k, model, "Second.")
    with pytest.raises(SessionError, match="'abcd' is the start of 2 sessions: abcd1111, abcd2222"):
        plan_forget(k.index, "abcd")


def test_an_unknown_session_is_explained(kit: tuple[Kit, FakeModelServer]) -> None:
    k, _ = kit
    with pytest.raises(Exception, match="No session 'nope'"):
        plan_forget(k.index, "nope")


def test_the_command_prints_a_dry_run_as_json_then_forgets(pinch_home: Path) -> None:
    runner = CliRunner()
    env = {"PINCH_MEMORY__EMBEDDING__PROVIDER": "none"}
    assert runner.invoke(main, ["init"], env=env).exit_code == 0
    settings = load_settings()
    index = MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)
    sid = SqliteSessionStore(index.db).current(OWNER).id
    entry = WorkspaceWriter(settings.workspace_dir).append_daily_entry(
        "- Secret plan.", origin="agent", session_id=sid
    )
    detail = {"hash": hash_text(entry.text), "lines": 1}
    LineageStore(index.db).record(sid, "daily_entry", path=entry.path, detail=detail)
    index.close()
    log = settings.workspace_dir / entry.path

    args = ["memory", "forget", "--session", sid]
    dry = runner.invoke(main, [*args, "--dry-run", "--json"], env=env)
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert plan["done"] is False and [i["kind"] for i in plan["items"]] == ["daily_entry"]
    assert "Secret plan" in log.read_text()
    out = runner.invoke(main, args, env=env)
    assert out.exit_code == 0, out.output
    assert "Forgot session" in out.output and "removed  daily_entry" in out.output
    assert "Secret plan" not in log.read_text()
    again = runner.invoke(main, args, env=env)
    assert again.exit_code == 0, again.output
    assert f"Session {sid} ({OWNER}) was already forgotten on " in again.output


def test_a_note_from_before_lineage_is_listed_as_kept_not_deleted(
    kit: tuple[Kit, FakeModelServer],
) -> None:
    k, model = kit
    sid = forgettable_session(k, model)
    k.index.db.execute("DELETE FROM lineage WHERE kind = 'session_note'")
    [note] = (k.workspace / "memory").glob("*zeppelin*")
    done = forget(k.index, k.agent.writer, plan_forget(k.index, sid))
    [kept] = done.kept
    assert kept.path == note.relative_to(k.workspace).as_posix() and note.exists()
    assert "before Pinch recorded lineage" in (kept.reason or "")
    k.index.sync(force=True)  # kept: still the owner's to search
    assert any(h.startswith(kept.path) for h in found(k, "zeppelin"))
