"""A smaller first pass over a large centroid matrix: each row's leading principal components.

At 100k chunks the exact centroid product reads 100k × 384 float32 (154 MB) for every search:
memory-bound, 10-19 ms on this kind of machine. The rows' 128 leading principal components are a
third of that (51 MB at 100k), small enough to stay in a server's last-level cache between
searches: ≈ 1-2 ms. Their product ranks the rows approximately; the best `CANDIDATES` (at least
10 × k) are then scored exactly against the full vectors, and the exact top k of those is the
answer — the k best whenever each of them ranks within the candidates approximately.

Embedding models' vectors are far from isotropic (e5's cosines to one question mostly sit within
a few hundredths of each other, along a few hundred directions of very unequal weight), so a
basis fitted to the rows themselves keeps most of what tells them apart: measured on real
vectors in bench/RESULTS.md (`bench/projection_recall.py`). Random vectors (the synthetic
latency scales) are the worst case: every direction weighs the same.

The basis is fitted once per matrix, in a background thread, on an even sample of its rows
(`SAMPLE_ROWS`); until it is ready, and below `MIN_ROWS` rows, searches take the exact product.
Rows written later are projected onto the same basis as they arrive.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

import numpy as np

log = logging.getLogger(__name__)

MIN_ROWS = 30_000  # below this the exact product reads ≤ 46 MB: fast enough, and exact
DIMENSIONS = 128  # principal components kept per row
CANDIDATES = 1000  # rows re-scored exactly (at least 10 × k)
SAMPLE_ROWS = 20_000  # rows the basis is fitted on
BLOCK_ROWS = 8192  # rows projected per product (bounds the temporary copy)
FIT_NICE = 15  # the fitting thread's nice value, where the OS allows one per thread


class Projection:
    """The fitted basis (`mean`, `basis`: dimensions × DIMENSIONS) and every row projected onto
    it (`rows`, one per matrix row, room included)."""

    def __init__(self, mean: np.ndarray, basis: np.ndarray, capacity: int) -> None:
        self.mean = mean
        self.basis = basis
        self.rows = np.zeros((capacity, basis.shape[1]), dtype=np.float32)

    def project(self, vectors: np.ndarray) -> np.ndarray:
        return ((vectors - self.mean) @ self.basis).astype(np.float32, copy=False)

    def set_rows(self, start: int, vectors: np.ndarray) -> None:
        for i in range(0, len(vectors), BLOCK_ROWS):
            block = vectors[i : i + BLOCK_ROWS]
            self.rows[start + i : start + i + len(block)] = self.project(block)

    def grow(self, capacity: int) -> None:
        if capacity > len(self.rows):
            pad = np.zeros((capacity - len(self.rows), self.rows.shape[1]), dtype=np.float32)
            self.rows = np.concatenate([self.rows, pad])

    def candidates(self, query: np.ndarray, n: int, visible: np.ndarray, count: int) -> np.ndarray:
        """The `count` rows (of the first `n`) the projection ranks best for `query`, among the
        `visible` ones (fewer when fewer are visible), in no particular order."""
        approx = self.rows[:n] @ (np.asarray(query, dtype=np.float32) @ self.basis)
        approx[~visible] = -np.inf
        rows = np.arange(n) if count >= n else np.argpartition(approx, n - count)[n - count :]
        return rows[np.isfinite(approx[rows])]


def principal_basis(
    vectors: np.ndarray, live: np.ndarray, dimensions: int
) -> tuple[np.ndarray, np.ndarray]:
    """The mean of an even sample of the `live` rows (≤ SAMPLE_ROWS) and their `dimensions`
    leading principal directions (a dimensions-wide basis, float32)."""
    sample = vectors[live[:: max(1, len(live) // SAMPLE_ROWS)]]  # a float32 copy: 31 MB
    mean = sample.mean(axis=0, dtype=np.float64).astype(np.float32)
    sample -= mean
    scatter = (sample.T @ sample).astype(np.float64)
    _, eigenvectors = np.linalg.eigh(scatter)  # ascending eigenvalues
    return mean, np.ascontiguousarray(eigenvectors[:, ::-1][:, :dimensions], dtype=np.float32)


def worth_it(rows: int, dimensions: int) -> bool:
    """Whether a matrix of `rows` live rows this wide gains from a first pass."""
    return rows >= MIN_ROWS and dimensions > 2 * DIMENSIONS


def fit(vectors: np.ndarray, live: np.ndarray, capacity: int) -> Projection | None:
    """A projection of `vectors` (its rows `live` in use) onto the leading principal components
    of an even sample of them, with every row up to the last live one projected. None when the
    rows are too few or too narrow to gain anything."""
    if not worth_it(len(live), vectors.shape[1]):
        return None
    mean, basis = principal_basis(vectors, live, DIMENSIONS)
    projection = Projection(mean, basis, capacity)
    projection.set_rows(0, vectors[: int(live[-1]) + 1])
    return projection


class Fitting:
    """A basis being fitted in a background thread for a matrix whose rows keep changing: the
    rows written meanwhile are noted (`touch`) and projected again when it is taken (`take`)."""

    def __init__(self, vectors: np.ndarray, n: int, live: np.ndarray) -> None:
        self.n = n
        self.dirty: set[int] = set()
        self.result: Projection | None = None
        self.failed = False
        self._thread = threading.Thread(
            target=self._run, args=(vectors, live, len(vectors)), name="vector-projection"
        )
        self._thread.daemon = True
        self._thread.start()

    def _run(self, vectors: np.ndarray, live: np.ndarray, capacity: int) -> None:
        # Below the searches' priority (Linux: a thread has its own nice value), so the fit
        # (≈ 1.2 s of one core at 100k) never delays a question asked meanwhile.
        if sys.platform.startswith("linux"):  # elsewhere a thread id is no process id
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FIT_NICE)
        try:
            self.result = fit(vectors, live, capacity)
        except Exception:  # searches stay exact; logged once
            log.exception("fitting the vector projection failed; searches stay exact")
        self.failed = self.result is None

    def touch(self, row: int) -> None:
        self.dirty.add(row)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def take(self, vectors: np.ndarray, n: int) -> Projection | None:
        """The fitted projection brought up to the matrix's rows now (`vectors`, `n` in use)."""
        projection = self.result
        if projection is None:
            return None
        projection.grow(len(vectors))
        if n > self.n:
            projection.set_rows(self.n, vectors[self.n : n])
        for row in self.dirty:
            if row < n:
                projection.rows[row] = projection.project(vectors[row : row + 1])[0]
        return projection
