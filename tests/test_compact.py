"""Giving back the space a rebuild freed: `pinch memory index --force` compacts the database when
a quarter of it is the old index's free pages, `pinch memory compact` does it on request, status
shows the free space, and a busy database is reported with advice and left as it was."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from app.cli.main import main
from memory.errors import DatabaseError
from memory.store.compact import compact, space_usage
from memory.store.db import open_database
from tests.conftest import IndexFactory, WorkspaceFactory, sqlite_vec_loads, use_config
from tests.test_cli import home, workspace  # noqa: F401  (fixtures)

NOTES = {
    f"memory/2026-01-{day:02d}.md": f"# 2026-01-{day:02d}\n\n"
    + "\n".join(
        f"- Note {day}-{i}: the garden, the boiler and the trip to Lisbon." for i in range(40)
    )
    + "\n"
    for day in range(1, 21)
}


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_forced_rebuild_leaves_free_pages_and_compact_gives_them_back(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    idx = make_index(make_workspace(NOTES), use_config())
    idx.sync()
    idx.sync(force=True)
    before_hits = [(h.path, h.start_line) for h in idx.search("boiler Lisbon")]
    freed = space_usage(idx.db)
    assert freed.worth_compacting, freed

    assert idx.status().free_bytes == freed.free_bytes  # what `memory status` shows
    after = compact(idx.db)

    assert after.free_bytes == 0 and after.file_bytes < freed.file_bytes
    assert [(h.path, h.start_line) for h in idx.search("boiler Lisbon")] == before_hits
    # A process opening it afresh (sqlite-vec answers its first search through vec0 while the
    # vectors load; numpy reads the pack): the same results, the ids intact.
    for backend in ("sqlite-vec", "numpy") if sqlite_vec_loads() else ("numpy",):
        fresh = make_index(idx.workspace, use_config(vector_backend=backend))
        assert [(h.path, h.start_line) for h in fresh.search("boiler Lisbon")] == before_hits


def test_compacting_while_another_process_writes_is_refused_with_advice(
    make_workspace: WorkspaceFactory, make_index: IndexFactory, use_model: None
) -> None:
    idx = make_index(make_workspace(NOTES), use_config())
    idx.sync()
    idx.sync(force=True)
    other = open_database(idx.db.path)  # another process's connection, mid-write
    other.conn.execute("BEGIN IMMEDIATE")
    try:
        before = space_usage(idx.db)
        try:
            compact(idx.db, wait_s=0.2)
            raise AssertionError("compact should have been refused")
        except DatabaseError as exc:
            assert "pinch memory compact" in str(exc) and "Nothing changed" in str(exc)
    finally:
        other.conn.execute("ROLLBACK")
        other.close()
    assert space_usage(idx.db) == before


def test_index_force_compacts_the_database_it_rebuilt(
    workspace: Path,  # noqa: F811
) -> None:
    for rel, text in NOTES.items():
        (workspace / rel).write_text(text)
    assert pinch("memory", "index").exit_code == 0

    rebuilt = pinch("memory", "index", "--force")

    assert rebuilt.exit_code == 0, rebuilt.output
    assert "Compacted:" in rebuilt.output
    status = json.loads(pinch("memory", "status", "--json").stdout)
    assert status["free_bytes"] == 0 and status["file_bytes"] > 0
    assert "free space" not in pinch("memory", "status").output


def test_memory_compact_on_a_compact_database_says_there_is_nothing_to_do(
    workspace: Path,  # noqa: F811
) -> None:
    assert pinch("memory", "index").exit_code == 0
    pinch("memory", "compact")

    again = pinch("memory", "compact")

    assert again.exit_code == 0 and "Nothing to compact" in again.output
