"""Re-index memory files shortly after they change (for the long-running gateway and REPL).

`watchfiles` (Rust notify) reports changes; a burst of changes is handed over once the files
have been quiet for the debounce time (1.5 s by default, like OpenClaw), and each burst triggers
one incremental `MemoryIndex.sync()` in a background thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from memory.files.workspace import extra_path_base, is_memory_path
from memory.index.index import MemoryIndex

log = logging.getLogger(__name__)
POLL_MS = 2000  # how often a watcher without file notifications looks at the files


class MemoryWatcher:
    """Watches the workspace (and extra paths) and keeps the index in step."""

    def __init__(self, index: MemoryIndex, debounce_ms: int | None = None) -> None:
        self.index = index
        self.debounce_ms = debounce_ms or index.config.watch_debounce_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.syncs = 0  # completed syncs, for status and tests
        self.last_error: str | None = None

    def _roots(self) -> list[Path]:
        roots = [self.index.workspace]
        for raw in self.index.config.extra_paths:
            p = extra_path_base(self.index.workspace, raw)
            if p.exists() and not p.is_relative_to(self.index.workspace):
                roots.append(p)
        return roots

    def _extra_bases(self) -> list[Path]:
        ws = self.index.workspace
        return [
            Path(os.path.abspath(extra_path_base(ws, raw))) for raw in self.index.config.extra_paths
        ]

    def _relevant(self, changes: Iterable[tuple[object, str]]) -> bool:
        """Whether a change may alter what is indexed: a Markdown file that is a memory file or
        under an extra path, or a folder in those places (renamed or deleted as a whole, which
        may come as one event for the folder only)."""
        workspace = Path(os.path.abspath(self.index.workspace))
        places = [workspace / "memory", *self._extra_bases()]
        # The watcher may report paths through links the settings did not name, or not.
        workspaces = {workspace, workspace.resolve()}
        places += [place.resolve() for place in places]
        for _, raw in changes:
            p = Path(os.path.abspath(raw))
            if p.name.startswith(".") or not (p.suffix == ".md" or _maybe_folder(p)):
                continue
            if p.suffix == ".md" and any(
                p.is_relative_to(ws) and is_memory_path(p.relative_to(ws).as_posix())
                for ws in workspaces
            ):
                return True
            if any(p.is_relative_to(place) for place in places):  # (the place itself too)
                return True
        return False

    def _run(self) -> None:
        try:
            self._watch(polling=False)
        except Exception as exc:  # no inotify instance left: one a watched agent, 128 a user
            if self._stop.is_set():
                return
            log.warning(
                "Cannot watch %s with the system's file notifications (%s): checking it every "
                "%d s instead (raise fs.inotify.max_user_instances to watch more agents)",
                self.index.workspace,
                exc,
                POLL_MS // 1000,
            )
            self._watch(polling=True)

    def _watch(self, *, polling: bool) -> None:
        from watchfiles import watch

        # watchfiles yields once no change has come for `step` ms (the quiet period we want),
        # grouping a continuous stream of changes for at most `debounce` ms.
        for changes in watch(
            *self._roots(),
            debounce=max(4 * self.debounce_ms, 5000),
            step=self.debounce_ms,
            stop_event=self._stop,
            recursive=True,
            raise_interrupt=False,
            force_polling=polling or None,
            poll_delay_ms=POLL_MS,
        ):
            if self._stop.is_set():
                break
            if not self._relevant(changes):
                continue
            try:
                self.index.sync()
                self.syncs += 1
                self.last_error = None
            except Exception as exc:  # keep watching; report through status
                self.last_error = str(exc)
                log.warning("memory re-index after a file change failed: %s", exc)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memory-watcher", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


# Editors' temporary files, deleted all the time: never a folder worth a sync.
_TEMPORARY_SUFFIXES = frozenset({".swp", ".swx", ".tmp", ".bak"})


def _maybe_folder(path: Path) -> bool:
    """A folder now, or a path gone (renamed or deleted) that may have been one."""
    if path.is_dir():
        return True
    gone = not path.exists() and not path.is_symlink()
    return gone and path.suffix not in _TEMPORARY_SUFFIXES and not path.name.endswith("~")
