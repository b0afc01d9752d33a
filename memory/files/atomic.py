"""Atomic, confined file operations in the workspace: the bottom of every memory-file write.

- `locked_target(workspace, target)`: the process-wide write lock taken (two writers must not
  interleave a read-modify-write of one file) and `target` pinned (`pinned_target`): reached
  through a descriptor of its checked folder, so a swapped symbolic link cannot redirect it.
- `read_workspace_text`: a file's UTF-8 text (None if absent), refusing binary and non-UTF-8.
- `replace_atomically`: temporary file beside the target, synced, renamed over it (permissions
  kept), optionally only if the file still holds the text read before (compare-and-swap).
- `create_atomically`: a new file, never replacing one.

Files are created private to the owner (`PRIVATE_FILE_MODE`), whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from common.private_files import PRIVATE_FILE_MODE, make_private_dirs
from memory.errors import WorkspaceError
from memory.files.workspace import FileMissingError, open_folder_confined, read_confined

# One lock for the process: two writers must not interleave read-modify-write of one file.
WRITE_LOCK = threading.RLock()


@contextlib.contextmanager
def locked_target(workspace: Path, target: Path) -> Iterator[Path]:
    """`WRITE_LOCK` held and `target` pinned (`pinned_target`) for one read-modify-write."""
    with WRITE_LOCK, pinned_target(workspace, target) as pinned:
        yield pinned


@contextlib.contextmanager
def pinned_target(workspace: Path, target: Path) -> Iterator[Path]:
    """`target` reached through a descriptor of its folder, opened without following links.

    On Linux the folder is named `/proc/self/fd/N/`: it stays the folder that was checked even
    if someone swaps it (or a parent) for a symbolic link meanwhile, so the temporary file and
    the rename cannot land outside the workspace. Elsewhere, `target` itself.
    """
    _mkdirs(target)
    rel = target.relative_to(workspace).as_posix()
    fd = open_folder_confined(workspace, rel)
    try:
        proc = Path(f"/proc/self/fd/{fd}")
        yield proc / target.name if proc.is_dir() else target
    finally:
        os.close(fd)


def read_workspace_text(workspace: Path, rel: str) -> str | None:
    """The file's text, None if it does not exist; refuses binary and non-UTF-8 files.

    Opened without following links (`read_confined`): a file swapped for a symbolic link after
    `confine_path` checked it cannot bring outside content into the workspace.
    """
    try:
        data = read_confined(workspace, rel)
    except FileMissingError:
        return None
    if b"\x00" in data:
        raise WorkspaceError(
            f"{rel} contains NUL bytes (binary data), so Pinch will not change it. Move it out "
            "of the workspace or fix it, then try again."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(
            f"{rel} is not valid UTF-8 (first bad byte at offset {exc.start}), so Pinch will not "
            "write to it and risk corrupting it. Fix its encoding (re-save it as UTF-8 in your "
            "editor, or `iconv -f latin1 -t utf-8`), then try again."
        ) from exc


def encode_utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(f"The text cannot be written as UTF-8: {exc.reason}.") from exc


def _new_file_mode() -> int:
    # Memory files hold the owner's life: readable by the owner only, whatever the umask.
    return PRIVATE_FILE_MODE


def _mkdirs(path: Path) -> None:
    try:
        make_private_dirs(path.parent)
    except OSError as exc:
        raise WorkspaceError(f"Cannot create the folder {path.parent}: {exc.strerror}.") from exc


def _temp_copy(target: Path, data: bytes, mode: int) -> str:
    """A synced temporary file beside `target` holding `data`; returns its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def replace_atomically(
    target: Path, data: bytes, *, check: bool = False, expect: str | None = None
) -> bool:
    """Replace `target` with `data` atomically, keeping its permissions.

    With `check`, the replace happens only if the file still holds `expect` (the text read
    before; None: it did not exist); returns False when it changed meanwhile.
    """
    _mkdirs(target)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _new_file_mode()
    tmp = _temp_copy(target, data, mode)
    try:
        if check:
            try:
                now = target.read_bytes().decode("utf-8")
            except FileNotFoundError:
                now = None
            except UnicodeDecodeError:
                return False
            if now != expect:
                return False
        os.replace(tmp, target)
    except OSError as exc:
        raise WorkspaceError(
            f"Could not write {target.name}: {exc.strerror or exc}. The file was not changed."
        ) from exc
    finally:
        _unlink_quietly(tmp)
    sync_folder(target.parent)
    return True


def create_atomically(target: Path, data: bytes) -> bool:
    """Create `target` with `data` atomically, never replacing a file; False if one exists."""
    _mkdirs(target)
    tmp = _temp_copy(target, data, _new_file_mode())
    try:
        try:
            os.link(tmp, target)  # atomic, and fails if the name is taken
        except FileExistsError:
            return False
        except OSError:
            # No hard links on this file system: the exists-check before is the best we have.
            if target.exists():
                return False
            os.replace(tmp, target)
    finally:
        _unlink_quietly(tmp)
    sync_folder(target.parent)
    return True


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sync_folder(folder: Path) -> None:
    # Make the rename itself durable; not possible (nor needed) on every platform.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
