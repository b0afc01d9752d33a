"""Reading a memory file for the index: safely (never blocking, never through a symbolic link,
what was stat'ed is what is read), within a size limit, and with advice a user can act on when
it cannot be read."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from common.text import unclosed_comment_line
from memory.errors import IndexingError, WorkspaceError
from memory.files.workspace import (
    BINARY_ADVICE,
    MAX_FILE_BYTES,
    MemoryFile,
    open_memory_file,
    too_big_advice,
)
from memory.index.chunking import hash_text


def shown_path(rel_path: str) -> str:
    """The path as it can be stored and printed: bytes that are not UTF-8 and control
    characters (which could drive a terminal) become \\xNN escapes."""
    try:
        rel_path.encode("utf-8")
        text = rel_path
    except UnicodeEncodeError:
        text = rel_path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def read_memory_file(
    workspace: Path, f: MemoryFile, st: os.stat_result, *, allow_hard_links: bool = False
) -> tuple[str, str, str | None]:
    """(text, sha256 of the bytes, warning) of a regular file, or IndexingError with advice.

    Opened through `open_memory_file`: one path component at a time without following a
    symbolic link, without blocking (a FIFO named *.md must never hang the index), hard links
    refused unless allowed — and checked again on the open descriptor: what was stat'ed is what
    is read.
    """
    if st.st_size > MAX_FILE_BYTES:
        raise _too_big(st.st_size)
    try:
        fd = open_memory_file(workspace, f, allow_hard_links=allow_hard_links)
    except WorkspaceError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in ADVISED_ERRNOS:
            raise IndexingError(os_advice(cause)) from exc
        raise IndexingError(f"skipped: {exc}") from exc
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise IndexingError(NOT_REGULAR)
        if opened.st_size > MAX_FILE_BYTES:
            raise _too_big(opened.st_size)
        parts = []
        size = 0
        while True:
            part = os.read(fd, 1 << 20)
            if not part:
                break
            parts.append(part)
            size += len(part)
            if size > MAX_FILE_BYTES:
                raise _too_big(size)
        data = b"".join(parts)
    except OSError as exc:
        raise IndexingError(os_advice(exc)) from exc
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise IndexingError(f"skipped: {BINARY_ADVICE}")
    file_hash = hash_text(data.decode("latin-1"))
    warnings = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        warnings.append(
            f"not valid UTF-8 (first bad byte at offset {exc.start}); indexed with "
            "replacement characters, the file itself was not changed"
        )
    if (line := unclosed_comment_line(text)) is not None:
        warnings.append(
            f"line {line} opens an HTML comment (`<!--`) that is never closed: what follows is "
            "searched, but search snippets (what the assistant reads of a hit) and Markdown "
            "viewers hide it; close the comment with `-->` or remove the `<!--`"
        )
    return text, file_hash, "; ".join(warnings) or None


def _too_big(size: int) -> IndexingError:
    return IndexingError(f"skipped: {too_big_advice(size)}")


ADVISED_ERRNOS = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM})
NOT_REGULAR = (
    "skipped: not a regular file (a FIFO, socket, device or folder named *.md); "
    "remove it or rename it so it does not end in .md"
)
BAD_NAME = (
    "skipped: the file name is not valid UTF-8 or holds control characters; rename the file "
    "(e.g. with `mv`) to a plain UTF-8 name, then run `pinch memory index`"
)


def os_advice(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return (
            "skipped: the file disappeared while being indexed (deleted or renamed); "
            "nothing to do, the next index run catches up"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            "skipped: permission denied; make it readable by the user running Pinch "
            "(chmod u+r), then run `pinch memory index`"
        )
    if exc.errno == errno.ELOOP:
        return "skipped: it became a symbolic link, which memory files may not be"
    return (
        f"skipped: cannot read it ({exc.strerror}); check the file, then run `pinch memory index`"
    )
