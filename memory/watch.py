"""Re-index memory files shortly after they change (for the long-running gateway and REPL).

`watchfiles` (Rust notify) reports changes; a burst of changes is handed over once the files
have been quiet for the debounce time (1.5 s by default, like OpenClaw), and each burst triggers
one incremental `MemoryIndex.sync()` in a background thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from memory.index import MemoryIndex
from memory.workspace import is_memory_path

log = logging.getLogger(__name__)


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
            p = Path(raw).expanduser()
            p = p if p.is_absolute() else self.index.workspace / p
            if p.exists() and not p.is_relative_to(self.index.workspace):
                roots.append(p)
        return roots

    def _relevant(self, changes: Iterable[tuple[object, str]]) -> bool:
        ws = self.index.workspace.resolve()
        for _, raw in changes:
            p = Path(raw)
            if p.suffix != ".md":
                continue
            try:
                rel = p.resolve().relative_to(ws).as_posix()
            except ValueError:
                return True  # an extra path outside the workspace
            if is_memory_path(rel):
                return True
        return False

    def _run(self) -> None:
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
