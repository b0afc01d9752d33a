"""Bulk-load a big scale's memory index on PostgreSQL (issue 19: search at 100k and 1M chunks)
without the hours the row-by-row sync takes (≈ 54 chunks/s here: 5 h at 1M).

It writes the SAME rows the sync writes, because the sync makes them: `MemoryIndex.sync()` runs
as usual — the real generation, identity, lease, rebuild hooks, swap and catch-up — except that
the rebuild's per-file writes go through the real `IndexRows.write_file` (chunk rows, keyword
bodies, passages, centroids, vector rows, source rows, exactly as built for the real
repository) into a buffering repository, flushed every few thousand files with COPY in one
transaction each (chunks, keyword rows with their stemmed tokens, `memory_keyword_stats` and
`memory_keyword_df`, passages, sources, the generation's vector table and its log, the
embedding cache with `--cache`). The HNSW index is created once the rows are in (pgvector 0.6
builds it in parallel; `maintenance_work_mem` raised). Ids come from the tables' own sequences.

Vectors: random unit vectors seeded by each passage's hash (the same text gets the same vector
in every run and in both databases of `--check`); the query embedding at search time is the
real local model's, as in bench/speed.py.

    python bench/bulk_scale.py load --chunks 100000 --workspace DIR [--dsn DSN] [--cache]
    python bench/bulk_scale.py replicate --source DIR --times 10 --target DIR   # 1M text
    python bench/bulk_scale.py check --chunks 10000   # bulk vs real sync: same search results
    python bench/bulk_scale.py check --quick          # the same at 1,000 chunks (≈ 1 min)
    python bench/bulk_scale.py serve                  # keep bench/out/speed/postgres running

The schema is bench/speed_pg.py's `pinch_speed_<chunks>`, so `bench/speed.py --worker latency
--spec '{"chunks": N, "dsn": …}'` measures it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import types
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import speed_pg  # noqa: E402
from memory.index.chunking import chunk_markdown, split_units  # noqa: E402
from memory.index.index import MemoryIndex  # noqa: E402
from memory.index.reading import read_memory_file  # noqa: E402
from memory.index.rows import IndexRows  # noqa: E402
from memory.memory_config import EmbeddingConfig, MemoryConfig  # noqa: E402
from memory.store.index_rows import ChunkRow, PassageRow, SourceRow  # noqa: E402
from memory.store.lineage import file_origin  # noqa: E402
from memory.store.postgres.index_rows import cache_key_text  # noqa: E402
from memory.store.postgres.keyword_postings import p001_keyword_postings  # noqa: E402
from memory.store.postgres.keywords import keyword_tokens, stemmed  # noqa: E402
from memory.store.postgres.vectors import CREATE_MATRIX, table_exists  # noqa: E402
from memory.store.vector_codec import compact_blobs  # noqa: E402
from memory.store.vector_names import log_table, matrix_table  # noqa: E402
from memory.store.vector_tables import LOG_KEEP  # noqa: E402

FILES_PER_FLUSH = 2000
_CHUNK_TYPES = ["int8", "int8", "text", "text", "text", "text", "int4", "int4", "text", "text",
                "int4", "text", "text"]  # fmt: skip
# The secondary indexes of the tables a load fills: dropped before, built once after (as
# memory/store/postgres/transfer.py defers them), with the definitions PostgreSQL gives.
_DEFERRED = ("memory_chunks", "memory_keywords", "memory_units")
_SECONDARY = (
    "SELECT i.indexname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
    "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = i.schemaname "
    "JOIN pg_index x ON x.indexrelid = c.oid WHERE i.schemaname = current_schema() "
    "AND i.tablename = ANY(%s) AND NOT x.indisunique AND NOT x.indisprimary"
)
OUT = REPO / "bench" / "out" / "speed"


def config() -> MemoryConfig:
    return MemoryConfig(embedding=EmbeddingConfig(provider="local"))  # as speed.py's PG scale


def unit_vectors(hashes: Sequence[str], dims: int) -> np.ndarray:
    """A random unit vector per passage hash, the same for the same hash in every run."""
    out = np.empty((len(hashes), dims), dtype=np.float32)
    for i, h in enumerate(hashes):
        out[i] = np.random.default_rng(int(h[:16], 16)).standard_normal(dims)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


class Buffer:
    """The rows `IndexRows` writes for a batch of files, as the real repository would get them
    (`IndexRowRepository` on a fresh generation), plus the vector store's rows."""

    def __init__(self, ids: Iterator[int]) -> None:
        self.ids = ids
        self.chunks: list[ChunkRow] = []
        self.chunk_ids: list[int] = []
        self.passages: list[tuple[int, int, PassageRow]] = []
        self.sources: list[SourceRow] = []
        self.vectors: list[tuple[int, int, str, np.ndarray]] = []

    # IndexRowRepository, as IndexRows.write_file / insert_chunk call it on a new generation
    def insert_chunk(self, conn: Any, row: ChunkRow) -> int:
        cid = next(self.ids)
        self.chunks.append(row)
        self.chunk_ids.append(cid)
        return cid

    def insert_passages(
        self, conn: Any, chunk_id: int, generation: int, passages: Sequence[PassageRow]
    ) -> None:
        self.passages += [(chunk_id, generation, p) for p in passages]

    def set_centroid(self, conn: Any, chunk_id: int, vector: bytes) -> None:
        pass  # as PgIndexRows: the centroid is stored once, in the vector table (`add`)

    def chunk_ids_of(self, *_: Any) -> list[int]:
        return []  # a new generation: nothing to replace

    def delete_source(self, conn: Any, generation: int, path: str) -> None:
        pass

    def write_source(self, conn: Any, row: SourceRow) -> None:
        self.sources.append(row)

    # VectorStore.add
    def add(self, conn: Any, rows: list[tuple[int, int, str, np.ndarray]]) -> None:
        self.vectors += rows


class _Repo:
    """The repository face of a `Buffer` (IndexRows calls `chunk_ids(conn, generation, path)`)."""

    def __init__(self, buffer: Buffer) -> None:
        self.b = buffer

    def __getattr__(self, name: str) -> Any:
        if name == "chunk_ids":
            return self.b.chunk_ids_of
        return getattr(self.b, name)


class PgBulkWriter:
    """COPYs a `Buffer` into the agent schema, inside the caller's transaction."""

    def __init__(self, dims: int, cache_key: tuple[str, str] | None) -> None:
        self.dims = dims
        self.cache_key = cache_key
        self.words: dict[str, list[str]] = {}
        self.stems: dict[str, str] = {}
        self.cached: set[str] = set()
        self.deferred: list[str] = []

    def tokens(self, body: str) -> list[str]:
        """`stemmed(keyword_tokens(body))`, word by word (no token spans whitespace), each
        distinct word computed once (as memory/store/postgres/transfer.py does)."""
        out: list[str] = []
        for word in body.split():
            found = self.words.get(word)
            if found is None:
                raw = keyword_tokens(word)
                for t in raw:
                    if t not in self.stems:
                        self.stems[t] = stemmed([t])[0]
                found = self.words[word] = [self.stems[t] for t in raw]
            out += found
        if len(self.words) > 500_000:
            self.words.clear()
        return out

    def flush(self, conn: Any, generation: int, b: Buffer) -> None:
        cur = conn.cursor()
        with cur.copy(
            "COPY memory_chunks (id, generation, path, source, origin, scope, start_line, "
            "end_line, hash, text, importance, day, project) FROM STDIN (FORMAT binary)"
        ) as copy:
            copy.set_types(_CHUNK_TYPES)
            for cid, r in zip(b.chunk_ids, b.chunks, strict=True):
                copy.write_row(
                    (cid, r.generation, r.path, r.source, r.origin, r.scope, r.start_line,
                     r.end_line, r.hash, r.text, r.importance, r.day, r.project)
                )  # fmt: skip
        df: Counter[str] = Counter()
        total = 0
        with cur.copy(
            "COPY memory_keywords (chunk_id, body, tokens) FROM STDIN (FORMAT binary)"
        ) as copy:
            copy.set_types(["int8", "text", "text[]"])
            for cid, r in zip(b.chunk_ids, b.chunks, strict=True):
                tokens = self.tokens(r.keywords)
                total += len(tokens)
                df.update(set(tokens))
                copy.write_row((cid, r.keywords, tokens))
        conn.execute(
            "UPDATE memory_keyword_stats SET rows = rows + %s, tokens = tokens + %s WHERE id = 1",
            (len(b.chunks), total),
        )
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS bulk_df (token text, rows bigint)")
        conn.execute("TRUNCATE bulk_df")
        with cur.copy("COPY bulk_df (token, rows) FROM STDIN") as copy:
            for token, n in sorted(df.items()):
                copy.write_row((token, n))
        conn.execute(
            "INSERT INTO memory_keyword_df AS d (token, rows) SELECT token, rows FROM bulk_df "
            "ORDER BY token ON CONFLICT (token) DO UPDATE SET rows = d.rows + excluded.rows"
        )
        with cur.copy(
            "COPY memory_units (chunk_id, generation, start_line, end_line, hash, vector) "
            "FROM STDIN (FORMAT binary)"
        ) as copy:
            copy.set_types(["int8", "int8", "int4", "int4", "text", "bytea"])
            coded = compact_blobs([p.vector for _, _, p in b.passages])  # as insert_passages
            for (cid, g, p), vector in zip(b.passages, coded, strict=True):
                copy.write_row((cid, g, p.start_line, p.end_line, p.hash, vector))
        now = time.time()
        with cur.copy(
            "COPY memory_sources (generation, path, source, origin, hash, mtime, size, "
            "indexed_at, error, warning) FROM STDIN"
        ) as copy:
            for s in b.sources:
                copy.write_row(
                    (s.generation, s.path, s.source, s.origin, s.hash, s.mtime, s.size, now,
                     None, s.warning)
                )  # fmt: skip
        if b.vectors:
            self._vectors(conn, generation, b.vectors)
        if self.cache_key is not None:
            fresh = {p.hash: p.vector for _, _, p in b.passages if p.hash not in self.cached}
            self.cached.update(fresh)
            provider, model = self.cache_key
            with cur.copy(
                "COPY embedding_cache (provider, model, chunk_hash, dimensions, vector) "
                "FROM STDIN (FORMAT binary)"
            ) as copy:
                copy.set_types(["text", "text", "text", "int4", "bytea"])
                coded = compact_blobs(list(fresh.values()))  # as PgEmbeddingCache.put
                for h, v in zip(fresh, coded, strict=True):
                    copy.write_row((provider, model, cache_key_text(h), self.dims, v))

    def _vectors(self, conn: Any, generation: int, rows: list[Any]) -> None:
        """The generation's vector table (as PgVectorTables.add makes it, its HNSW index left
        for `finish`) and its write log."""
        table, log = sql.Identifier(matrix_table(generation)), sql.Identifier(log_table(generation))
        if not table_exists(conn, matrix_table(generation)):
            conn.execute(sql.SQL(CREATE_MATRIX).format(table, sql.Literal(self.dims)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (seq bigint GENERATED ALWAYS AS IDENTITY "
                "PRIMARY KEY, chunk_id bigint NOT NULL)"
            ).format(log)
        )
        cur = conn.cursor()
        with cur.copy(
            sql.SQL("COPY {} (chunk_id, scope, embedding) FROM STDIN (FORMAT binary)").format(table)
        ) as copy:
            copy.set_types(["int8", "text", "vector"])
            for cid, _, scope, vec in rows:
                copy.write_row((cid, scope, np.asarray(vec, dtype=np.float32)))
        with cur.copy(sql.SQL("COPY {} (chunk_id) FROM STDIN").format(log)) as copy:
            for cid, *_ in rows:
                copy.write_row((cid,))

    def defer_indexes(self, conn: Any) -> None:
        """Drop the filled tables' secondary indexes (GIN on the tokens among them) until
        `finish`: built once over every row, not row by row."""
        self.deferred = [str(r[1]) for r in conn.execute(_SECONDARY, (list(_DEFERRED),))]
        for name, _ in conn.execute(_SECONDARY, (list(_DEFERRED),)).fetchall():
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        # The keyword postings likewise: made once from every keyword row in `finish` (their
        # migration's sorted fill), not by the triggers entry by entry into a growing key.
        conn.execute("DROP TABLE IF EXISTS memory_keyword_postings")
        conn.execute("DROP FUNCTION IF EXISTS memory_keyword_postings_sync() CASCADE")

    def finish(self, conn: Any, generation: int) -> None:
        """The deferred indexes built again; the log kept as PgVectorTables keeps it (the last
        LOG_KEEP writes); the HNSW index built over every row at once."""
        conn.execute("SET LOCAL maintenance_work_mem = '3GB'")
        conn.execute("SET LOCAL max_parallel_maintenance_workers = 2")
        for definition in self.deferred:
            conn.execute(definition)
        p001_keyword_postings(conn)  # the postings, their key and their triggers
        table, log = sql.Identifier(matrix_table(generation)), sql.Identifier(log_table(generation))
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE seq <= (SELECT max(seq) FROM {}) - %s").format(log, log),
            (LOG_KEEP,),
        )
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)")
            .format(sql.Identifier(f"{matrix_table(generation)}_hnsw"), table)
        )  # fmt: skip


def _reserved_ids(db: Any, block: int = 20_000) -> Iterator[int]:
    """Chunk ids from memory_chunks' own identity sequence, reserved a block at a time."""
    while True:
        rows = db.execute(
            "SELECT nextval(pg_get_serial_sequence('memory_chunks', 'id')) "
            "FROM generate_series(1, %s)",
            (block,),
        )
        yield from (int(r[0]) for r in rows)


def bulk_generation(index: MemoryIndex, cache: bool, progress: bool = True) -> Any:
    """A replacement for the index's `SyncPipeline._sync_generation` that writes a rebuild's
    files in bulk (an incremental pass — the catch-up after the swap — runs the real one)."""
    pipeline: Any = index._pipeline
    real = pipeline._sync_generation
    provider = index.provider
    assert provider is not None, index.degraded_reason()
    dims = provider.dimensions
    writer = PgBulkWriter(dims, (provider.provider, provider.model) if cache else None)
    cfg = index.config

    def bulk(self: Any, generation: int, files: list[Any], report: Any, on_progress: Any,
             token: str | None) -> None:  # fmt: skip
        if token is None:
            return real(generation, files, report, on_progress, token)
        ids = _reserved_ids(index.db)
        with index.db.transaction() as conn:
            writer.defer_indexes(conn)
        started, done_chunks = time.perf_counter(), 0
        for at in range(0, len(files), FILES_PER_FLUSH):
            buffer = Buffer(ids)
            rows = IndexRows(_Repo(buffer), lambda _dims, b=buffer: b, lambda *_: dims)  # type: ignore[arg-type]
            batch = []
            for f in files[at : at + FILES_PER_FLUSH]:
                st = os.lstat(f.abs_path)
                text, file_hash, warning = read_memory_file(self.workspace, f, st)
                chunks = chunk_markdown(
                    text, tokens=cfg.chunking.tokens, overlap=cfg.chunking.overlap
                )
                batch.append((f, st, file_hash, chunks, warning, file_origin(text, f.origin)))
            units = {u.hash: None for b in batch for c in b[3] for u in split_units(c)}
            hashes = list(units)
            vectors = dict(zip(hashes, unit_vectors(hashes, dims), strict=True))
            for f, st, file_hash, chunks, warning, origin in batch:
                rows.write_file(None, generation, f, st, file_hash, chunks, vectors, buffer,  # type: ignore[arg-type]
                                warning, origin)  # fmt: skip
                report.files_indexed.append(f.rel_path)
            with index.db.transaction() as conn:
                self.generations.check_writable(conn, generation, token)
                writer.flush(conn, generation, buffer)
                self.generations.bump_version(conn)
            done_chunks += len(buffer.chunks)
            if progress:
                rate = done_chunks / (time.perf_counter() - started)
                print(f"  {at + len(batch)}/{len(files)} files, {done_chunks} chunks, "
                      f"{rate:.0f} chunks/s", flush=True)  # fmt: skip
        report.chunks_from_cache += done_chunks
        t = time.perf_counter()
        with index.db.transaction() as conn:
            self.generations.check_writable(conn, generation, token)
            writer.finish(conn, generation)
        if progress:
            print(f"  HNSW index built in {time.perf_counter() - t:.1f} s", flush=True)
        return None

    return types.MethodType(bulk, pipeline)


def load(chunks: int, workspace: Path, dsn: str, cache: bool, fresh: bool) -> dict[str, Any]:
    """Bulk-load `workspace` into the scale's schema; returns timings and counts."""
    if fresh:
        speed_pg.drop_schema(dsn, chunks)
    index = speed_pg.open_index(workspace, dsn, chunks, config())
    try:
        started = time.perf_counter()
        index._pipeline._sync_generation = bulk_generation(index, cache)
        report = index.sync()
        seconds = time.perf_counter() - started
        status = index.status()
        return {
            "chunks": status.chunks,
            "files": status.files,
            "load_s": seconds,
            "chunks_per_s": status.chunks / seconds if seconds else None,
            "files_indexed": len(report.files_indexed),
            "backend": status.vector_backend,
            **speed_pg.server_memory_mb(dsn),
        }
    finally:
        index.close()


# -- the 1M text: the 100k workspace ×10, names and numbers varied ----------------------------

_NUMBER = re.compile(r"\d+")
_NAME = re.compile(r"\b([A-Z][a-z]{2,})\b")
_SUFFIXES = ("", "ia", "o", "ek", "an", "ine", "us", "el", "ova", "ard")


def varied(text: str, copy: int) -> str:
    """`text` as the `copy`-th replica: every number shifted, every capitalised word given a
    copy-specific ending (other people, other places, other dates' figures); copy 0 unchanged.
    Markdown headings and dates stay parseable (numbers keep their digit count)."""
    if copy == 0:
        return text

    def number(m: re.Match[str]) -> str:
        digits = m.group(0)
        shifted = (int(digits) + 7 * copy) % (10 ** len(digits))
        return str(shifted).zfill(len(digits))

    def name(m: re.Match[str]) -> str:
        return m.group(1) + _SUFFIXES[copy % len(_SUFFIXES)]

    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):  # the day heading: keep it a date
            lines.append(_NAME.sub(name, line))
        else:
            lines.append(_NAME.sub(name, _NUMBER.sub(number, line)))
    return "".join(lines)


def replicate(source: Path, target: Path, times: int) -> int:
    """Write `times` copies of `source`'s memory files under `target`, the i-th copy's files
    beside the original's with `-r<i>` before `.md`; returns the files written."""
    written = 0
    files = sorted(p for p in source.rglob("*.md") if p.is_file())
    for copy in range(times):
        for path in files:
            rel = path.relative_to(source)
            name = rel.name if copy == 0 else rel.name[:-3] + f"-r{copy}.md"
            out = target / rel.parent / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(varied(path.read_text(encoding="utf-8"), copy), encoding="utf-8")
            written += 1
    return written


# -- the check: a bulk-loaded and a synced database give the same results ----------------------


def check(chunks: int, dsn: str, queries: int) -> dict[str, Any]:
    """Build the `chunks` scale's workspace twice into two schemas — the real sync (cache primed
    with the same vectors) and the bulk load — and compare `queries` searches' results."""
    from bench.speed import scale_files
    from bench.synthetic import TextSource

    root = OUT / f"check-{chunks}"
    workspace = root / "workspace"
    cfg = config()
    if not (root / ".done").exists():
        files, _, _ = scale_files(chunks, cfg.chunking.tokens, cfg.chunking.overlap)
        for rel, content in files.items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text(content, encoding="utf-8")
        (root / ".done").write_text("")
    synced_schema, bulk_chunks = f"pinch_check_sync_{chunks}", chunks + 1
    from memory.store.postgres.database import open_postgres

    with_sync = open_postgres(dsn, schema=synced_schema, min_size=1, max_size=4)
    timings: dict[str, Any] = {}
    synced = MemoryIndex(with_sync, workspace, cfg)
    try:
        if synced.status().chunks == 0:
            p = synced.provider
            assert p is not None
            texts = [u.text for f in sorted(workspace.rglob("*.md"))
                     for c in chunk_markdown(f.read_text(encoding="utf-8"),
                                             tokens=cfg.chunking.tokens,
                                             overlap=cfg.chunking.overlap)
                     for u in split_units(c)]  # fmt: skip
            distinct = list(dict.fromkeys(texts))
            from memory.store.content_hash import hash_text

            synced.prime_embedding_cache(
                distinct, unit_vectors([hash_text(t) for t in distinct], p.dimensions)
            )
            t = time.perf_counter()
            synced.sync()
            timings["sync_s"] = time.perf_counter() - t
        timings["bulk"] = load(bulk_chunks, workspace, dsn, cache=True, fresh=True)
        bulk = speed_pg.open_index(workspace, dsn, bulk_chunks, cfg)
        try:
            source = TextSource(99, rich=True)
            asked = [source.question() for _ in range(queries)]
            same = 0
            differing = []
            for q in asked:
                a = [
                    (h.path, h.start_line, h.end_line, round(h.score, 6)) for h in synced.search(q)
                ]
                b = [(h.path, h.start_line, h.end_line, round(h.score, 6)) for h in bulk.search(q)]
                if a == b:
                    same += 1
                else:
                    differing.append(q)
            counts = {}
            for name in ("memory_chunks", "memory_keywords", "memory_units", "memory_sources",
                         "memory_keyword_df", "embedding_cache"):  # fmt: skip
                counts[name] = [
                    int(db.execute(f"SELECT count(*) FROM {name}")[0][0])
                    for db in (with_sync, bulk.db)
                ]
            stats = [db.execute("SELECT rows, tokens FROM memory_keyword_stats")[0]
                     for db in (with_sync, bulk.db)]  # fmt: skip
            dfs = [db.execute("SELECT md5(string_agg(token || ':' || rows, ',' ORDER BY token)) "
                              "FROM memory_keyword_df")[0][0]
                   for db in (with_sync, bulk.db)]  # fmt: skip
        finally:
            bulk.close()
    finally:
        synced.close()
    return {
        **timings,
        "queries": queries,
        "same_results": same,
        "differing": differing,
        "row_counts_sync_bulk": counts,
        "keyword_stats_sync_bulk": [list(s) for s in stats],
        "df_equal": dfs[0] == dfs[1],
    }


def serve(out: Path) -> None:
    """Start the bench's pgserver and keep it until interrupted (prints its DSN)."""
    server, dsn = speed_pg.start_server(out / "postgres")
    print(dsn, flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        del server


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("load")
    a.add_argument("--chunks", type=int, required=True, help="the scale (names the schema)")
    a.add_argument("--workspace", type=Path, required=True)
    a.add_argument("--dsn")
    a.add_argument("--cache", action="store_true", help="also write the embedding cache rows")
    a.add_argument("--fresh", action="store_true", help="drop the scale's schema first")
    r = sub.add_parser("replicate")
    r.add_argument("--source", type=Path, required=True)
    r.add_argument("--target", type=Path, required=True)
    r.add_argument("--times", type=int, default=10)
    c = sub.add_parser("check")
    c.add_argument("--chunks", type=int, default=10_000)
    c.add_argument("--queries", type=int, default=30)
    c.add_argument("--dsn")
    c.add_argument("--quick", action="store_true", help="1,000 chunks, 10 questions (≈ 1 min)")
    sub.add_parser("serve")
    args = p.parse_args(argv)
    if args.cmd == "check" and args.quick:
        args.chunks, args.queries = 1000, 10
    if args.cmd == "serve":
        serve(OUT)
        return 0
    if args.cmd == "replicate":
        print(json.dumps({"files": replicate(args.source, args.target, args.times)}))
        return 0
    server = None
    dsn = args.dsn
    if dsn is None:
        server, dsn = speed_pg.start_server(OUT / "postgres")
    if args.cmd == "load":
        print(json.dumps(load(args.chunks, args.workspace, dsn, args.cache, args.fresh)))
    else:
        print(json.dumps(check(args.chunks, dsn, args.queries), indent=1))
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
