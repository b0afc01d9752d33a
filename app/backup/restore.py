"""Restoring a backup: `restore_backup(settings, archive)` into an empty home (the default
agent's archive), or into <home>/agents/<id>/ beside the agents there (another agent's).

Order, so that a bad archive or a wrong target changes nothing:
1. the archive, read through once without writing anything: every member a plain file with a
   safe name, the manifest readable and of a known format, every file's size and sha256 as the
   manifest says, no file missing or extra, no database migration this code does not know;
2. the target: no gateway running for it (its lock is free) and the home (or the agent's
   folder) and workspace empty or absent (a restore never mixes an archive with what is there:
   move the old one aside first);
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
from typing import IO, TYPE_CHECKING, cast

from app.backup.manifest import (
    AGENT_SCOPE,
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
    home: Path  # where it was restored: the home, or an agent's folder in it
    workspace: Path
    dry_run: bool
    agent: str | None = None  # the agent restored beside the others (an agent archive's)
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


def _check_target(home: Path, workspace: Path, *, agent: bool = False) -> None:
    """`home` (or, for `agent`, an agent's folder) and `workspace` can take the archive."""
    if agent:
        from app.agents import lock_holder

        pid = lock_holder(home / "gateway.lock")
    else:
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


_READ_ERRORS = (OSError, tarfile.TarError, EOFError, zlib.error)


class _Reading:
    """A member's stream whose read errors say the archive is damaged — only those: a write
    that fails beside it (a full disk) is not the archive's fault."""

    def __init__(self, archive: Path, stream: IO[bytes]) -> None:
        self.archive, self.stream = archive, stream

    def read(self, n: int = -1) -> bytes:
        try:
            return self.stream.read(n)
        except _READ_ERRORS as exc:
            raise RestoreError(_damaged(self.archive, exc)) from exc


@contextlib.contextmanager
def _members(archive: Path) -> Iterator[Iterator[tuple[str, IO[bytes]]]]:
    """(name, stream) of each file in `archive`, in order; RestoreError for anything else."""
    try:
        tar = tarfile.open(archive, mode="r|gz")  # noqa: SIM115 - closed by the `with` below
    except _READ_ERRORS as exc:
        raise RestoreError(_damaged(archive, exc)) from exc

    def walk() -> Iterator[tuple[str, IO[bytes]]]:
        members = iter(tar)
        while True:
            try:
                member = next(members, None)
            except _READ_ERRORS as exc:
                raise RestoreError(_damaged(archive, exc)) from exc
            if member is None:
                return
            name = _safe_name(member.name)
            if not member.isreg():
                raise RestoreError(f"the archive holds {name!r}, not a plain file; {NOTHING}")
            stream = tar.extractfile(member)
            assert stream is not None  # a regular member always has one
            yield name, cast(IO[bytes], _Reading(archive, stream))

    with tar:
        yield walk()


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


def _is_settings_file(name: str) -> bool:
    parts = name.split("/")
    return name == CONFIG_NAME or (
        len(parts) == 3 and parts[0] == AGENTS_DIR and parts[2] == CONFIG_NAME
    )


def _verify(archive: Path) -> tuple[Manifest, dict[str, str]]:
    """`verify_archive`, and the text of the archive's settings files by name."""
    if not archive.is_file():
        raise RestoreError(f"{archive} is not a file; {NOTHING}.")
    found: dict[str, FileEntry] = {}
    manifest_text: str | None = None
    config_texts: dict[str, str] = {}
    with _members(archive) as members:
        for name, stream in members:
            if name in found or (name == MANIFEST_NAME and manifest_text is not None):
                raise RestoreError(f"the archive holds {name!r} twice; {NOTHING}.")
            if name == MANIFEST_NAME:
                data = stream.read(MAX_MANIFEST_BYTES + 1)
                if len(data) > MAX_MANIFEST_BYTES:
                    raise RestoreError(f"the archive's manifest is too large; {NOTHING}.")
                manifest_text = data.decode("utf-8", errors="replace")
            elif _is_settings_file(name):
                data = stream.read(MAX_MANIFEST_BYTES + 1)
                found[name] = _hash_stream(io.BytesIO(data))
                config_texts[name] = data.decode("utf-8", errors="replace")
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
    return manifest, config_texts


def _target_workspace(settings: Settings, config_text: str | None, *, agent: bool) -> Path:
    """Where the workspace goes: PINCH_WORKSPACE if set (the default agent's), else the restored
    config's `workspace`, else <home>/workspace (another agent's: <home>/agents/<id>/workspace)."""
    if not agent and os.environ.get("PINCH_WORKSPACE"):
        return settings.workspace_dir
    if config_text:
        with contextlib.suppress(tomllib.TOMLDecodeError):
            value = tomllib.loads(config_text).get("workspace")
            if isinstance(value, str) and value.strip():
                return Path(value).expanduser()
    return settings.workspace_dir if agent else settings.home / WORKSPACE_DIR


def _agent_target(settings: Settings, manifest: Manifest, agent: str | None) -> Settings | None:
    """The settings of the agent an agent archive restores (None for the default agent's
    archive); RestoreError when `agent` (--agent) is not the archive's."""
    from app.config import load_settings
    from app.config_layers import AGENT_NAME

    name = manifest.agent_id
    if manifest.scope != AGENT_SCOPE:
        if agent is not None and agent != settings.agent_id:
            raise RestoreError(
                f"The archive holds the default agent {name!r} and the installation's settings: "
                f"restore it without --agent, into an empty home; {NOTHING}."
            )
        return None
    if not AGENT_NAME.fullmatch(name):  # it names a folder: the manifest was altered
        raise RestoreError(
            f"The archive names its agent {name!r}, which is not an agent name (letters, digits, "
            f"'-' and '_'): it was altered; {NOTHING}. Use another archive."
        )
    if agent is not None and agent != name:
        raise RestoreError(
            f"The archive holds agent {name!r}, not {agent!r}: restore it with --agent {name} "
            f"(or without --agent); {NOTHING}."
        )
    target = load_settings(home=settings.home, agent_id=name)
    if target.is_default_agent:
        raise RestoreError(
            f"{name!r} is the default agent of {settings.home}: an archive of a separate agent "
            f"is restored beside the default one, under another name; {NOTHING}."
        )
    return target


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


def _move_into(staged: Path, home: Path) -> None:
    """Move what `staged` (a folder in `home`) holds into `home`, then remove it; on a failure
    what was moved goes back, so the home is as empty as before."""
    moved: list[str] = []
    try:
        for entry in sorted(staged.iterdir()):
            os.rename(entry, home / entry.name)
            moved.append(entry.name)
    except OSError:
        for name in moved:
            with contextlib.suppress(OSError):
                os.rename(home / name, staged / name)
        raise
    staged.rmdir()
    with contextlib.suppress(OSError):  # a volume's root may belong to someone else
        home.chmod(0o700)


def restore_backup(
    settings: Settings,
    archive: Path,
    *,
    agent: str | None = None,
    dry_run: bool = False,
    databases_of: DatabaseSnapshots | None = None,
) -> RestoreReport:
    """Restore `archive` into `settings.home` (see the module docstring); RestoreError with
    advice when refused, and then nothing was written. `agent` (--agent) must name the
    archive's agent if given. `databases_of` reads the restored databases' counts back
    (default: SQLite)."""
    store = databases_of or SqliteSnapshots()
    archive = archive.expanduser().absolute()
    manifest, config_texts = _verify(archive)
    agent_settings = _agent_target(settings, manifest, agent)
    if agent_settings is None:
        home, prefix, config_name = settings.home.expanduser().absolute(), "", CONFIG_NAME
    else:  # `home` below is the agent's folder: its members are agents/<id>/...
        home = agent_settings.agent_dir.expanduser().absolute()
        prefix = f"{AGENTS_DIR}/{agent_settings.agent_id}/"
        config_name = prefix + CONFIG_NAME
        foreign = [n for n in manifest.files if not n.startswith((prefix, WORKSPACE_DIR + "/"))]
        if set(foreign) - {SECRETS_NAME}:
            raise RestoreError(f"the agent archive holds {foreign[0]!r}; {NOTHING}.")
    is_agent = agent_settings is not None
    workspace = _target_workspace(
        agent_settings or settings, config_texts.get(config_name), agent=is_agent
    ).absolute()
    _check_target(home, workspace, agent=is_agent)
    report = RestoreReport(archive, manifest, home, workspace, dry_run)
    report.agent = agent_settings.agent_id if agent_settings is not None else None
    if manifest.include_secrets:
        report.notes.append(
            f"{SECRETS_NAME} holds the secrets of the backed-up environment: load them with "
            f"`set -a; . {home / SECRETS_NAME}; set +a` or copy them into your service's "
            "environment (Pinch reads secrets only from the environment)."
        )
    if dry_run:
        return report
    external = not workspace.is_relative_to(home)
    # A home that is a mount point (Docker's /data volume) can be neither replaced nor reached
    # by a rename from beside it: the restore is staged inside it, then moved in.
    mounted = home.is_dir() and os.path.ismount(home)
    staged_home = _stage(home, home.name) if mounted else _stage(home.parent, home.name)
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
                    target = staged_home / name.removeprefix(prefix)
                if _write_private(target, stream) != manifest.files[name]:
                    raise RestoreError(
                        f"{name} changed while it was read a second time; {NOTHING}."
                    )
        for name, db in manifest.databases.items():
            read_back = (
                _snapshots_of(name, store).facts(staged_home / name.removeprefix(prefix)).counts
            )
            if read_back != db.counts:
                raise RestoreError(
                    f"{name} read back with other counts than the manifest's ({read_back} ≠ "
                    f"{db.counts}); {NOTHING}."
                )
        _load_postgres(agent_settings or settings, manifest, staged_home, prefix, report)
        if not external:  # an archive without workspace files still gives a workspace
            make_private_dirs(staged_home / workspace.relative_to(home))
        if mounted:
            _move_into(staged_home, home)
        else:
            if home.exists():
                home.rmdir()  # empty: checked above
            make_private_dirs(home.parent)
            os.rename(staged_home, home)
        if staged_ws is not None:
            if workspace.exists():
                workspace.rmdir()
            os.rename(staged_ws, workspace)
    except OSError as exc:  # the archive's own faults are RestoreErrors already
        raise RestoreError(
            f"The restored files could not be written ({exc.strerror or exc}"
            f"{f': {exc.filename}' if exc.filename else ''}); {NOTHING}. Free some space or "
            "fix the permissions there (or restore elsewhere: PINCH_HOME=/a/new/folder), then "
            "restore again: the archive is fine."
        ) from exc
    except MemoryError_ as exc:
        raise RestoreError(f"The restore failed ({exc}); {NOTHING}.") from exc
    finally:
        for folder in (staged_home, staged_ws):
            if folder is not None and folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
    for name in manifest.databases:
        read = _snapshots_of(name, store).facts(home / name.removeprefix(prefix))
        for key, value in read.counts.items():
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
    settings: Settings, manifest: Manifest, staged_home: Path, prefix: str, report: RestoreReport
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
        PgSnapshots(db).load(staged_home / member.removeprefix(prefix))
    finally:
        db.close()
    report.notes.append(f"{member} was loaded into the PostgreSQL schema {db.schema}.")
