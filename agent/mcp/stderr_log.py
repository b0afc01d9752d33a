"""A stdio MCP server's stderr, kept in a file of bounded size: the server writes into a pipe,
and a daemon thread copies what arrives into NAME.stderr.log (0600); past `MAX_STDERR_BYTES` the
file becomes NAME.stderr.log.1 (the one before is dropped) and a new one starts — a server that
logs every request for months never fills the disk that holds the agent's database."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TextIO

MAX_STDERR_BYTES = 1 << 20  # each of NAME.stderr.log and NAME.stderr.log.1


def open_stderr_log(
    path: Path, max_bytes: int = MAX_STDERR_BYTES
) -> tuple[TextIO, threading.Thread]:
    """The write end of a pipe to give a server as its stderr, and the thread copying what it
    writes into `path` (it ends when every copy of the write end is closed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    read_fd, write_fd = os.pipe()
    copier = threading.Thread(
        target=_copy, args=(read_fd, path, max_bytes), name=f"mcp-stderr-{path.name}", daemon=True
    )
    copier.start()
    return open(write_fd, "w", encoding="utf-8"), copier


def _copy(read_fd: int, path: Path, max_bytes: int) -> None:
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        while chunk := os.read(read_fd, 65536):
            if written and written + len(chunk) > max_bytes:
                os.close(out)
                os.replace(path, path.with_name(path.name + ".1"))
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                written = 0
            written += os.write(out, chunk[:max_bytes])
    except OSError:  # the disk is full or the folder is gone: the server's stderr is dropped
        while os.read(read_fd, 65536):  # … but still drained, or the server would block
            pass
    finally:
        os.close(read_fd)
        os.close(out)
