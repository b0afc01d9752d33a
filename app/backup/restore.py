"""Restoring a backup: `restore_backup(settings, archive)` into an empty home.

Order, so that a bad archive or a wrong target changes nothing:
1. the target: no gateway running for it (its lock is free) and the home empty or absent (a
   restore never mixes an archive with what is there: move the old home aside first);
2. the archive, read through once without writing anything: every member a plain file with a
   safe name, the manifest readable and of a known format, every file's size and sha256 as the
   manifest says, no file missing or extra, no database migration this code does not know;
3. extraction into a private folder beside the home (hashes checked again while writing), the
   databases' counts checked against the manifest, then one rename into place (and one for a
   workspace kept outside the home).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import tomllib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from app.backup.manifest import (
    AGENTS_DIR,
    CONFIG_NAME,
    MANIFEST_NAME,
    PG_SNAPSHOT_NAME,
    SECRETS_NAME,
    WORKSPACE_DIR,
    FileEntry,
    Manifest,
    postgres_member,
)
from common.private_files import PRIVATE_FILE_MODE, make_private_dirs
from memory.errors import MemoryError_
from memory.store.snapshot import DatabaseSnapshots, SqliteSnapshots, unknown_migrations

if TYPE_CHECKING:
    from app.config import Settings

CHUNK = 1 << 20
MAX_MANIFEST_BYTES = 64 << 20
NOTHING = "nothing was restored"


class RestoreError(Exception):
    """The restore was refused or failed; the message says why and what to do."""


@dataclass
class RestoreReport:
    archive: Path
    manifest: Manifest
    home: Path
    workspace: Path
    dry_run: bool
    restored: dict[str, int] = field(default_factory=dict)  # counts read back after restoring
    notes: list[str] = field(default_factory=list)


def running_gateway(home: Path) -> str | None:
    """The pid (or "unknown") of a gateway holding a lock in `home`, else None."""
    for lock in sorted(home.glob(f"{AGENTS_DIR}/*/gateway.lock")):
        try:
            handle = lock.open("r", encoding="utf-8")
        except OSError:
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return handle.read().strip() or "unknown"
            fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def _check_target(home: Path, workspace: Path) -> None:
    pid = running_gateway(home) if home.is_dir() else None
    if pid is not None:
        raise RestoreError(
            f"A Pinch gateway is running for {home} (pid {pid}): stop it, move the home aside "
            f"(mv {home} {home}.old), then restore; {NOTHING}."
        )
    for folder in dict.fromkeys((home, workspace)):
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise RestoreError(
                f"{folder} is not empty: a restore never mixes an archive with existing data. "
                f"Move it aside (mv {folder} {folder}.old) or set PINCH_HOME to a new folder, "
                f"then restore; {NOTHING}."
            )


def _safe_name(name: str) -> str:
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or ".." in path.parts
        or "\\" in name
        or str(path) != name
        or name.startswith("./")
    ):
        raise RestoreError(f"the archive holds an unsafe name {name!r}; {NOTHING}")
    return name


@contextlib.contextmanager
def _members(archive: Path) -> Iterator[Iterator[tuple[str, IO[bytes]]]]:
    """(name, stream) of each file in `archive`, in order; RestoreError for anything else."""
    try:
        tar = tarfile.open(archive, mode="r|gz")  # noqa: SIM115 - closed by the `with` below
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise RestoreError(_damaged(archive, exc)) from exc

    def walk() -> Iterator[tuple[str, IO[bytes]]]:
        for member in tar:
            name = _safe_name(member.name)
            if not member.isreg():
                raise RestoreError(f"the archive holds {name!r}, not a plain file; {NOTHING}")
            stream = tar.extractfile(member)
            assert stream is not None  # a regular member always has one
            yield name, stream

    try:
        with tar:
            yield walk()
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise RestoreError(_damaged(archive, exc)) from exc


def _damaged(archive: Path, exc: BaseException) -> str:
    detail = str(exc) or type(exc).__name__
    return (
        f"The archive {archive} is damaged or incomplete ({detail}); {NOTHING}. Use another "
        "archive (a copy, or an older one)."
    )


def _hash_stream(stream: IO[bytes], out: IO[bytes] | None = None) -> FileEntry:
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if out is not None:
            out.write(chunk)
    return FileEntry(digest.hexdigest(), size)


def verify_archive(archive: Path) -> Manifest:
    """Read the whole archive without writing anything; its manifest if every file is there,
    whole and as the manifest says, else RestoreError."""
    return _verify(archive)[0]


def _verify(archive: Path) -> tuple[Manifest, str | None]:
    """`verify_archive`, and the text of the archive's config.toml (None if it has none)."""
    if not archive.is_file():
        raise RestoreError(f"{archive} is not a file; {NOTHING}.")
    found: dict[str, FileEntry] = {}
    manifest_text: str | None = None
    config_text: str | None = None
    with _members(archive) as members:
        for name, stream in members:
            if name in found or (name == MANIFEST_NAME and manifest_text is not None):
                raise RestoreError(f"the archive holds {name!r} twice; {NOTHING}.")
            if name == MANIFEST_NAME:
                data = stream.read(MAX_MANIFEST_BYTES + 1)
                if len(data) > MAX_MANIFEST_BYTES:
                    raise RestoreError(f"the archive's manifest is too large; {NOTHING}.")
                manifest_text = data.decode("utf-8", errors="replace")
            elif name == CONFIG_NAME:
                data = stream.read(MAX_MANIFEST_BYTES + 1)
                found[name] = _hash_stream(io.BytesIO(data))
                config_text = data.decode("utf-8", errors="replace")
            else:
                found[name] = _hash_stream(stream)
    if manifest_text is None:
        raise RestoreError(
            f"{archive} has no manifest.json: not a Pinch backup, or cut short; {NOTHING}."
        )
    try:
        manifest = Manifest.from_json(manifest_text)
    except ValueError as exc:
        raise RestoreError(f"{archive} cannot be restored: {exc}; {NOTHING}.") from None
    for name in manifest.files:
        _safe_name(name)
    missing = sorted(set(manifest.files) - set(found))
    extra = sorted(set(found) - set(manifest.files))
    changed = sorted(n for n in set(found) & set(manifest.files) if found[n] != manifest.files[n])
    if missing or extra or changed:
        what = (
            (f"missing {', '.join(missing[:3])}; " if missing else "")
            + (f"not in the manifest {', '.join(extra[:3])}; " if extra else "")
            + (f"changed since the backup {', '.join(changed[:3])}; " if changed else "")
        )
        raise RestoreError(
            f"The archive {archive} does not match its manifest ({what.rstrip('; ')}): it was "
            f"damaged or altered; {NOTHING}. Use another archive."
        )
    for name, db in manifest.databases.items():
        if name not in manifest.files:
            raise RestoreError(f"the manifest names a database {name} it does not hold; {NOTHING}.")
        newer = unknown_migrations(
            db.migrations, _known_pg_migrations() if _is_postgres(name) else None
        )
        if newer:
            raise RestoreError(
                f"The archive was made by a newer Pinch ({manifest.pinch_version}): its "
                f"database {name} has changes this version does not know "
                f"({', '.join(newer[:3])}). Upgrade Pinch (git pull, or pip install -U pinch), "
                f"then restore again; {NOTHING}."
            )
    return manifest, config_text


def _target_workspace(settings: Settings, config_text: str | None) -> Path:
    """Where the workspace goes: PINCH_WORKSPACE if set, else the restored config's
    `workspace`, else <home>/workspace."""
    if os.environ.get("PINCH_WORKSPACE"):
        return settings.workspace_dir
    if config_text:
        with contextlib.suppress(tomllib.TOMLDecodeError):
            value = tomllib.loads(config_text).get("workspace")
            if isinstance(value, str) and value.strip():
                return Path(value).expanduser()
    return settings.home / WORKSPACE_DIR


def _write_private(path: Path, stream: IO[bytes]) -> FileEntry:
    make_private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        entry = _hash_stream(stream, out)
        out.flush()
        os.fsync(out.fileno())
    return entry


def _stage(parent: Path, name: str) -> Path:
    make_private_dirs(parent)
    return Path(tempfile.mkdtemp(prefix=f".{name}.restoring-", dir=parent))


def restore_backup(
    settings: Settings,
    archive: Path,
    *,
    dry_run: bool = False,
    databases_of: DatabaseSnapshots | None = None,
) -> RestoreReport:
    """Restore `archive` into `settings.home` (see the module docstring); RestoreError with
    advice when refused, and then nothing was written. `databases_of` reads the restored
    databases' counts back (default: SQLite)."""
    store = databases_of or SqliteSnapshots()
    home = settings.home.expanduser().absolute()
    archive = archive.expanduser().absolute()
    _check_target(home, settings.workspace_dir)
    manifest, config_text = _verify(archive)
    workspace = _target_workspace(settings, config_text).absolute()
    _check_target(home, workspace)
    report = RestoreReport(archive, manifest, home, workspace, dry_run)
    if manifest.include_secrets:
        report.notes.append(
            f"{SECRETS_NAME} holds the secrets of the backed-up environment: load them with "
            f"`set -a; . {home / SECRETS_NAME}; set +a` or copy them into your service's "
            "environment (Pinch reads secrets only from the environment)."
        )
    if dry_run:
        return report
    external = not workspace.is_relative_to(home)
    staged_home = _stage(home.parent, home.name)
    staged_ws = _stage(workspace.parent, workspace.name) if external else None
    try:
        with _members(archive) as members:
            for name, stream in members:
                if name == MANIFEST_NAME:
                    continue
                if name.startswith(WORKSPACE_DIR + "/"):
                    rel = name[len(WORKSPACE_DIR) + 1 :]
                    target = (
                        staged_ws / rel
                        if staged_ws is not None
                        else staged_home / workspace.relative_to(home) / rel
                    )
                else:
                    target = staged_home / name
                if _write_private(target, stream) != manifest.files[name]:
                    raise RestoreError(
                        f"{name} changed while it was read a second time; {NOTHING}."
                    )
        for name, db in manifest.databases.items():
            read_back = _snapshots_of(name, store).facts(staged_home / name).counts
            if read_back != db.counts:
                raise RestoreError(
                    f"{name} read back with other counts than the manifest's ({read_back} ≠ "
                    f"{db.counts}); {NOTHING}."
                )
        _load_postgres(settings, manifest, staged_home, report)
        if not external:  # an archive without workspace files still gives a workspace
            make_private_dirs(staged_home / workspace.relative_to(home))
        if home.exists():
            home.rmdir()  # empty: checked above
        os.rename(staged_home, home)
        if staged_ws is not None:
            if workspace.exists():
                workspace.rmdir()
            os.rename(staged_ws, workspace)
    except (OSError, MemoryError_) as exc:
        raise RestoreError(f"The restore failed ({exc}); {NOTHING}.") from exc
    finally:
        for folder in (staged_home, staged_ws):
            if folder is not None and folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
    for name in manifest.databases:
        for key, value in _snapshots_of(name, store).facts(home / name).counts.items():
            report.restored[key] = report.restored.get(key, 0) + (value or 0)
    return report


# -- PostgreSQL snapshots (agents/<id>/agent.pgdump) ----------------------------------------------


def _is_postgres(name: str) -> bool:
    return PurePosixPath(name).name == PG_SNAPSHOT_NAME


def _known_pg_migrations() -> dict[str, set[str]]:
    from memory.store.postgres.snapshot import known_pg_migrations

    return known_pg_migrations()


def _snapshots_of(name: str, sqlite: DatabaseSnapshots) -> DatabaseSnapshots:
    """Who reads the snapshot `name`: a PostgreSQL one's header, else `sqlite` (the default)."""
    if not _is_postgres(name):
        return sqlite
    from memory.store.postgres.snapshot import PgSnapshots

    return PgSnapshots(None)


def _load_postgres(
    settings: Settings, manifest: Manifest, staged_home: Path, report: RestoreReport
) -> None:
    """Load this agent's PostgreSQL snapshot into `[store]`'s database (its schema must be
    empty: one transaction, so a refusal leaves it as it was) when the backend is PostgreSQL;
    otherwise the snapshot stays a file in the home, and the report says how to load it."""
    member = postgres_member(settings.agent_id)
    if member not in manifest.databases:
        return
    if settings.store.backend != "postgres":
        report.notes.append(
            f'{member} is a PostgreSQL snapshot: set [store] backend = "postgres" and '
            "PINCH_STORE__DSN, then restore again to load it into the database."
        )
        return
    from app.store_factory import open_postgres_store
    from memory.store.postgres.snapshot import PgSnapshots

    db = open_postgres_store(settings)
    try:
        PgSnapshots(db).load(staged_home / member)
    finally:
        db.close()
    report.notes.append(f"{member} was loaded into the PostgreSQL schema {db.schema}.")
