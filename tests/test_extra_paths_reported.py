"""A configured extra path that yields nothing says why: a typo (missing path) or a symbolic link
(never followed) is listed by `pinch memory status` and `pinch memory index`, not ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert pinch("init").exit_code == 0
    return pinch_home


def test_a_missing_extra_path_is_listed_by_status_and_index(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "notse"  # a typo
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", json.dumps([str(missing)]))

    indexed = pinch("memory", "index")
    status = pinch("memory", "status")

    assert indexed.exit_code == 0 and f"{missing} does not exist" in indexed.output
    assert f"problem         {missing}: skipped: {missing} does not exist" in status.output
    assert str(missing) in json.loads(pinch("memory", "status", "--json").stdout)["extra_paths"]


def test_a_symlinked_extra_folder_is_listed_with_the_folder_to_use(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "Dropbox" / "notes"
    real.mkdir(parents=True)
    (real / "a.md").write_text("# A\n\nkiwi\n")
    link = tmp_path / "notes"
    link.symlink_to(real)
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", json.dumps([str(link)]))

    status = pinch("memory", "status")

    assert f"{link} is a symbolic link" in status.output and str(real) in status.output


def test_an_existing_extra_folder_is_no_problem(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nkiwi\n")
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", json.dumps([str(notes)]))

    assert pinch("memory", "index").exit_code == 0
    assert "problem" not in pinch("memory", "status").output
