"""`pinch migrate`: an agent copied SQLite → PostgreSQL → SQLite with every table, count and
hash identical (vectors compared as float32, the 8-bit codes both backends store decoded; the
codes themselves arrive as the very same bytes),
the same search results, the source untouched, a non-empty target refused, a
table the target cannot take failing the whole copy, and a DSN's password never shown."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.conninfo import make_conninfo

from memory.store.cache_codec import float32_from_cache
from memory.store.passage_pack import spans_of
from memory.store.postgres.keywords import keyword_tokens, stemmed
from memory.store.postgres.transfer import open_postgres_target
from memory.store.transfer import transfer
from memory.store.transfer_sqlite import open_sqlite_source
from memory.store.vector_codec import decode, is_4bit, is_quantised
from memory.store.vector_tables import SqliteVectorTables
from tests.backup_support import pinch
from tests.layout_support import loose_passages, m015_layout
from tests.migrate_support import make_agent, postgres_hashes, search, sqlite_hashes

SCHEMA = "pinch_main"  # the default agent's schema
SECRET = "hunter2-not-shown"
DIMS = 512  # the bundled USE model's vectors
FILLED = [
    "meta",
    "memory_generations",
    "memory_sources",
    "memory_chunks",
    "memory_units",
    "keywords",
    "embedding_cache",
    "sessions",
    "transcript_events",
    "jobs",
    "job_runs",
    "intents",
    "intent_triggers",
    "intent_fires",
    "approved_senders",
    "pairing_requests",
    "inbound_queue",
    "inbound_dedup",
    "outbound_deliveries",
    "session_leases",
    "dream_runs",
    "dream_lease",
    "recall_signals",
    "lineage",
    "lineage_tombstones",
]


def _file_state(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


@pytest.fixture(scope="module")
def agent_home(tmp_path_factory: pytest.TempPathFactory, use_model: None) -> Path:
    """A Pinch home whose default agent has something in every table, made once per module."""
    home = tmp_path_factory.mktemp("migrate") / "pinch-home"
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith("PINCH_")]:
            env.delenv(name)
        env.setenv("PINCH_HOME", str(home))
        make_agent(home)
    return home


@pytest.fixture
def agent(agent_home: Path, pinch_home: Path) -> Path:
    """This test's copy of that home (its own files to change): the agent's database."""
    shutil.copytree(agent_home, pinch_home)
    return pinch_home / "agents" / "main" / "agent.sqlite"


@pytest.fixture
def empty_dsn(pg_dsn: str) -> str:
    """A database without the agent's schema (the test databases come with it migrated), and
    with a password in the DSN (the test server trusts local connections, so it is ignored)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return make_conninfo(pg_dsn, password=SECRET)


def test_round_trip_keeps_every_table_and_every_search_result(
    agent: Path, empty_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _file_state(agent)
    with sqlite_hashes(agent) as original:
        pass
    assert original["keywords"][0] > 0 and original["transcript_events"][0] == 6
    assert any(t.startswith("memory_matrix_g") and n > 0 for t, (n, _) in original.items())
    with sqlite3.connect(agent) as conn:  # a pack: read through the matrix rows, not copied
        assert conn.execute("SELECT count(*) FROM memory_matrix_pack_g1").fetchone()[0] > 0
    assert not [t for t in original if t.startswith("memory_matrix_pack_g")]
    # Something in every table the stores above wrote to.
    assert not [t for t in FILLED if not original[t][0]]

    there = pinch("migrate", "--to", "postgres", empty_dsn)
    assert "every count and hash matches" in there.output
    assert SECRET not in there.output + there.stderr
    assert 'backend = "postgres"' in there.output and "PINCH_STORE__DSN" in there.output
    assert postgres_hashes(empty_dsn, SCHEMA) == original
    assert _file_state(agent) == before  # the source is only read
    codes = _assert_vectors_on_postgres(agent, empty_dsn)

    # Back, with the agent now on PostgreSQL (still refused at start while it is being wired).
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", empty_dsn)
    copy = tmp_path / "back.sqlite"
    back = pinch("migrate", "--to", "sqlite", str(copy))
    assert f"move {copy}" in back.output
    with sqlite_hashes(copy) as returned:
        # A new agent file has every store's tables; the original only those ever used.
        assert set(original) <= set(returned)
        assert {t: h for t, h in returned.items() if h[0] or t in original} == original
    workspace = agent.parents[2] / "workspace"
    assert search(copy, workspace) == search(agent, workspace) != []
    _assert_hashes_as_each_side_keeps_them(agent, copy, empty_dsn)
    # The copy holds each passage's vector in its own row (no cache row named), SQLite's 8-bit
    # codes back as the very same bytes; search finds exactly the same.
    with sqlite3.connect(copy) as conn:
        units = conn.execute("SELECT id, vector, cache_row FROM memory_units").fetchall()
        assert units and all(ref is None for _, _, ref in units)
        assert {i: bytes(v) for i, v, _ in units} == codes
        cached = conn.execute("SELECT vector FROM embedding_cache").fetchall()
        with sqlite3.connect(agent) as original_conn:
            first = original_conn.execute("SELECT vector FROM embedding_cache").fetchall()
        assert sorted(bytes(v) for (v,) in cached) == sorted(bytes(v) for (v,) in first)
        # each centroid kept once: in the pack the copy wrote of its rows (none came with it)
        packed = conn.execute("SELECT sum(rows) FROM memory_matrix_pack_g1").fetchone()[0]
        assert packed == conn.execute("SELECT count(*) FROM memory_matrix_g1").fetchone()[0] > 0
        assert not conn.execute(
            "SELECT 1 FROM memory_matrix_g1 WHERE vector IS NOT NULL"
        ).fetchall()


def _assert_hashes_as_each_side_keeps_them(agent: Path, copy: Path, dsn: str) -> None:
    """The chunks' and files' hashes: the digest's 32 bytes in both SQLite files (m018), the
    same digests as hex text on PostgreSQL."""
    for query in (
        "SELECT id, hash FROM memory_chunks",
        "SELECT generation || ':' || path, hash FROM memory_sources",
    ):
        with sqlite3.connect(agent) as conn:
            first = dict(conn.execute(query).fetchall())
        with sqlite3.connect(copy) as conn:
            back = dict(conn.execute(query).fetchall())
        with psycopg.connect(dsn) as pg:
            pg.execute(f"SET search_path TO {SCHEMA}")
            there = dict(pg.execute(query).fetchall())
        assert first and all(isinstance(h, bytes) and len(h) == 32 for h in first.values())
        assert back == first
        assert there == {k: h.hex() for k, h in first.items()}


def _assert_vectors_on_postgres(agent: Path, dsn: str) -> dict[int, bytes]:
    """SQLite's 8-bit vectors (the passages' kept once, in the embedding cache) arrive on
    PostgreSQL as the very same codes, each passage with its own (a 4-bit one as the float32
    it decodes to); the matrix rows and pgvector column as float32. Returns the passages'."""
    with sqlite3.connect(agent) as conn:
        assert not conn.execute("SELECT 1 FROM memory_units").fetchall()  # all packed
        named = {
            first + i: int(ref)
            for first, blob in conn.execute("SELECT first_unit, spans FROM memory_passages")
            for i, ref in enumerate(spans_of(blob)[:, 2].tolist())
        }
        cached = conn.execute(
            "SELECT c.id, c.vector, m.provider, m.model, m.dimensions FROM embedding_cache c "
            "JOIN embedding_models m ON m.id = c.model_id"
        ).fetchall()
        cache = {c: b for c, b, *_ in cached}
        # the cache's 4-bit codes decode around their model's center
        by_id = {c: float32_from_cache(conn, tuple(m), [b])[0] for c, b, *m in cached}
        floats = {unit: by_id[ref] for unit, ref in named.items()}
        matrix = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'memory_matrix_g%'"
        )]  # fmt: skip
        # each row's vector, or the pack's when the row's is NULL (packed: stored once)
        generation = int(matrix[0].removeprefix("memory_matrix_g"))
        rows = {
            cid: blob
            for batch in SqliteVectorTables().rows(conn, generation, 1000)
            for cid, _, blob in batch
        }
        assert len(rows) == conn.execute(f"SELECT count(*) FROM {matrix[0]}").fetchone()[0]
        pack_table = matrix[0].replace("matrix_g", "matrix_pack_g")
        pack = conn.execute(f"SELECT rows, dimensions, vectors FROM {pack_table}").fetchall()
        assert pack and all(len(v) == n * d + 4 * n for n, d, v in pack)  # codes, then scales
    # (4-bit, or 8-bit while the model has no center: too few vectors cached yet)
    assert all(is_4bit(b) or is_quantised(b) for b in cache.values())
    assert all(is_quantised(b) for b in rows.values())
    with psycopg.connect(dsn) as pg:
        register_vector(pg)
        pg.execute(f"SET search_path TO {SCHEMA}")
        there = dict(pg.execute("SELECT id, vector FROM memory_units").fetchall())
        codes = {u: cache[r] if is_quantised(cache[r]) else floats[u] for u, r in named.items()}
        assert {c: bytes(v) for c, v in there.items()} == codes
        assert all(is_quantised(v) for v in codes.values())  # (8-bit: the cache's default)
        pg_cached = pg.execute("SELECT vector FROM embedding_cache").fetchall()
        assert sorted(bytes(v) for (v,) in pg_cached) == sorted(cache.values())
        # Each centroid once, as pgvector's float32 column: no bytea copy, no pack.
        columns = pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (SCHEMA, matrix[0]),
        ).fetchall()
        assert [c for (c,) in columns] == ["chunk_id", "scope", "embedding"]
        pg_rows = pg.execute(f"SELECT chunk_id, embedding FROM {matrix[0]}", binary=True)
        found = pg_rows.fetchall()
        assert len(found) == len(rows)
        for chunk_id, embedding in found:
            expected = decode(rows[chunk_id])
            assert np.array_equal(np.asarray(embedding.to_numpy(), np.float32), expected)
        assert not pg.execute("SELECT to_regclass(%s)", (pack_table,)).fetchone()[0]
    return codes


def test_keyword_rows_on_postgres_are_stemmed_as_the_index_writes_them(
    agent: Path, empty_dsn: str
) -> None:
    pinch("migrate", "--to", "postgres", empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        rows = conn.execute("SELECT body, tokens FROM memory_keywords").fetchall()
        stats = conn.execute("SELECT rows, tokens FROM memory_keyword_stats").fetchone()
        assert rows and stats == (len(rows), sum(len(t) for _, t in rows))
        for body, tokens in rows:
            assert tokens == stemmed(keyword_tokens(body))  # as the index writes them
        # HNSW in step with the copied vectors, as the vector store's catch_up leaves it.
        seqs = conn.execute("SELECT key FROM meta WHERE key LIKE 'vec0_seq_g%'").fetchall()
        assert seqs


def test_a_non_empty_target_is_refused_and_left_as_it_was(agent: Path, empty_dsn: str) -> None:
    pinch("migrate", "--to", "postgres", empty_dsn)
    before = postgres_hashes(empty_dsn, SCHEMA)
    again = pinch("migrate", "--to", "postgres", empty_dsn, ok=False)
    assert again.exit_code == 1
    assert "already holds data" in again.output and "empty" in again.output
    assert SECRET not in again.output
    assert postgres_hashes(empty_dsn, SCHEMA) == before


def test_an_existing_sqlite_file_with_rows_is_refused(agent: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken.sqlite"
    taken.write_bytes(agent.read_bytes())
    result = pinch("migrate", "--to", "sqlite", str(taken), ok=False)
    assert result.exit_code == 1 and "already holds data" in result.output
    assert taken.read_bytes() == agent.read_bytes()


def test_a_table_the_target_cannot_take_fails_the_copy_and_commits_nothing(
    agent: Path, empty_dsn: str
) -> None:
    with sqlite3.connect(agent) as conn:
        conn.execute("CREATE TABLE future_feature (id INTEGER PRIMARY KEY, note TEXT)")
        conn.execute("INSERT INTO future_feature VALUES (1, 'kept by a newer Pinch')")
    result = pinch("migrate", "--to", "postgres", empty_dsn, ok=False)
    assert result.exit_code == 1
    assert "future_feature" in result.output and "NOT COPIED" in result.output
    assert "nothing was committed" in result.output
    assert set(postgres_hashes(empty_dsn, SCHEMA).values()) == {(0, "0" * 64)}  # still empty
    with sqlite3.connect(agent) as conn:
        conn.execute("DROP TABLE future_feature")
    pinch("migrate", "--to", "postgres", empty_dsn)  # safe to run again into the same target


def test_a_copy_interrupted_midway_leaves_the_target_empty(agent: Path, empty_dsn: str) -> None:
    with open_sqlite_source(agent) as source, open_postgres_target(empty_dsn, SCHEMA) as target:
        real = target.write

        def write(table: str, columns: object, rows: list[tuple[object, ...]]) -> None:
            if table == "transcript_events" and rows:
                raise OSError("disk full")
            real(table, columns, rows)  # type: ignore[arg-type]

        target.write = write  # type: ignore[method-assign]
        with pytest.raises(OSError):
            transfer(source, target)
    assert set(postgres_hashes(empty_dsn, SCHEMA).values()) == {(0, "0" * 64)}


def test_the_dsn_may_come_from_the_environment(
    agent: Path, empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__DSN", empty_dsn)
    result = pinch("migrate", "--to", "postgres")
    assert "every count and hash matches" in result.output and SECRET not in result.output


def test_an_unreachable_server_is_one_line_without_the_password(agent: Path) -> None:
    dsn = f"postgresql://pinch:{SECRET}@127.0.0.1:1/pinch"
    result = pinch("migrate", "--to", "postgres", dsn, ok=False)
    assert result.exit_code == 1 and "Cannot use the PostgreSQL store" in result.output
    assert SECRET not in result.output and "[redacted]" in result.output


def test_an_agent_without_a_database_has_nothing_to_migrate(pinch_home: Path) -> None:
    result = pinch("migrate", "--to", "sqlite", str(pinch_home / "copy.sqlite"), ok=False)
    assert result.exit_code == 1 and "nothing to migrate" in result.output
    assert not (pinch_home / "copy.sqlite").exists()


def test_an_empty_table_the_target_lacks_is_noted_not_fatal(agent: Path, tmp_path: Path) -> None:
    with sqlite3.connect(agent) as conn:
        conn.execute("CREATE TABLE never_used (id INTEGER PRIMARY KEY)")
    result = pinch("migrate", "--to", "sqlite", str(tmp_path / "copy.sqlite"))
    assert "never_used: empty, and no such table" in result.output


def test_indexes_built_after_a_big_tables_rows_are_the_schemas_own(
    agent: Path, empty_dsn: str, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory.store.postgres.transfer as pg_transfer

    monkeypatch.setattr(pg_transfer, "BULK_ROWS", 1)  # every table counts as big
    pinch("migrate", "--to", "postgres", empty_dsn)
    fresh = f"{SCHEMA}_fresh"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        from memory.store.postgres.migrations import apply_all

        apply_all(conn, fresh)

        def indexes(schema: str) -> set[str]:
            rows = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname NOT LIKE "
                "'memory_matrix_%%'",
                (schema,),
            ).fetchall()
            return {str(r[0]).replace(f"{schema}.", "") for r in rows}

        assert indexes(SCHEMA) == indexes(fresh)


def test_ids_handed_out_after_the_copy_are_never_ones_already_used(
    agent: Path, empty_dsn: str
) -> None:
    with sqlite3.connect(agent) as conn:  # a deleted queue row: its id must stay used
        conn.execute("DELETE FROM inbound_queue")
        (last,) = conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'inbound_queue'"
        ).fetchone()
    pinch("migrate", "--to", "postgres", empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        for table, column in (
            ("inbound_queue", "id"),
            ("memory_chunks", "id"),
            ("sessions", "created_order"),
        ):
            row = conn.execute(
                f"SELECT nextval(pg_get_serial_sequence('{table}', '{column}')), "
                f"(SELECT coalesce(max({column}), 0) FROM {table})"
            ).fetchone()
            assert row is not None and row[0] > row[1]
        queued = conn.execute(
            "SELECT nextval(pg_get_serial_sequence('inbound_queue', 'id'))"
        ).fetchone()
        assert queued is not None and queued[0] > last


def test_a_row_postgresql_refuses_is_one_line_and_commits_nothing(
    agent: Path, empty_dsn: str
) -> None:
    with sqlite3.connect(agent) as conn:  # PostgreSQL's text cannot hold a NUL character
        conn.execute("UPDATE transcript_events SET content = '{\"text\": \"a' || char(0) || 'b\"}'")
    result = pinch("migrate", "--to", "postgres", empty_dsn, ok=False)
    assert result.exit_code == 1 and "failed during the copy" in result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    assert set(postgres_hashes(empty_dsn, SCHEMA).values()) == {(0, "0" * 64)}


def test_agent_names_whose_database_is_copied_and_where_it_goes(
    agent: Path, empty_dsn: str, pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")  # keyword-only: quick
    pinch("agents", "add", "bob")
    note = pinch_home / "agents" / "bob" / "workspace" / "memory" / "2026-11-30.md"
    note.write_text("Bob's bicycle is green.\n", encoding="utf-8")
    pinch("memory", "index", "--agent", "bob")

    result = pinch("migrate", "--agent", "bob", "--to", "postgres", empty_dsn)

    assert "agents/bob/config.toml" in result.output
    assert "PINCH_AGENTS__BOB__STORE__DSN" in result.output
    with psycopg.connect(empty_dsn) as conn:
        schemas = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}
        assert "pinch_bob" in schemas and SCHEMA not in schemas  # main's was dropped: not made
        texts = " ".join(r[0] for r in conn.execute("SELECT text FROM pinch_bob.memory_chunks"))
        assert "Bob's bicycle is green." in texts and "green kettle" not in texts  # not main's


def test_a_gateway_serving_the_agent_is_named_before_the_copy(agent: Path, tmp_path: Path) -> None:
    import fcntl

    lock = agent.parent / "gateway.lock"
    with lock.open("w") as held:
        held.write(str(os.getpid()))
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = pinch("migrate", "--to", "sqlite", str(tmp_path / "copy.sqlite"))
    assert f"A gateway (pid {os.getpid()}) is serving agent 'main'" in result.stderr
    assert "every count and hash matches" in result.output


def test_a_passages_vector_hashes_the_same_however_sqlite_keeps_it(agent: Path) -> None:
    """The logical memory_units row carries the float32 vector whether it is packed with its
    chunk's (memory/store/passage_pack.py), or a row of its own that names its cache row, names
    one a VACUUM renumbered (found by hash, as search finds it), or keeps an older
    index's float32 copy itself: the same rows and hashes, so the copy compares like with like."""
    with sqlite_hashes(agent) as before:
        pass
    with sqlite3.connect(agent) as conn:
        loose_passages(conn)  # (as an index from before m014 kept them: a row per passage)
        units = conn.execute(
            "SELECT u.id, c.vector, m.provider, m.model, m.dimensions FROM memory_units u "
            "JOIN embedding_cache c ON c.id = u.cache_row "
            "JOIN embedding_models m ON m.id = c.model_id ORDER BY u.id"
        ).fetchall()
        assert len(units) >= 2
        first, blob, *model = units[0]
        conn.execute(
            "UPDATE memory_units SET vector = ?, cache_row = NULL WHERE id = ?",
            (float32_from_cache(conn, tuple(model), [blob])[0], first),
        )
        conn.execute("UPDATE memory_units SET cache_row = cache_row + 100000 WHERE vector IS NULL")
    with sqlite_hashes(agent) as after:
        pass
    assert after == before


def test_a_sqlite_copy_of_packed_passages_verifies_and_searches_the_same(
    agent: Path, tmp_path: Path
) -> None:
    """SQLite to SQLite: the packed passages travel as memory_units rows (ids, hashes, float32
    vectors), the cache's rows with their model by name; every count and hash matches."""
    copy = tmp_path / "copy.sqlite"
    done = pinch("migrate", "--to", "sqlite", str(copy))
    assert "every count and hash matches" in done.output
    with sqlite_hashes(agent) as original, sqlite_hashes(copy) as returned:
        assert returned["memory_units"] == original["memory_units"]
        assert returned["embedding_cache"] == original["embedding_cache"]
    workspace = agent.parents[2] / "workspace"
    assert search(copy, workspace) == search(agent, workspace) != []


def test_an_agent_file_in_the_m015_layout_migrates_as_it_is_and_comes_back_compact(
    agent: Path, empty_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pinch migrate` refuses an m015 file (the cache's long rows, plain passage blobs, hex
    chunk and file hashes), changing nothing, and says how to upgrade it; upgraded, it gives the
    same logical rows, and a SQLite file written from PostgreSQL keeps the compact forms."""
    with sqlite_hashes(agent) as current:
        pass
    with sqlite3.connect(agent) as conn:
        m015_layout(conn)
        assert all(len(b) % 12 == 0 for (b,) in conn.execute("SELECT spans FROM memory_passages"))

    refused = pinch("migrate", "--to", "postgres", empty_dsn, ok=False)
    assert refused.exit_code != 0 and "pinch memory status" in refused.output
    pinch("memory", "status")  # opening it upgrades it (m016-m018)
    with sqlite3.connect(agent) as conn:
        assert not any(
            len(b) % 12 == 0 for (b,) in conn.execute("SELECT spans FROM memory_passages")
        )
    there = pinch("migrate", "--to", "postgres", empty_dsn)
    assert "every count and hash matches" in there.output
    assert postgres_hashes(empty_dsn, SCHEMA) == current

    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", empty_dsn)
    copy = tmp_path / "back.sqlite"
    pinch("migrate", "--to", "sqlite", str(copy))
    with sqlite_hashes(copy) as returned:
        assert {t: h for t, h in returned.items() if t in current} == current
    with sqlite3.connect(copy) as conn:
        for table in ("memory_chunks", "memory_sources"):
            stored = conn.execute(f"SELECT hash FROM {table}").fetchall()
            assert stored and all(isinstance(h, bytes) and len(h) == 32 for (h,) in stored)
