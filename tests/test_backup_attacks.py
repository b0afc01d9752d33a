"""What a backup may delete, and what a restore says when it cannot write: pruning keeps every
file that is not this agent's scheduled archive, a backup's clean-up of killed backups keeps the
owner's folders, and a full disk during a restore is told as such (not as a damaged archive)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from app.backup.archive import make_backup
from app.backup.schedule import run_scheduled_backup, scheduled_archives
from app.cli.setup import initialise
from app.config import load_settings
from tests.backup_support import pinch, settings_for

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"


@pytest.fixture
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    initialise(load_settings(), TEMPLATE)
    return pinch_home


async def _never_told(text: str) -> None:
    raise AssertionError(f"the owner was told: {text}")


def test_scheduled_pruning_keeps_manual_archives_of_an_agent_called_auto_and_the_owners_files(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinch("agents", "add", "auto")
    monkeypatch.setenv("PINCH_AGENTS__AUTO__BACKUP__KEEP", "1")
    settings = load_settings(agent_id="auto")
    folder = settings.backup_dir
    manual = [make_backup(settings).path for _ in range(2)]  # pinch-backup-auto-<stamp>.tar.gz
    own_file = folder / "pinch-backup-auto-keep-me.tar.gz"
    own_file.write_bytes(b"the owner's")

    for _ in range(2):
        assert asyncio.run(run_scheduled_backup(settings, _never_told)) is not None

    assert all(path.exists() for path in manual) and own_file.exists()
    [kept] = scheduled_archives(folder, "auto")
    assert kept.name.startswith("pinch-backup-auto-auto-")


def test_a_backup_removes_a_killed_backups_work_folder_but_not_a_folder_of_the_owners(
    home: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "usb"
    killed = dest / ".pinch-backup-k1ll3d_x"
    owners = [dest / ".pinch-backup-keep", dest / ".pinch-backup-notes123"]
    for folder in [killed, *owners]:
        folder.mkdir(parents=True)
    (killed / "0.snapshot").write_bytes(b"a snapshot")
    (killed / "archive.partial").write_bytes(b"half an archive")
    for folder in owners:
        (folder / "letters.txt").write_text("precious", encoding="utf-8")
    long_ago = time.time() - 7 * 3600
    for folder in [killed, *owners]:
        os.utime(folder, (long_ago, long_ago))

    pinch("backup", "--to", f"{dest}/")

    assert not killed.exists()
    for folder in owners:
        assert (folder / "letters.txt").read_text(encoding="utf-8") == "precious"


def _small_files_only(limit: int) -> None:
    """In the child: a file can grow to `limit` bytes at most (writes past it fail, EFBIG),
    as on a nearly full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_restore_that_cannot_write_says_so_and_does_not_blame_the_archive(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    (settings.workspace_dir / "memory" / "big.md").write_bytes(b"x" * 300_000)
    archive = make_backup(settings, to=f"{tmp_path}/").path
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)

    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "restore", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: _small_files_only(100_000),
        env={**os.environ, "PINCH_HOME": str(new)},
    )

    assert result.returncode == 1, result.stdout + result.stderr
    assert "damaged" not in result.stderr and "another archive" not in result.stderr
    assert "could not be written" in result.stderr and "nothing was restored" in result.stderr
    assert "Traceback" not in result.stderr
    assert not new.exists() and not [p for p in tmp_path.iterdir() if "restoring" in p.name]


def forge(archive: Path, dest: Path, files: dict[str, bytes | None], **manifest: object) -> Path:
    """A copy of `archive` with `files` replaced, added or (None) left out and its manifest
    changed to match — every hash right, as an attacker who read the format would make it."""
    with tarfile.open(archive, "r:gz") as tar:
        parts = {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]
    described = json.loads(parts.pop("manifest.json"))
    for name, data in files.items():
        parts.pop(name, None)
        described["files"].pop(name, None)
        if data is not None:
            parts[name] = data
            described["files"][name] = {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
    described.update(manifest)
    with tarfile.open(dest, "w:gz") as tar:
        for name, data in [*parts.items(), ("manifest.json", json.dumps(described).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest


def test_an_agent_archive_whose_manifest_names_a_path_as_its_agent_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_backup(load_settings(), to=f"{tmp_path}/").path
    gone: dict[str, bytes | None] = {"config.toml": None, "agents/main/agent.sqlite": None}
    forged = forge(
        archive, tmp_path / "forged.tar.gz", gone, scope="agent", format=2,
        agent_id="../../elsewhere", databases={},
    )  # fmt: skip
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)

    out = pinch("restore", str(forged), ok=False).output

    assert "names its agent '../../elsewhere', which is not an agent name" in out
    assert "config.toml" not in out and "nothing was restored" in out
    assert not new.exists() and not (tmp_path / "elsewhere").exists()


def test_a_dry_run_names_the_workspace_folder_an_archives_config_sends_files_to(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_backup(load_settings(), to=f"{tmp_path}/").path
    outside = tmp_path / "somewhere" / "else"
    config = f'workspace = "{outside}"\n'.encode()
    forged = forge(archive, tmp_path / "forged.tar.gz", {"config.toml": config})
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)

    out = pinch("restore", str(forged), "--dry-run").output

    assert f"It would be restored into {new} (workspace {outside})" in out
    assert not new.exists() and not outside.exists()


@pytest.mark.parametrize(
    ("name", "kind", "target", "said"),
    [
        ("workspace/MEMORY.md", tarfile.LNKTYPE, "/etc/passwd", "not a plain file"),
        ("workspace/tty", tarfile.CHRTYPE, "", "not a plain file"),
        ("workspace/pipe", tarfile.FIFOTYPE, "", "not a plain file"),
        ("/tmp/pinch-restore-absolute.md", tarfile.REGTYPE, "", "unsafe name"),
        ("workspace/../../escaped.md", tarfile.REGTYPE, "", "unsafe name"),
    ],
)
def test_a_member_that_is_not_a_plain_file_inside_the_archive_is_refused_before_writing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, kind: bytes,
    target: str, said: str,
) -> None:  # fmt: skip
    archive = make_backup(load_settings(), to=f"{tmp_path}/").path
    forged = tmp_path / "forged.tar.gz"
    with tarfile.open(archive, "r:gz") as src, tarfile.open(forged, "w:gz") as tar:
        for member in src:  # the odd member first: nothing may be written before it is seen
            if member.name == "config.toml":
                odd = tarfile.TarInfo(name)
                odd.type, odd.linkname, odd.devmajor = kind, target, 4
                odd.size = 1 if kind == tarfile.REGTYPE else 0
                tar.addfile(odd, io.BytesIO(b"x") if odd.size else None)
            tar.addfile(member, src.extractfile(member))
    new = tmp_path / "new-home"
    settings_for(new, monkeypatch)

    out = pinch("restore", str(forged), ok=False).output

    assert said in out and "nothing was restored" in out and "Traceback" not in out
    assert not new.exists() and not Path("/tmp/pinch-restore-absolute.md").exists()
    assert not (tmp_path / "escaped.md").exists()


def _can_mount() -> bool:
    """Whether this machine lets an unprivileged process mount a tmpfs in a namespace of its
    own (unshare(1) and user namespaces): how a test gets a mount point like Docker's /data."""
    probe = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_mount(), reason="needs unshare with user namespaces")
def test_a_home_that_is_a_mount_point_like_dockers_data_volume_is_restored_into(
    home: Path, tmp_path: Path
) -> None:
    archive = make_backup(load_settings(), to=f"{tmp_path}/").path
    volume = tmp_path / "data"
    volume.mkdir()
    script = (
        'mount -t tmpfs tmpfs "$1" && PINCH_HOME="$1" "$2" -m app.cli.main restore "$3" && '
        'echo --- && cd "$1" && find . -type f | sort && stat -c "%a" .'
    )
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
         str(volume), sys.executable, str(archive)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    restored, files = result.stdout.split("---\n")
    assert f"Restored into {volume} (workspace {volume / 'workspace'})" in restored
    assert "./agents/main/agent.sqlite" in files and "./workspace/MEMORY.md" in files
    assert "restoring" not in files and files.split()[-1] == "700"


def test_a_dry_run_of_an_archive_from_elsewhere_prints_no_escape_sequence_it_holds(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_backup(load_settings(), to=f"{tmp_path}/").path
    title = "\x1b]0;owned\x07"  # would set the terminal's title (click leaves it in)
    config = f'workspace = "{tmp_path}/ws\\u001b]0;owned\\u0007"\n'.encode()  # TOML escapes
    forged = forge(
        archive, tmp_path / "forged.tar.gz", {"config.toml": config},
        pinch_version=f"9{title}", source_home=f"/home/{title}",
    )  # fmt: skip
    settings_for(tmp_path / "new-home", monkeypatch)

    out = pinch("restore", str(forged), "--dry-run").output

    assert "by Pinch 9 from /home/ (secrets left out)" in out
    assert f"(workspace {tmp_path}/ws); nothing was written" in out
    assert "\x1b" not in out and "\x07" not in out
