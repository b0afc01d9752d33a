"""A damaged agent database is recognised as such wherever it is met, with advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.store.db import DatabaseCorruptError, is_corruption, open_database


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A database with a 200-row table (created last: at the end of the file), two of whose
    pages are overwritten."""
    path = tmp_path / "agent.sqlite"
    db = open_database(path)
    db.execute("CREATE TABLE note(id INTEGER PRIMARY KEY, text TEXT)")
    with db.transaction() as conn:
        for n in range(200):
            conn.execute("INSERT INTO note(text) VALUES (?)", (f"note {n} " + "x" * 400,))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(size - 3 * 4096)
        fh.write(b"\xa5" * 8192)
    return path


def test_a_query_over_a_damaged_page_raises_database_corrupt_error(damaged: Path) -> None:
    db = open_database(damaged)
    try:
        with pytest.raises(DatabaseCorruptError) as err:
            db.execute("SELECT count(*), sum(length(text)) FROM note")
    finally:
        db.close()
    message = str(err.value)
    assert f"mv {damaged} {damaged}.broken" in message and "pinch memory index" in message


def test_a_write_over_a_damaged_page_raises_database_corrupt_error(damaged: Path) -> None:
    db = open_database(damaged)
    try:
        with pytest.raises(DatabaseCorruptError), db.transaction() as conn:
            conn.execute("UPDATE note SET text = 'changed'")
    finally:
        db.close()


def test_quick_check_finds_the_damage_and_a_sound_file_passes(
    damaged: Path, tmp_path: Path
) -> None:
    db = open_database(damaged)
    sound = open_database(tmp_path / "sound.sqlite")
    try:
        assert db.quick_check() != []
        with pytest.raises(DatabaseCorruptError, match="is damaged"):
            db.check_integrity()
        assert sound.quick_check() == []
    finally:
        db.close()
        sound.close()


def test_other_database_errors_are_not_called_corruption(tmp_path: Path) -> None:
    db = open_database(tmp_path / "agent.sqlite")
    try:
        with pytest.raises(Exception) as err:
            db.execute("SELECT * FROM no_such_table")
    finally:
        db.close()
    assert not isinstance(err.value, DatabaseCorruptError) and not is_corruption(err.value)
