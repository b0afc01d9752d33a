"""The centroid search's first pass over principal components (memory/search/projection.py):
past MIN_ROWS rows a search ranks by the projection and scores the best candidates exactly.
Its answers must be the exact ones on vectors shaped like an embedding model's (a few strong
directions), keep the scope filter, and see rows written before, during and after the fit."""

from __future__ import annotations

import numpy as np
import pytest

from memory.search import projection
from memory.search.centroid_matrix import CentroidMatrix

DIMS = 96  # wider than 2 × the projection below, as real models are


@pytest.fixture(autouse=True)
def small_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projection, "MIN_ROWS", 2000)
    monkeypatch.setattr(projection, "DIMENSIONS", 24)
    monkeypatch.setattr(projection, "CANDIDATES", 200)


def embedding_like(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit vectors along a dozen strong directions plus weak noise in all of them (as
    embeddings are: far from isotropic)."""
    mix = rng.standard_normal((12, DIMS))
    weights = rng.standard_normal((n, 12)) * np.linspace(3, 1, 12)
    vectors = weights @ mix + 0.15 * rng.standard_normal((n, DIMS))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def matrix(vectors: np.ndarray, scopes: list[str] | None = None) -> CentroidMatrix:
    n = len(vectors)
    capacity = n + 64
    names = scopes or [""] * n
    scope_ids: dict[str, int] = {}
    scope_of = np.full(capacity, -1, dtype=np.int32)
    scope_of[:n] = [scope_ids.setdefault(s, len(scope_ids)) for s in names]
    room = np.zeros((capacity, vectors.shape[1]), dtype=np.float32)
    room[:n] = vectors
    ids = np.zeros(capacity, dtype=np.int64)
    ids[:n] = np.arange(1, n + 1)
    return CentroidMatrix((1, "v"), None, n, ids, room, scope_of, scope_ids)


def exact(m: CentroidMatrix, q: np.ndarray, k: int, scope: str = "") -> list[tuple[int, float]]:
    sims = m.vectors[: m.n] @ q
    sims[~m.visible([scope])] = -np.inf
    order = sorted(range(m.n), key=lambda i: (-sims[i], m.ids[i]))[:k]
    return [(int(m.ids[i]), float(sims[i])) for i in order if np.isfinite(sims[i])]


def fitted(m: CentroidMatrix) -> None:
    assert m.projection() is None  # the first call starts the fit; searches stay exact
    assert m._fitting is not None
    m._fitting.wait(30)
    assert m.projection() is not None


def test_the_first_pass_answers_the_exact_top_k_on_embedding_like_vectors() -> None:
    rng = np.random.default_rng(1)
    m = matrix(embedding_like(rng, 5000))
    fitted(m)
    questions = embedding_like(rng, 40)
    same = 0
    for q in questions:
        got = m.search(q, 20, [""])
        want = exact(m, q, 20)
        assert [c for c, _ in got] and all(
            abs(s - float(m.vectors[c - 1] @ q)) < 1e-5 for c, s in got
        )  # every score is the exact cosine
        same += [c for c, _ in got] == [c for c, _ in want]
    assert same >= 38, f"only {same} of 40 questions got the exact top 20"


def test_below_min_rows_no_projection_is_made() -> None:
    rng = np.random.default_rng(2)
    m = matrix(embedding_like(rng, 1500))
    assert m.projection() is None and m._fitting is None
    q = embedding_like(rng, 1)[0]
    assert m.search(q, 10, [""]) == exact(m, q, 10)


def test_the_scope_filter_holds_in_the_first_pass() -> None:
    rng = np.random.default_rng(3)
    vectors = embedding_like(rng, 4000)
    scopes = ["" if i % 4 else "session:other" for i in range(len(vectors))]
    m = matrix(vectors, scopes)
    fitted(m)
    for q in embedding_like(rng, 10):
        got = m.search(q, 30, [""])
        assert all((c - 1) % 4 for c, _ in got)  # never a row of the other scope
        other = m.search(q, 5, ["session:other"])
        assert other and all((c - 1) % 4 == 0 for c, _ in other)


def test_rows_written_before_during_and_after_the_fit_are_found() -> None:
    rng = np.random.default_rng(4)
    m = matrix(embedding_like(rng, 3000))
    assert m.projection() is None
    during = embedding_like(rng, 1)[0]
    m.put(10_001, "", during)  # written while the basis is being fitted
    m.put(5, "", -m.vectors[4])  # an existing row rewritten meanwhile
    assert m._fitting is not None
    m._fitting.wait(30)
    assert m.projection() is not None
    assert m.search(during, 1, [""])[0][0] == 10_001
    assert m.search(m.vectors[4].copy(), 1, [""])[0][0] == 5  # (now the negated one)
    for n in range(100):  # after the fit, past the room: the arrays grow
        m.put(20_000 + n, "", embedding_like(rng, 1)[0])
    later = embedding_like(rng, 1)[0]
    m.put(30_000, "", later)
    assert m.search(later, 1, [""])[0][0] == 30_000
    m.remove(30_000)
    assert all(c != 30_000 for c, _ in m.search(later, 50, [""]))


def test_isotropic_vectors_are_the_worst_case_but_scores_stay_exact() -> None:
    """Random unit vectors have no strong direction: the first pass misses some of the exact
    top k (bench/projection_recall.py measures how many), yet every score it returns is
    exact and in order."""
    rng = np.random.default_rng(5)
    noise = rng.standard_normal((4000, DIMS)).astype(np.float32)
    m = matrix(noise / np.linalg.norm(noise, axis=1, keepdims=True))
    fitted(m)
    q = noise[0] / np.linalg.norm(noise[0])
    got = m.search(q, 10, [""])
    assert got[0][0] == 1  # the row itself: its approximate score is high too
    scores = [s for _, s in got]
    assert scores == sorted(scores, reverse=True)
    assert all(abs(s - float(m.vectors[c - 1] @ q)) < 1e-5 for c, s in got)
