"""`pinch backup` and `pinch restore`: what an archive holds, what a restore brings back, and
every archive or target a restore refuses with nothing written; scheduled backups."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from app.backup.archive import make_backup
from app.backup.backup_config import BackupConfig
from app.backup.schedule import owner_alert, run_scheduled_backup, scheduled_archives, start_backups
from app.cli.setup import initialise
from app.config import ConfigError, load_settings
from app.gateway.run import acquire_lock
from memory.store.db import open_database
from tests.backup_support import file_hashes, modes, pinch, rows, seed, settings_for
from tests.gateway_support import FakeChannel

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A set-up home (keyword-only index) with a conversation, a job, an intent, an approval,
    a memory note and an indexed workspace."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    settings = load_settings()
    initialise(settings, TEMPLATE)
    (settings.workspace_dir / "memory" / "2026-11-30.md").write_text(
        "# Trip\n\nThe owner's kettle is green and the cat is called Miso.\n", encoding="utf-8"
    )
    seed(settings)
    pinch("memory", "index")
    return pinch_home


def backup(tmp_path: Path, *args: str) -> Path:
    pinch("backup", "--to", str(tmp_path / "archives") + "/", *args)
    [archive] = sorted((tmp_path / "archives").glob("*.tar.gz"))
    return archive


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def rewrite(archive: Path, dest: Path, change: dict[str, bytes]) -> Path:
    """A copy of `archive` with some members' bytes replaced (the manifest kept as it was)."""
    with tarfile.open(dest, "w:gz") as out:
        for name, data in members(archive).items():
            data = change.get(name, data)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return dest


def nothing_written(new_home: Path) -> None:
    assert not new_home.exists()
    assert not [p for p in new_home.parent.iterdir() if "restoring" in p.name]


def test_a_restored_home_holds_every_row_and_file_and_searches_the_same(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    before = pinch("memory", "search", "green kettle Miso").output
    archive = backup(tmp_path)
    manifest = json.loads(members(archive)["manifest.json"])
    assert manifest["counts"]["transcript_events"] == 6
    assert manifest["counts"]["jobs"] == manifest["counts"]["intents"] == 1
    assert manifest["counts"]["pairing_approvals"] == 1
    assert manifest["counts"]["chunks"] > 0
    assert set(manifest["databases"]["agents/main/agent.sqlite"]["migrations"]) >= {
        "memory",
        "gateway",
        "automations",
        "intents",
    }

    new = settings_for(tmp_path / "restored", monkeypatch)
    out = pinch("restore", str(archive)).output
    assert "Counts checked against the manifest: equal." in out
    assert "Index: up to date" in out
    assert rows(new.database_path) == rows(settings.database_path)
    assert file_hashes(new.workspace_dir) == file_hashes(settings.workspace_dir)
    assert (new.config_path).read_bytes() == settings.config_path.read_bytes()
    assert modes(new.home) <= {0o600, 0o700}
    assert pinch("memory", "search", "green kettle Miso").output == before


def test_a_restore_dry_run_verifies_and_writes_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup(tmp_path)
    new = tmp_path / "dry"
    settings_for(new, monkeypatch)
    out = pinch("restore", str(archive), "--dry-run").output
    assert "nothing was written" in out
    nothing_written(new)


def test_a_truncated_archive_is_refused_with_nothing_written(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup(tmp_path)
    data = archive.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)
    result = pinch("restore", str(cut), ok=False)
    assert result.exit_code == 1
    assert "damaged or incomplete" in result.output and "nothing was restored" in result.output
    nothing_written(new)


def test_a_tampered_archive_is_refused_with_nothing_written(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup(tmp_path)
    original = members(archive)["workspace/MEMORY.md"]
    tampered = rewrite(
        archive, tmp_path / "t.tar.gz", {"workspace/MEMORY.md": original + b"\nobey me\n"}
    )
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)
    result = pinch("restore", str(tampered), ok=False)
    assert "does not match its manifest" in result.output
    assert "workspace/MEMORY.md" in result.output
    nothing_written(new)

    flipped = bytearray(archive.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF  # one byte of the compressed stream
    (tmp_path / "f.tar.gz").write_bytes(bytes(flipped))
    result = pinch("restore", str(tmp_path / "f.tar.gz"), ok=False)
    assert "nothing was restored" in result.output
    nothing_written(new)


def test_an_archive_of_a_newer_schema_is_refused_with_advice(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_database(load_settings().database_path)
    with db.transaction() as conn:
        conn.execute("INSERT INTO schema_migrations VALUES ('memory', 'm999_from_the_future', 0)")
    db.close()
    archive = backup(tmp_path)
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)
    result = pinch("restore", str(archive), ok=False)
    assert "newer Pinch" in result.output and "memory/m999_from_the_future" in result.output
    assert "Upgrade Pinch" in result.output
    nothing_written(new)


def test_a_home_with_data_or_a_running_gateway_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup(tmp_path)
    before = file_hashes(home)
    result = pinch("restore", str(archive), ok=False)
    assert "is not empty" in result.output and f"mv {home}" in result.output

    lock = acquire_lock(load_settings().agent_dir / "gateway.lock")  # as `pinch gateway` does
    try:
        result = pinch("restore", str(archive), ok=False)
    finally:
        lock.close()
    assert "A Pinch gateway is running" in result.output
    after = file_hashes(home)
    assert {k: v for k, v in after.items() if not k.endswith("gateway.lock")} == before


def test_secrets_are_left_out_unless_asked(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    (settings.workspace_dir / ".env").write_text("OPENAI_API_KEY=sk-secret-value-123456\n")
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "123456:telegram-token-abcdefghijklmn")
    plain = members(make_backup(settings, to=tmp_path / "plain.tar.gz").path)
    assert "workspace/.env" not in plain and "secrets.env" not in plain
    assert b"telegram-token" not in b"".join(plain.values())
    assert json.loads(plain["manifest.json"])["left_out"]["secrets"] == [".env"]

    full = members(make_backup(settings, to=tmp_path / "full.tar.gz", include_secrets=True).path)
    assert "workspace/.env" in full
    assert b"PINCH_TELEGRAM__BOT_TOKEN=123456:telegram-token-abcdefghijklmn" in full["secrets.env"]

    settings_for(tmp_path / "restored", monkeypatch)
    out = pinch("restore", str(tmp_path / "full.tar.gz")).output
    assert "secrets.env holds the secrets" in out
    assert (tmp_path / "restored" / "secrets.env").stat().st_mode & 0o777 == 0o600


def test_scheduled_backups_run_and_keep_the_newest(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_BACKUP__KEEP", "2")
    monkeypatch.setenv("PINCH_BACKUP__PATH", str(tmp_path / "auto"))
    settings = load_settings()
    manual = make_backup(settings, to=f"{tmp_path / 'auto'}/").path  # never pruned
    alerts: list[str] = []

    async def alert(text: str) -> None:
        alerts.append(text)

    async def scenario() -> None:
        timer = await start_backups(settings, alert, first_delay_s=0.05)
        assert timer is not None
        for _ in range(500):
            if scheduled_archives(settings.backup_dir):
                break
            await asyncio.sleep(0.02)
        assert len(scheduled_archives(settings.backup_dir)) == 1  # the timer ran it
        timer.shutdown(wait=False)
        for _ in range(3):
            assert await run_scheduled_backup(settings, alert) is not None

    asyncio.run(scenario())
    assert len(scheduled_archives(settings.backup_dir)) == 2
    assert manual.exists() and alerts == []


def test_a_failed_scheduled_backup_alerts_the_owner(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("PINCH_BACKUP__PATH", str(tmp_path / "a-file" / "backups"))
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", '["111"]')
    settings = load_settings()
    telegram = FakeChannel("telegram")
    result = asyncio.run(
        run_scheduled_backup(settings, owner_alert(settings, {"telegram": telegram}))
    )
    assert result is None
    [(message_id, text)] = telegram.messages.items()
    assert telegram.chats[message_id] == "111"
    assert text.startswith("The scheduled backup failed: Cannot write to")


def test_backup_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BackupConfig().every == "1d" and BackupConfig().keep == 7
    assert BackupConfig(every="").every_s() is None
    with pytest.raises(ValueError, match="at most once a minute"):
        BackupConfig(every="30s")
    monkeypatch.setenv("PINCH_BACKUP__KEEP", "0")
    with pytest.raises(ConfigError, match=r"backup\.keep"):
        load_settings()


def test_the_archive_is_gzip_and_private(home: Path, tmp_path: Path) -> None:
    archive = backup(tmp_path)
    assert archive.stat().st_mode & 0o777 == 0o600
    with gzip.open(archive) as raw:
        assert raw.read(1)  # plain gzip: `tar xzf` opens it too


def test_an_archive_with_an_unsafe_name_or_a_link_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup(tmp_path)
    parts = members(archive)
    manifest = json.loads(parts["manifest.json"])
    manifest["files"]["../outside.txt"] = manifest["files"]["workspace/MEMORY.md"]
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as out:
        for name, data in {
            "../outside.txt": parts["workspace/MEMORY.md"],
            "manifest.json": json.dumps(manifest).encode(),
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    linked = tmp_path / "link.tar.gz"
    with tarfile.open(linked, "w:gz") as out:
        info = tarfile.TarInfo("workspace/MEMORY.md")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        out.addfile(info)
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)
    assert "unsafe name '../outside.txt'" in pinch("restore", str(evil), ok=False).output
    assert "not a plain file" in pinch("restore", str(linked), ok=False).output
    nothing_written(new)
    assert not (tmp_path / "outside.txt").exists()


def test_a_workspace_outside_the_home_is_restored_where_the_environment_says(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    archive = backup(tmp_path)
    monkeypatch.setenv("PINCH_WORKSPACE", str(tmp_path / "elsewhere" / "notes"))
    new = settings_for(tmp_path / "restored", monkeypatch)
    out = pinch("restore", str(archive)).output
    assert f"workspace {tmp_path / 'elsewhere' / 'notes'}" in out
    assert file_hashes(new.workspace_dir) == file_hashes(settings.workspace_dir)
    assert not (new.home / "workspace").exists()
    assert rows(new.database_path)["transcript_events"]
