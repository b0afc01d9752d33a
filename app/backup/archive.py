"""Making a backup: `make_backup(settings)` writes one archive (see app/backup/manifest.py for
what it holds) while the gateway may be running.

An archive holds one agent: its workspace, its settings file and its database (the default
agent's with the installation's config.toml; see app/backup/manifest.py). The database is
copied with SQLite's online backup API (memory/store/snapshot.py: one read transaction, which in
WAL mode never blocks the gateway's writes), never as a file — on PostgreSQL (`[store] backend
= "postgres"`) the agent's schema, in one REPEATABLE READ transaction
(memory/store/postgres/snapshot.py), as `agents/<id>/agent.pgdump`; the
workspace files are read one by one (a file replaced meanwhile is read whole, old or new). The
archive is written beside its final name and renamed into place when complete, so a crash or a
full disk leaves no half archive under that name. Archives are private to the owner (0600).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from app.backup.manifest import (
    AGENT_SCOPE,
    AGENTS_DIR,
    ARCHIVE_SUFFIX,
    CONFIG_NAME,
    HOME_SCOPE,
    MANIFEST_NAME,
    MANUAL_PREFIX,
    SECRETS_NAME,
    WORKSPACE_DIR,
    DatabaseEntry,
    FileEntry,
    Manifest,
    is_secret_file,
    postgres_member,
    secret_environment,
    secrets_env_text,
)
from common.private_files import PRIVATE_FILE_MODE, make_private_dirs
from memory.store.snapshot import DatabaseSnapshots, SqliteSnapshots

if TYPE_CHECKING:
    from app.config import Settings

SYNC_EVERY = 16 << 20
WORK_PREFIX = ".pinch-backup-"  # a backup's work folder, beside the archive
STALE_WORK_S = 6 * 3600  # one this old belonged to a backup that was killed
_WORK_NAME = re.compile(re.escape(WORK_PREFIX) + r"[a-z0-9_]{8}")  # tempfile.mkdtemp's names
PARTIAL_NAME = "archive.partial"  # the archive being written, in the work folder
_WORK_FILE = re.compile(r"\d+\.snapshot(?:-journal|-wal|-shm)?|" + re.escape(PARTIAL_NAME))
# zlib's fastest: vectors (most of a large database) hardly compress at any level, and level 6
# took three times as long for 2 % less.
COMPRESS_LEVEL = 1


class BackupError(Exception):
    """The backup could not be made; the message says why and what to do."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int  # bytes of the archive
    manifest: Manifest
    seconds: float
    notes: list[str] = field(default_factory=list)  # what the owner should know (left out …)


def archive_name(
    prefix: str = MANUAL_PREFIX, now: datetime | None = None, agent: str | None = None
) -> str:
    """pinch-backup-<UTC stamp>.tar.gz; another agent's than the default one's names the agent
    (pinch-backup-bob-<stamp>.tar.gz), so archives copied into one folder stay told apart."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix}{agent + '-' if agent else ''}{stamp}{ARCHIVE_SUFFIX}"


def archive_agent(settings: Settings) -> str | None:
    """The agent an archive's name carries: None for the default agent's."""
    return None if settings.is_default_agent else settings.agent_id


def resolve_destination(
    settings: Settings, to: str | Path | None, prefix: str = MANUAL_PREFIX
) -> Path:
    """Where the archive goes: `to` if it names a file, a new name inside `to` if it is a folder
    (or ends in "/"), else a new name in `[backup] path` (default <home>/backups)."""
    if to is None:
        folder = settings.backup_dir
    elif Path(to).expanduser().is_dir() or str(to).endswith(os.sep):
        folder = Path(to)
    else:
        return Path(to).expanduser().absolute()
    name = archive_name(prefix, agent=archive_agent(settings))
    path = folder.expanduser().absolute() / name
    n = 1
    while path.exists():  # two archives in one second
        n += 1
        path = path.with_name(name.replace(ARCHIVE_SUFFIX, f"-{n}{ARCHIVE_SUFFIX}"))
    return path


def agent_databases(settings: Settings) -> list[Path]:
    """The agent's database, if it has one: an archive holds one agent (never another's)."""
    return [settings.database_path] if settings.database_path.is_file() else []


def settings_file(settings: Settings) -> tuple[str, Path]:
    """The archive's settings member and its file: the installation's config.toml for the
    default agent, agents/<id>/config.toml (the agent's own) for any other."""
    if settings.is_default_agent:
        return CONFIG_NAME, settings.config_path
    return f"{AGENTS_DIR}/{settings.agent_id}/{CONFIG_NAME}", settings.agent_dir / CONFIG_NAME


class _Hashing:
    """Reads at most `size` bytes of `source`, hashing what it hands out (all tarfile needs)."""

    def __init__(self, source: IO[bytes], size: int) -> None:
        self.source, self.left, self.digest = source, size, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.source.read(n) if n else b""
        self.left -= len(data)
        self.digest.update(data)
        return data


class _SyncedWriter:
    """Writes to `raw`, flushing to disk every SYNC_EVERY bytes: a large archive written at
    full speed would pile up dirty pages whose write-back stalls every writer of the disk,
    the gateway's commits among them."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.pending = raw, 0

    def write(self, data: bytes) -> int:
        written = self.raw.write(data)
        self.pending += len(data)
        if self.pending >= SYNC_EVERY:
            self.raw.flush()
            os.fdatasync(self.raw.fileno())
            self.pending = 0
        return written

    def flush(self) -> None:
        self.raw.flush()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> FileEntry:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), PRIVATE_FILE_MODE, int(mtime)
    tar.addfile(info, io.BytesIO(data))
    return FileEntry(hashlib.sha256(data).hexdigest(), len(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> FileEntry:
    """Add the regular file at `path` (not following a link) as `name`; hashed as it is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = st.st_size, PRIVATE_FILE_MODE, int(st.st_mtime)
        reader = _Hashing(handle, st.st_size)
        tar.addfile(info, reader)  # raises if the file shrank
        return FileEntry(reader.digest.hexdigest(), st.st_size)


def _workspace_files(
    workspace: Path, include_secrets: bool, skip: Path
) -> tuple[list[Path], dict[str, list[str]]]:
    """The workspace's regular files, sorted, and what was left out (by reason); `skip` (the
    archives' folder, should it be inside the workspace) is not walked."""
    files: list[Path] = []
    left_out: dict[str, list[str]] = {}
    for root, dirs, names in os.walk(workspace):
        dirs[:] = sorted(d for d in dirs if Path(root, d) != skip)
        for name in sorted(names) + [d for d in dirs if Path(root, d).is_symlink()]:
            path = Path(root, name)
            rel = path.relative_to(workspace).as_posix()
            if path.is_symlink():
                left_out.setdefault("symbolic links", []).append(rel)
            elif not path.is_file():
                left_out.setdefault("not regular files", []).append(rel)
            elif is_secret_file(name) and not include_secrets:
                left_out.setdefault("secrets", []).append(rel)
            else:
                files.append(path)
    return files, left_out


def _pinch_version() -> str:
    try:
        return importlib.metadata.version("pinch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def make_backup(
    settings: Settings,
    *,
    to: str | Path | None = None,
    include_secrets: bool = False,
    prefix: str = MANUAL_PREFIX,
    on_progress: Callable[[str], None] | None = None,
    databases_of: DatabaseSnapshots | None = None,
) -> BackupResult:
    """Write one archive of `settings`' agent (see the module docstring): its workspace, its
    database and its settings file (app/backup/manifest.py); BackupError with advice.
    `databases_of` copies the databases (default: SQLite's online backup API)."""
    dest = resolve_destination(settings, to, prefix)
    if dest.exists():
        raise BackupError(f"{dest} already exists: give another --to (nothing was written).")
    if settings.store.backend != "postgres":
        sources = [(f"{AGENTS_DIR}/{p.parent.name}/{p.name}", p) for p in agent_databases(settings)]
        return _make_backup(settings, dest, include_secrets, on_progress, sources, databases_of)
    # On PostgreSQL the agent's schema is the database (the SQLite file is never opened).
    sources = [(postgres_member(settings.agent_id), Path(postgres_member(settings.agent_id)))]
    if databases_of is not None:
        return _make_backup(settings, dest, include_secrets, on_progress, sources, databases_of)
    from app.store_factory import open_postgres_store
    from memory.store.postgres.snapshot import PgSnapshots

    db = open_postgres_store(settings)
    try:
        return _make_backup(settings, dest, include_secrets, on_progress, sources, PgSnapshots(db))
    finally:
        db.close()


def _make_backup(
    settings: Settings,
    dest: Path,
    include_secrets: bool,
    on_progress: Callable[[str], None] | None,
    databases: list[tuple[str, Path]],
    databases_of: DatabaseSnapshots | None,
) -> BackupResult:
    store = databases_of or SqliteSnapshots()
    started = time.monotonic()
    say = on_progress or (lambda _: None)
    workspace = settings.workspace_dir
    if not databases and not workspace.is_dir():
        raise BackupError(
            f"Nothing to back up in {settings.home}: no workspace and no agent database (is "
            "PINCH_HOME right? `pinch init` creates them)."
        )
    try:
        make_private_dirs(dest.parent)
        _remove_stale_work(dest.parent)
        work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=dest.parent))
    except OSError as exc:
        raise BackupError(f"Cannot write to {dest.parent}: {exc.strerror}.") from exc
    partial = work / PARTIAL_NAME
    try:
        manifest = Manifest(
            pinch_version=_pinch_version(),
            created_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            agent_id=settings.agent_id,
            source_home=str(settings.home),
            workspace_external=not workspace.is_relative_to(settings.home),
            include_secrets=include_secrets,
            scope=HOME_SCOPE if settings.is_default_agent else AGENT_SCOPE,
        )
        snapshots: list[tuple[str, Path]] = []
        for name, db in databases:
            copy = work / f"{len(snapshots)}.snapshot"
            say(f"snapshot {name}")
            store.copy(db, copy)
            facts = store.facts(copy)
            manifest.databases[name] = DatabaseEntry(
                facts.counts, facts.migrations, facts.sqlite_version, facts.engine
            )
            snapshots.append((name, copy))
        files, left_out = (
            _workspace_files(workspace, include_secrets, dest.parent)
            if workspace.is_dir()
            else ([], {})
        )
        manifest.left_out = left_out
        say(f"archive {len(files)} workspace files")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(
                fileobj=cast(IO[bytes], _SyncedWriter(raw)),  # it only writes and flushes
                mode="w:gz",
                compresslevel=COMPRESS_LEVEL,
                format=tarfile.PAX_FORMAT,
            ) as tar:
                config_name, config_path = settings_file(settings)
                if config_path.is_file():
                    manifest.files[config_name] = _add_file(tar, config_name, config_path)
                for path in files:
                    name = f"{WORKSPACE_DIR}/{path.relative_to(workspace).as_posix()}"
                    try:
                        manifest.files[name] = _add_file(tar, name, path)
                    except FileNotFoundError:  # deleted since the walk: not part of this backup
                        manifest.left_out.setdefault("deleted meanwhile", []).append(name)
                for name, copy in snapshots:
                    manifest.files[name] = _add_file(tar, name, copy)
                if include_secrets:
                    text = secrets_env_text(secret_environment()).encode()
                    manifest.files[SECRETS_NAME] = _add_bytes(tar, SECRETS_NAME, text, time.time())
                _add_bytes(tar, MANIFEST_NAME, manifest.to_json().encode(), time.time())
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(partial, dest)
        _sync_folder(dest.parent)
    except OSError as exc:
        raise BackupError(
            f"Could not write the backup {dest}: {exc.strerror or exc}. Check the free space "
            "and permissions there; nothing else was changed."
        ) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    notes = [
        f"left out ({why}): {', '.join(paths[:5])}" for why, paths in manifest.left_out.items()
    ]
    return BackupResult(dest, dest.stat().st_size, manifest, time.monotonic() - started, notes)


def _remove_stale_work(folder: Path) -> None:
    """Remove the work folders of backups killed mid-way (older than STALE_WORK_S): only a
    folder named as `tempfile.mkdtemp` names ours and holding nothing but what a backup writes
    there (database snapshots, a partial archive) — `--to` may name a folder of the owner's,
    where a folder merely called `.pinch-backup-…` is theirs."""
    for stale in folder.glob(f"{WORK_PREFIX}*"):
        with contextlib.suppress(OSError):
            if (
                _WORK_NAME.fullmatch(stale.name)
                and stale.is_dir()
                and not stale.is_symlink()
                and time.time() - stale.stat().st_mtime > STALE_WORK_S
                and all(_WORK_FILE.fullmatch(e.name) and e.is_file() for e in os.scandir(stale))
            ):
                shutil.rmtree(stale, ignore_errors=True)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
