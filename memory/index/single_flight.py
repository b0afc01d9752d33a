"""Single-flight syncs: at most one sync of an index runs at a time in a process."""

from __future__ import annotations

import threading
from collections.abc import Callable

from memory.index.sync import SyncReport


class SingleFlight:
    """At most one sync at a time in a process; calls that arrive while one runs mark the index
    dirty and wait for the one following run, which all of them share (its report, or its
    error). A rebuild asked for by any of them makes that run a rebuild."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._running: int | None = None  # the thread running a sync
        self._started = 0  # runs begun
        self._finished = 0  # runs ended
        self._force = False  # the next run rebuilds
        self._wait = False  # the next run waits for another process's rebuild
        self._outcomes: dict[int, tuple[SyncReport | None, BaseException | None]] = {}
        self._waiters: dict[int, int] = {}

    def run(self, force: bool, wait: bool, sync: Callable[[bool, bool], SyncReport]) -> SyncReport:
        me = threading.get_ident()
        with self._cv:
            if self._running == me:
                raise RuntimeError("MemoryIndex.sync() was called from inside a sync")
            target = self._started + 1  # the first run that starts after this call
            self._force |= force
            self._wait |= wait
            while self._running is not None:
                self._waiters[target] = self._waiters.get(target, 0) + 1
                try:
                    self._cv.wait_for(lambda: self._finished >= target or self._running is None)
                finally:
                    self._waiters[target] -= 1
                if self._finished >= target:
                    return self._take(target)
            self._running = me
            self._started = target
            force, wait, self._force, self._wait = self._force, self._wait, False, False
        outcome: tuple[SyncReport | None, BaseException | None] = (None, None)
        try:
            report = sync(force, wait)
            outcome = (report, None)
            return report
        except BaseException as exc:
            outcome = (None, exc)
            raise
        finally:
            with self._cv:
                if self._waiters.get(target):
                    self._outcomes[target] = outcome
                else:
                    self._waiters.pop(target, None)
                self._finished = target
                self._running = None
                self._cv.notify_all()

    def _take(self, target: int) -> SyncReport:
        report, error = self._outcomes[target]
        if not self._waiters.get(target):
            self._outcomes.pop(target, None)
            self._waiters.pop(target, None)
        if error is not None:
            raise error
        assert report is not None
        return report
