"""The passages' and the embedding cache's vectors on PostgreSQL, from float32 to 8-bit codes:
what `pinch memory status` counts as reclaimable and `pinch memory compact` converts.

This version writes both as 8-bit codes (index_rows.py; memory/store/vector_codec.py), 390
bytes instead of 1,536 at 384 dimensions; a schema an older version filled holds float32 rows,
which every read takes as they are, so nothing has to be converted to search. Converting is a
pass over each table by its key, `BATCH_ROWS` float32 rows a transaction (the rows locked only
while their batch is rewritten: searches and the indexer go on), with a plain VACUUM after the
first batch, every `VACUUM_ROWS` converted rows and at the end, so the space the old rows held
is reused by the next batches instead of the table growing. A PostgreSQL table keeps the pages
it has (VACUUM gives back only empty ones at its end): the freed space serves new rows, and
`VACUUM FULL` (which locks the tables while it rewrites them) returns it to the system.

    slack = vector_slack(db)         # VectorSlack(rows=…, saving=…): about, from a sample
    done = compact_vectors(db)       # VectorsCompacted(units=…, cache=…, saving=…)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from memory.store.postgres.database import PgDatabase
from memory.store.vector_codec import compact_blobs

BATCH_ROWS = 5000  # float32 rows converted per transaction (≈ 7.5 MB at 384 dimensions)
VACUUM_ROWS = 50_000  # converted rows between two VACUUMs of the table
SAMPLE_ROWS = 50_000  # rows `vector_slack` reads at most per table (a sample beyond that)

# Each table's key (in index order) with its types: the pass walks it.
_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "memory_units": (("id", "bigint"),),
    "embedding_cache": (("provider", "text"), ("model", "text"), ("chunk_hash", "text")),
}
# A float32 vector whose width takes 8-bit codes (a multiple of 4 dimensions: 16 bytes); a
# coded one is 2 bytes longer than a multiple of 4, so the two never meet.
_FLOAT32 = sql.SQL("mod(length(vector), 16) = 0 AND length(vector) > 0")
# What coding a float32 vector of `length(vector)` bytes saves: 4 d - (d + 6).
_SAVING = sql.SQL("3 * length(vector) / 4 - 6")


@dataclass(frozen=True)
class VectorSlack:
    """The float32 vectors still in the passages and the cache, and what coding them saves."""

    rows: int
    saving: int  # bytes of vector data


@dataclass(frozen=True)
class VectorsCompacted:
    units: int  # passage vectors converted
    cache: int  # cached vectors converted
    saving: int  # bytes of vector data the codes saved


def vector_slack(db: PgDatabase) -> VectorSlack:
    """How many passage and cached vectors are float32, and the bytes coding them saves:
    counted over the whole table up to `SAMPLE_ROWS` rows, estimated from a sample of pages
    (TABLESAMPLE SYSTEM) beyond that, so a big schema's status stays quick."""
    rows = saving = 0
    for table in _KEYS:
        estimate = db.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (table,)
        )
        total = float(estimate[0][0]) if estimate and estimate[0][0] is not None else -1.0
        share = 100.0 if total <= SAMPLE_ROWS else 100.0 * SAMPLE_ROWS / total
        sample = sql.SQL("TABLESAMPLE SYSTEM ({})").format(sql.Literal(share))
        found = db.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE {f}), coalesce(sum({s}) FILTER (WHERE {f}), 0), "
                "count(*) FROM {t} {sample}"
            )
            .format(f=_FLOAT32, s=_SAVING, t=sql.Identifier(table), sample=sample)
            .as_string()
        )
        wide, bytes_, seen = (int(v) for v in found[0])
        scale = 1.0 if share >= 100.0 or not seen else max(total, seen) / seen
        rows += round(wide * scale)
        saving += round(bytes_ * scale)
    return VectorSlack(rows, saving)


def compact_vectors(
    db: PgDatabase, *, progress: Callable[[str, int], None] | None = None
) -> VectorsCompacted:
    """Code every float32 passage and cached vector, `BATCH_ROWS` a transaction (a commit
    each: stopped midway, what was converted stays converted and the rest reads as before),
    VACUUMing as it goes; `progress(table, rows converted so far)` after each batch."""
    counts: dict[str, int] = {}
    saving = 0
    for table in _KEYS:
        done = since_vacuum = 0
        after: tuple[Any, ...] | None = None
        while True:
            converted, gained, after = _convert_batch(db, table, after)
            if after is None:
                break
            done += converted
            saving += gained
            since_vacuum += converted
            if progress is not None:
                progress(table, done)
            # (after the first batch too: until a VACUUM there is no free space, and the
            # batches' new rows would go to the table's end)
            if since_vacuum >= VACUUM_ROWS or done == converted:
                _vacuum(db, table)
                since_vacuum = 0
        if done:
            _vacuum(db, table)
        counts[table] = done
    return VectorsCompacted(counts["memory_units"], counts["embedding_cache"], saving)


def _convert_batch(
    db: PgDatabase, table: str, after: tuple[Any, ...] | None
) -> tuple[int, int, tuple[Any, ...] | None]:
    """Code the next `BATCH_ROWS` float32 vectors of `table` after key `after`, in one
    transaction: (how many, bytes saved, the last key — None when none were left)."""
    keys = _KEYS[table]
    names = sql.SQL(", ").join(sql.Identifier(k) for k, _ in keys)
    where: sql.Composable = _FLOAT32
    params: list[Any] = []
    if after is not None:
        marks = sql.SQL(", ").join(sql.Placeholder() for _ in keys)
        where = sql.SQL("({}) > ({}) AND {}").format(names, marks, _FLOAT32)
        params = list(after)
    with db.transaction() as conn:
        found = conn.execute(
            sql.SQL("SELECT {k}, vector FROM {t} WHERE {w} ORDER BY {k} LIMIT {n} FOR UPDATE")
            .format(k=names, t=sql.Identifier(table), w=where, n=sql.Literal(BATCH_ROWS))
            .as_string(conn),
            params,
        ).fetchall()
        if not found:
            return 0, 0, None
        width = len(keys)
        coded = compact_blobs([bytes(r[width]) for r in found])
        columns = [[r[i] for r in found] for i in range(width)]
        # (one statement for the batch: the keys and the codes as arrays, matched by key)
        given = sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(sql.Placeholder(), sql.SQL(kind)) for _, kind in keys
        )
        matched = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = v.{k}").format(k=sql.Identifier(k)) for k, _ in keys
        )
        conn.execute(
            sql.SQL(
                "UPDATE {t} AS t SET vector = v.vector FROM unnest({given}, %s::bytea[]) "
                "AS v({k}, vector) WHERE {matched}"
            )
            .format(t=sql.Identifier(table), given=given, k=names, matched=matched)
            .as_string(conn),
            [*columns, coded],
        )
    gained = sum(len(bytes(r[width])) - len(c or b"") for r, c in zip(found, coded, strict=True))
    return len(found), gained, tuple(found[-1][:width])


def _vacuum(db: PgDatabase, table: str) -> None:
    """A plain VACUUM (no lock that stops readers or writers): the old rows' space is free
    for the next batches, and empty pages at the table's end go back to the system."""
    db.execute(sql.SQL("VACUUM {}").format(sql.Identifier(table)).as_string())
