"""A generation's centroids held in memory, and exact cosine search over them."""

from __future__ import annotations

import numpy as np


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

    def search(self, query: np.ndarray, k: int, scopes: list[str]) -> list[tuple[int, float]]:
        if not self.n:
            return []
        sims = self.vectors[: self.n] @ np.asarray(query, dtype=np.float32)
        # Always filter: conversation transcripts carry their own scope, and no search may
        # see another conversation's (not even one asking only for the shared scope '').
        sims[~self.visible(scopes)] = -np.inf
        k = min(k, len(sims))
        top = np.argpartition(sims, len(sims) - k)[len(sims) - k :]
        edge = sims[top].min()
        if np.count_nonzero(sims == edge) > np.count_nonzero(sims[top] == edge):
            # Rows tied at the edge of the top k, some left out: the lower chunk ids go in.
            tied = np.flatnonzero(sims == edge)
            tied = tied[np.argsort(self.ids[tied], kind="stable")]
            above = np.flatnonzero(sims > edge)
            top = np.concatenate([above, tied[: k - len(above)]])
        return best_first(
            [(int(self.ids[i]), float(sims[i])) for i in top.tolist() if np.isfinite(sims[i])]
        )
