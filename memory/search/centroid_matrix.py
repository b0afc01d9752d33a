"""A generation's centroids held in memory, and cosine search over them: exact, or past
`projection.MIN_ROWS` rows a first pass over their principal components with the best
candidates scored exactly (memory/search/projection.py)."""

from __future__ import annotations

import numpy as np

from memory.search import projection as projection_module
from memory.search.projection import Fitting, Projection


def best_first(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """(chunk id, similarity) pairs by similarity, best first; ties: lower chunk id first."""
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


class CentroidMatrix:
    """A generation's centroids in memory: rows in no particular order (a freed row has scope
    -1 and is never returned), with room to grow so a write changes rows in place."""

    def __init__(
        self,
        key: tuple[int, str],
        seq: int | None,
        n: int,
        ids: np.ndarray,
        vectors: np.ndarray,
        scope_of: np.ndarray,
        scope_ids: dict[str, int],
    ) -> None:
        self.key = key  # (generation, index_version) it is current at
        self.seq = seq  # the change log's last seq it has seen; None: no log, re-read in full
        self.n = n  # rows in use (some may be freed); the arrays have room for more
        self.ids = ids  # int64 chunk ids
        self.vectors = vectors  # float32 (capacity, dimensions)
        self.scope_of = scope_of  # int32: index into scope_ids; -1 = a free row
        self.scope_ids = scope_ids
        self._row: dict[int, int] | None = None  # chunk id -> row, built on the first change
        self._free: list[int] = []  # freed rows, used again before the arrays grow
        # The rows each set of scopes may see (np.isin over every row: ≈ 1-2 ms at 100k), kept
        # until a row changes.
        self._masks: dict[tuple[str, ...], np.ndarray] = {}
        self._projection: Projection | None = None  # past MIN_ROWS, once fitted
        self._fitting: Fitting | None = None

    def row_of(self) -> dict[int, int]:
        if self._row is None:
            live = np.flatnonzero(self.scope_of[: self.n] >= 0)
            self._row = dict(zip(self.ids[live].tolist(), live.tolist(), strict=True))
        return self._row

    def put(self, chunk_id: int, scope: str, vector: np.ndarray) -> None:
        rows = self.row_of()
        i = rows.get(chunk_id)
        if i is None:
            if self._free:  # a file's edit frees its old chunks' rows and adds new chunks
                i = self._free.pop()
            else:
                if self.n == len(self.ids):
                    self._grow()
                i = self.n
                self.n += 1
            rows[chunk_id] = i
            self.ids[i] = chunk_id
        self.vectors[i] = vector
        self.scope_of[i] = self.scope_ids.setdefault(scope, len(self.scope_ids))
        if self._projection is not None:
            self._projection.rows[i] = self._projection.project(self.vectors[i : i + 1])[0]
        elif self._fitting is not None:
            self._fitting.touch(i)
        self._masks.clear()

    def remove(self, chunk_id: int) -> None:
        i = self.row_of().pop(chunk_id, None)
        if i is not None:
            self.scope_of[i] = -1
            self._free.append(i)
            self._masks.clear()

    def _grow(self) -> None:
        extra = max(64, len(self.ids) // 8)
        self.ids = np.concatenate([self.ids, np.zeros(extra, dtype=np.int64)])
        self.scope_of = np.concatenate([self.scope_of, np.full(extra, -1, dtype=np.int32)])
        pad = np.zeros((extra, self.vectors.shape[1]), dtype=np.float32)
        self.vectors = np.concatenate([self.vectors, pad])
        if self._projection is not None:
            self._projection.grow(len(self.vectors))

    def visible(self, scopes: list[str]) -> np.ndarray:
        """Which of the first `n` rows a search of `scopes` may return (bool, remembered)."""
        key = tuple(sorted(set(scopes)))
        mask = self._masks.get(key)
        if mask is None or len(mask) != self.n:
            wanted = [self.scope_ids[s] for s in key if s in self.scope_ids]
            mask = np.isin(self.scope_of[: self.n], wanted)
            if len(self._masks) >= 16:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def projection(self) -> Projection | None:
        """The first-pass projection when it is ready; past MIN_ROWS rows, the first call
        starts fitting it in the background (searches stay exact until then)."""
        if self._projection is not None or self.n < projection_module.MIN_ROWS:
            return self._projection
        if self._fitting is None:
            live = np.flatnonzero(self.scope_of[: self.n] >= 0)
            if projection_module.worth_it(len(live), self.vectors.shape[1]):
                self._fitting = Fitting(self.vectors, self.n, live)
        elif self._fitting.done() and not self._fitting.failed:
            self._projection = self._fitting.take(self.vectors, self.n)
            self._fitting = None
        return self._projection

    def fitting(self) -> Fitting | None:
        """The first pass's fit under way, if one is."""
        return self._fitting

    def search(self, query: np.ndarray, k: int, scopes: list[str]) -> list[tuple[int, float]]:
        if not self.n:
            return []
        q = np.asarray(query, dtype=np.float32)
        # Always filter: conversation transcripts carry their own scope, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        visible = self.visible(scopes)
        projection = self.projection()
        if projection is not None:
            count = max(projection_module.CANDIDATES, 10 * k)
            rows = projection.candidates(q, self.n, visible, count)
            return top_k(self.ids[rows], self.vectors[rows] @ q, k)
        sims = self.vectors[: self.n] @ q
        sims[~visible] = -np.inf
        return top_k(self.ids[: self.n], sims, k)


def top_k(ids: np.ndarray, sims: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The `k` best of (ids[i], sims[i]) best first (-inf: not a candidate); rows tied at the
    edge of the top k go in by lower chunk id."""
    k = min(k, len(sims))
    if k <= 0:
        return []
    top = np.argpartition(sims, len(sims) - k)[len(sims) - k :]
    edge = sims[top].min()
    if np.count_nonzero(sims == edge) > np.count_nonzero(sims[top] == edge):
        # Rows tied at the edge of the top k, some left out: the lower chunk ids go in.
        tied = np.flatnonzero(sims == edge)
        tied = tied[np.argsort(ids[tied], kind="stable")]
        above = np.flatnonzero(sims > edge)
        top = np.concatenate([above, tied[: k - len(above)]])
    return best_first([(int(ids[i]), float(sims[i])) for i in top.tolist() if np.isfinite(sims[i])])
