"""The index repositories (memory/store/index_*.py) keep the promises their Protocols state.

Every test talks to the interfaces only; the `backend` fixture yields the implementations on
SQLite and on PostgreSQL (a fresh database on the run's pgserver, tests/pg_support.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memory.store.db import open_database
from memory.store.index_embedcache import (
    EmbeddingCacheRepository,
    ModelKey,
    SqliteEmbeddingCache,
)
from memory.store.index_generations import GenerationRepository, SqliteGenerations
from memory.store.index_rows import (
    ChunkRow,
    IndexRowRepository,
    PassageRow,
    SourceRow,
    SourceState,
    SqliteIndexRows,
)
from memory.store.postgres.index_rows import PgEmbeddingCache, PgGenerations, PgIndexRows
from memory.store.postgres.search import PgSearchQueries
from memory.store.search_queries import SearchQueries, SqliteSearchQueries
from tests.pg_support import PgTestServer

IDENTITY = {"provider": "use", "model": "m", "dimensions": 4, "chunk_tokens": 400}


@dataclass(frozen=True)
class Backend:
    """One implementation of the index repositories and how to open a write transaction."""

    transaction: Callable[[], contextlib.AbstractContextManager[Any]]
    generations: GenerationRepository
    rows: IndexRowRepository
    cache: EmbeddingCacheRepository
    unique_violation: type[Exception]  # what the driver raises when a uniqueness rule is broken
    queries: SearchQueries


@contextlib.contextmanager
def sqlite_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    db = open_database(tmp_path / "agent.sqlite")
    try:
        yield Backend(
            db.transaction,
            SqliteGenerations(db),
            SqliteIndexRows(db),
            SqliteEmbeddingCache(db),
            db.conn.IntegrityError,
            SqliteSearchQueries(db),
        )
    finally:
        db.close()


@contextlib.contextmanager
def postgres_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    server: PgTestServer = request.getfixturevalue("pg_server")
    db = server.open(request.getfixturevalue("pg_dsn"), min_size=0, max_size=4)
    try:
        yield Backend(
            db.transaction,
            PgGenerations(db),
            PgIndexRows(db),
            PgEmbeddingCache(db),
            psycopg.errors.UniqueViolation,
            PgSearchQueries(db),
        )
    finally:
        db.close()


BACKENDS = {"sqlite": sqlite_backend, "postgres": postgres_backend}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with BACKENDS[request.param](request, tmp_path) as opened:
        yield opened


def new_generation(b: Backend, *, active: bool = False) -> int:
    with b.transaction() as conn:
        generation = b.generations.create_building(conn, IDENTITY, 1000.0)
        if active:
            b.generations.activate(conn, generation, 1001.0)
    return generation


def chunk(generation: int, path: str, start: int, text: str = "text") -> ChunkRow:
    return ChunkRow(
        generation,
        path,
        "memory",
        "owner",
        "",
        start,
        start + 1,
        f"h{start}",
        text,
        None,
        None,
        text,
    )


# ---- generations ----------------------------------------------------------------------------


def test_there_is_no_active_generation_before_the_first_build(backend: Backend) -> None:
    assert backend.generations.active() is None


def test_a_new_generation_is_building_with_its_identity_and_dimensions(backend: Backend) -> None:
    generation = new_generation(backend)

    assert backend.generations.identity_of(generation) == IDENTITY
    with backend.transaction() as conn:
        assert backend.generations.state_of(conn, generation) == "building"
        assert backend.generations.dimensions_of(conn, generation) == 4
        assert backend.generations.exists(conn, generation)
    assert backend.generations.active() is None


def test_a_new_generation_id_is_larger_than_every_present_one(backend: Backend) -> None:
    first = new_generation(backend, active=True)
    second = new_generation(backend)

    assert second > first


def test_activating_a_generation_retires_the_active_one(backend: Backend) -> None:
    old = new_generation(backend, active=True)
    new = new_generation(backend)

    with backend.transaction() as conn:
        backend.generations.activate(conn, new, 2000.0)
        assert backend.generations.state_of(conn, old) == "retired"
        assert backend.generations.state_of(conn, new) == "active"
        assert backend.generations.inactive(conn) == [old]
    assert backend.generations.active() == (new, IDENTITY)
    assert backend.generations.inactive() == [old]  # a read of its own, after the commit


def test_leftovers_are_generations_not_active_or_a_lease(backend: Backend) -> None:
    active = new_generation(backend, active=True)
    assert not backend.generations.has_leftovers()

    building = new_generation(backend)
    assert backend.generations.has_leftovers()

    with backend.transaction() as conn:
        backend.generations.delete(conn, building)
        assert not backend.generations.exists(conn, building)
        assert backend.generations.state_of(conn, building) is None
        backend.generations.take_lease(conn, active, "token", 12, "host", 1000.0)
    assert backend.generations.has_leftovers()


def test_the_lease_names_its_holder(backend: Backend) -> None:
    generation = new_generation(backend)

    with backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "token", 12, "host", 1000.0)

    holder = backend.generations.lease_holder()
    assert holder is not None
    assert (holder.generation, holder.token, holder.pid, holder.host) == (
        generation,
        "token",
        12,
        "host",
    )
    assert (holder.started_at, holder.heartbeat_at) == (1000.0, 1000.0)
    assert holder.describe() == "pid 12 on host"


def test_there_is_at_most_one_lease(backend: Backend) -> None:
    generation = new_generation(backend)
    with backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "first", 12, "host", 1000.0)

    with pytest.raises(backend.unique_violation), backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "second", 13, "host", 1000.0)

    holder = backend.generations.lease_holder()
    assert holder is not None and holder.token == "first"


def test_only_the_holder_beats_the_lease(backend: Backend) -> None:
    generation = new_generation(backend)
    with backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "token", 12, "host", 1000.0)
        assert not backend.generations.beat_lease(conn, generation, "other", 1500.0)
        assert not backend.generations.beat_lease(conn, generation + 1, "token", 1500.0)
        assert backend.generations.beat_lease(conn, generation, "token", 2000.0)
        holder = backend.generations.lease_holder(conn)

    assert holder is not None and holder.heartbeat_at == 2000.0


def test_only_the_holder_releases_the_lease_and_anyone_clears_it(backend: Backend) -> None:
    generation = new_generation(backend)
    with backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "token", 12, "host", 1000.0)
        backend.generations.release_lease(conn, "other")
        backend.generations.release_lease(conn, "token", generation + 1)
    assert backend.generations.lease_holder() is not None

    with backend.transaction() as conn:
        backend.generations.release_lease(conn, "token", generation)
    assert backend.generations.lease_holder() is None

    with backend.transaction() as conn:
        backend.generations.take_lease(conn, generation, "token", 12, "host", 1000.0)
        backend.generations.clear_lease(conn)
    assert backend.generations.lease_holder() is None


def test_bumping_the_version_needs_no_previous_value(backend: Backend) -> None:
    with backend.transaction() as conn:
        backend.generations.bump_version(conn)
        backend.generations.bump_version(conn)


# ---- chunk, passage and source rows ---------------------------------------------------------


def test_chunk_ids_grow_and_are_found_by_path_and_first_line(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    with backend.transaction() as conn:
        ids = [
            backend.rows.insert_chunk(conn, chunk(generation, "a.md", line)) for line in (1, 5, 9)
        ]
        other = backend.rows.insert_chunk(conn, chunk(generation, "b.md", 1))

        assert ids == sorted(ids) and other > ids[-1]
        assert sorted(backend.rows.chunk_ids(conn, generation, "a.md")) == ids
        assert sorted(backend.rows.chunk_ids(conn, generation, "a.md", 5)) == ids[1:]
    assert backend.rows.chunk_count(generation) == 4


def test_the_tail_is_the_chunks_at_the_highest_first_line_oldest_first(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    with backend.transaction() as conn:
        backend.rows.insert_chunk(conn, chunk(generation, "sessions/s", 1, "one"))
        backend.rows.insert_chunk(conn, chunk(generation, "sessions/s", 7, "two"))
        backend.rows.insert_chunk(conn, chunk(generation, "sessions/s", 7, "three"))

    tail = backend.rows.tail(generation, "sessions/s")

    assert [(c.start_line, c.text) for c in tail] == [(7, "two"), (7, "three")]
    assert backend.rows.tail(generation, "sessions/none") == []


def test_deleted_chunks_are_gone_with_their_passages(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    vector = b"\x00\x00\x80?" * 4
    with backend.transaction() as conn:
        cid = backend.rows.insert_chunk(conn, chunk(generation, "a.md", 1))
        passages = [PassageRow(1, 1, "p1", vector), PassageRow(2, 2, "p2", None)]
        backend.rows.insert_passages(conn, cid, generation, passages)
        backend.rows.set_centroid(conn, cid, vector)
        backend.rows.delete_keywords(conn, [cid])
        backend.rows.delete_chunks(conn, [cid])

        assert backend.rows.chunk_ids(conn, generation, "a.md") == []
    assert backend.rows.chunk_count(generation) == 0


def test_a_file_has_one_source_row_per_generation(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    row = SourceRow(generation, "a.md", "memory", "owner", "hash", 10.0, 100, None)
    with backend.transaction() as conn:
        backend.rows.write_source(conn, row)
        backend.rows.touch_source(conn, generation, "a.md", 20.0, 200)

    assert backend.rows.sources(generation) == {"a.md": SourceState("hash", 20.0, 200, None)}
    assert backend.rows.indexed_file_count(generation) == 1

    with backend.transaction() as conn:
        backend.rows.delete_source(conn, generation, "a.md")
    assert backend.rows.sources(generation) == {}


def test_a_problem_with_a_known_file_keeps_its_hash(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    with backend.transaction() as conn:
        backend.rows.write_source(
            conn, SourceRow(generation, "a.md", "memory", "owner", "hash", 10.0, 100, None)
        )
        backend.rows.record_problem(conn, generation, ("a.md", "memory", "owner"), 30.0, 5, "bad")
        backend.rows.record_problem(conn, generation, ("b.md", "memory", "owner"), 0.0, 0, "gone")

    assert backend.rows.sources(generation) == {
        "a.md": SourceState("hash", 30.0, 5, "bad"),
        "b.md": SourceState("", 0.0, 0, "gone"),
    }
    assert backend.rows.indexed_file_count(generation) == 0
    assert backend.rows.problems(generation) == {"a.md": "bad", "b.md": "gone"}


def test_problems_show_a_warning_when_there_is_no_error(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    with backend.transaction() as conn:
        backend.rows.write_source(
            conn, SourceRow(generation, "a.md", "memory", "owner", "h", 1.0, 1, "not UTF-8")
        )
        backend.rows.write_source(
            conn, SourceRow(generation, "b.md", "memory", "owner", "h", 1.0, 1, None)
        )

    assert backend.rows.problems(generation) == {"a.md": "not UTF-8"}
    assert backend.rows.indexed_file_count(generation) == 2


def test_dropping_a_generation_leaves_the_others(backend: Backend) -> None:
    kept = new_generation(backend, active=True)
    dropped = new_generation(backend)
    for generation in (kept, dropped):
        with backend.transaction() as conn:
            cid = backend.rows.insert_chunk(conn, chunk(generation, "a.md", 1))
            backend.rows.insert_passages(conn, cid, generation, [PassageRow(1, 1, "p", None)])
            backend.rows.write_source(
                conn, SourceRow(generation, "a.md", "memory", "owner", "h", 1.0, 1, None)
            )

    with backend.transaction() as conn:
        backend.rows.drop_keywords_of(conn, dropped)
        backend.rows.drop_generation(conn, dropped)

    assert backend.rows.chunk_count(dropped) == 0 and backend.rows.sources(dropped) == {}
    assert backend.rows.chunk_count(kept) == 1 and list(backend.rows.sources(kept)) == ["a.md"]


def test_what_the_rows_repository_writes_is_searched_counted_and_versioned(
    backend: Backend,
) -> None:
    generation = new_generation(backend, active=True)
    version = backend.queries.index_version()
    with backend.transaction() as conn:
        first = backend.rows.insert_chunk(conn, chunk(generation, "a.md", 1, "Anna keeps bees"))
        backend.rows.insert_chunk(conn, chunk(generation, "b.md", 1, "the dog barked"))
        backend.generations.bump_version(conn)

    assert backend.queries.chunk_count(generation) == 2
    assert backend.queries.index_version() != version
    assert [i for i, _ in backend.queries.keyword_ranked('"bees"', 10)] == [first]
    with backend.transaction() as conn:
        backend.rows.delete_keywords(conn, [first])
        backend.rows.delete_chunks(conn, [first])
        backend.generations.bump_version(conn)
    assert backend.queries.keyword_ranked('"bees"', 10) == []
    assert backend.queries.chunk_count(generation) == 1


# ---- embedding cache ------------------------------------------------------------------------

KEY = ModelKey("use", "m", 4)


def test_the_cache_returns_only_the_asked_vectors_of_the_same_model(backend: Backend) -> None:
    with backend.transaction() as conn:
        backend.cache.put(conn, KEY, [("a", b"A"), ("b", b"B")])
        backend.cache.put(conn, ModelKey("use", "other", 4), [("c", b"C")])

    assert backend.cache.get(KEY, ["a", "c", "missing"]) == {"a": b"A"}
    assert backend.cache.get(ModelKey("use", "m", 8), ["a"]) == {}
    assert backend.cache.count() == 3


def test_caching_a_hash_again_replaces_its_vector(backend: Backend) -> None:
    with backend.transaction() as conn:
        backend.cache.put(conn, KEY, [("a", b"old")])
    with backend.transaction() as conn:
        backend.cache.put(conn, KEY, [("a", b"new")])

    assert backend.cache.get(KEY, ["a"]) == {"a": b"new"}
    assert backend.cache.count() == 1


def test_the_cache_answers_for_more_hashes_than_one_lookup_takes(backend: Backend) -> None:
    hashes = [f"h{i}" for i in range(1234)]
    with backend.transaction() as conn:
        backend.cache.put(conn, KEY, [(h, h.encode()) for h in hashes])

    assert backend.cache.get(KEY, hashes) == {h: h.encode() for h in hashes}


def test_a_cached_batch_is_lost_with_its_failed_transaction(backend: Backend) -> None:
    with contextlib.suppress(RuntimeError), backend.transaction() as conn:
        backend.cache.put(conn, KEY, [("a", b"A")])
        raise RuntimeError("the rebuild lost its lease")

    assert backend.cache.get(KEY, ["a"]) == {}


def test_postgres_keeps_bm25s_totals_with_the_keyword_rows(pg_database: Any) -> None:
    generations, rows = PgGenerations(pg_database), PgIndexRows(pg_database)
    totals = "SELECT rows, tokens FROM memory_keyword_stats"
    recount = "SELECT count(*), coalesce(sum(cardinality(tokens)), 0) FROM memory_keywords"
    with pg_database.transaction() as conn:
        kept = generations.create_building(conn, IDENTITY, 1.0)
        dropped = generations.create_building(conn, IDENTITY, 1.0)
        ids = [
            rows.insert_chunk(conn, chunk(g, "a.md", n, text))
            for g, n, text in [
                (kept, 1, "Anna keeps bees"),
                (kept, 2, "the dog, the café"),
                (dropped, 1, "蓝 色 的 杯 子"),
            ]
        ]
    assert pg_database.execute(totals) == pg_database.execute(recount) == [(3, 12)]

    with pg_database.transaction() as conn:
        rows.delete_keywords(conn, ids[:1])
        rows.drop_keywords_of(conn, dropped)
    assert pg_database.execute(totals) == pg_database.execute(recount) == [(1, 4)]


def test_project_tagged_chunks_are_listed_by_path_and_line(backend: Backend) -> None:
    generation = new_generation(backend, active=True)
    with backend.transaction() as conn:
        for path, line, project in [
            ("b.md", 1, "apollo"),
            ("a.md", 9, "apollo"),
            ("a.md", 2, None),
        ]:
            row = chunk(generation, path, line, f"{path}:{line}")
            backend.rows.insert_chunk(conn, replace(row, project=project))

    assert backend.rows.tagged_chunks(generation) == [
        ("a.md", 9, "a.md:9", "apollo"),
        ("b.md", 1, "b.md:1", "apollo"),
    ]
