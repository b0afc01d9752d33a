"""Copying one agent's database to another backend (`pinch migrate`): every table, row for row,
verified by counts and content hashes, the source only read.

    with open_sqlite_source(path) as source, open_postgres_target(dsn, schema) as target:
        report = transfer(source, target, progress=print_progress)   # TransferFailed if not

Both backends hold the same tables (memory/store/postgres/migrations.py mirrors SQLite's
migration sets); where they store a table differently, each side maps it to one *logical*
table the other understands:

- the keyword rows: SQLite's FTS5 `memory_fts` (rowid = chunk id) ↔ PostgreSQL's
  `memory_keywords` (`chunk_id`, `body`; its stemmed `tokens` are derived from the body);
- the trigger prefilter: FTS5 `intent_triggers` (rowid = intent id × 16 + entry, terms space
  separated) ↔ `intent_triggers (intent_id, entry, terms text[])`;
- SQLite's rowid order of `sessions` and `intent_fires` ↔ PostgreSQL's `created_order` /
  `fire_order`;
- the jobs' instants: ISO UTC text ↔ `timestamptz`; `owner_private`: 0/1 ↔ boolean;
- vectors: SQLite stores them as 8-bit codes and a scale (memory/store/vector_codec.py; a
  passage's only once, in the embedding cache row its packed chunk row or its
  `memory_units.cache_row` names: memory/store/passage_pack.py), PostgreSQL as
  float32; the logical rows carry float32 (SQLite's decoded: exact and deterministic), each
  passage its own vector and no `cache_row` — in `memory_units`, `embedding_cache` and each
  generation's `memory_matrix_g<N>` (transfer_sqlite.py). Vectors are reused, nothing
  re-embedded; PostgreSQL keeps a centroid once, in its pgvector column under HNSW, filled from
  the float32 blob and read back as the same float32 numbers; float32 rows copied to SQLite are
  stored and searched as they are. SQLite's packed copy of a generation's centroids
  (`memory_matrix_pack_g<N>`) is not a logical table: the matrix rows carry every centroid
  (a row's own or the pack's), PostgreSQL keeps no pack, and a SQLite target packs its own.

Derived data is not copied but rebuilt from what is: SQLite's FTS5 and sqlite-vec internals
(the vec0 KNN tables catch up from the vectors on first search), PostgreSQL's bm25 statistics.
A table of the source that the target cannot take is reported and the copy is NOT committed.

Hashes: per table, the sum (mod 2^256) of the sha256 of each row's canonical form (bytes as
hex, instants as ISO UTC, booleans as 0/1), so the order rows come in does not matter and equal
data gives equal hashes on both backends. Vectors are hashed in their float32 logical form
(above), not as SQLite's 8-bit bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from memory.errors import DatabaseError

BATCH_ROWS = 2000  # rows read and written at a time

# Tables copied first, in this order (parents before the rows that reference them); any other
# table follows by name, and each generation's vector tables come last.
ORDER = (
    "meta",
    "memory_generations",
    "memory_sources",
    "memory_chunks",
    "memory_units",
    "keywords",
    "embedding_cache",
    "memory_rebuild_lease",
    "sessions",
    "transcript_events",
    "jobs",
    "job_runs",
    "intents",
    "intent_triggers",
    "intent_fires",
)
# Logical columns each backend keeps in its own way (see the module docstring).
ROW_ORDER = {"sessions": "created_order", "intent_fires": "fire_order"}
INSTANTS = {
    "jobs": ("anchor_utc", "next_run_utc", "backoff_until", "created_at"),
    "job_runs": ("scheduled_for", "started", "finished"),
}
BOOLEANS = {"jobs": ("owner_private",)}
MATRIX = re.compile(r"memory_matrix_g(\d+)")
MATRIX_LOG = re.compile(r"memory_matrix_log_g(\d+)")
MATRIX_PACK = re.compile(r"memory_matrix_pack_g(\d+)")
PACK_DERIVED = "the packed copy of the centroids: the matrix rows carry each one"
# `meta` rows that say how far sqlite-vec's KNN table caught up: derived, rebuilt on the target.
DERIVED_META = "vec0_seq_g%"

Rows = list[tuple[Any, ...]]
Progress = Callable[[str, int, int], None]  # (table, rows copied, rows in all)


def generation_of(table: str) -> int | None:
    """The generation a per-generation vector table belongs to (None: not one of them)."""
    for pattern in (MATRIX, MATRIX_LOG, MATRIX_PACK):
        m = pattern.fullmatch(table)
        if m:
            return int(m.group(1))
    return None


def instant(text: str | None) -> datetime | None:
    """A stored ISO instant as an aware UTC datetime (None stays None)."""
    return None if text is None else datetime.fromisoformat(text).astimezone(UTC)


def utc_text(value: datetime) -> str:
    """An instant as the SQLite job store writes it (ISO UTC, microseconds)."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


class RowsHash:
    """An order-independent hash of rows: the sum of each row's sha256 (mod 2^256)."""

    def __init__(self) -> None:
        self.total = 0
        self.rows = 0

    def add(self, rows: Rows) -> None:
        for row in rows:
            text = json.dumps([_canonical(v) for v in row], ensure_ascii=False)
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            self.total = (self.total + int.from_bytes(digest, "big")) % (1 << 256)
        self.rows += len(rows)

    def hexdigest(self) -> str:
        return f"{self.total:064x}"


@dataclass(frozen=True)
class Inventory:
    """What a database holds: each logical table's columns, and what is skipped and why."""

    tables: dict[str, tuple[str, ...]]  # logical name -> columns, as the other side names them
    derived: dict[str, str]  # physical table -> why it is not copied (rebuilt, bookkeeping)


class TransferSource(Protocol):
    """A database read inside one read-only snapshot."""

    label: str  # what messages show (a DSN without its password)

    def inventory(self) -> Inventory: ...

    def count(self, table: str) -> int: ...

    def rows(self, table: str, columns: Sequence[str], batch: int) -> Iterator[Rows]:
        """The logical rows of `table` (values in `columns` order), `batch` at a time."""

    def counters(self) -> dict[str, int]:
        """Each table's id counter (the last id handed out), where the backend keeps one."""


class TransferTarget(TransferSource, Protocol):
    """An empty database written in one transaction: `commit` or `abort`, nothing between."""

    def nonempty_tables(self) -> list[str]: ...

    def refusal(self, table: str, columns: Sequence[str]) -> str | None:
        """Why `table` with `columns` cannot be written here (None: it can)."""

    def begin_table(self, table: str, columns: Sequence[str], expected_rows: int) -> None:
        """Make ready for `table`'s rows (create a per-generation table that is missing; a big
        table may have its secondary indexes built after its rows instead of row by row)."""

    def write(self, table: str, columns: Sequence[str], rows: Rows) -> None: ...

    def finish(self, counters: dict[str, int]) -> None:
        """Rebuild what is derived and carry the id counters over, once everything is in."""

    def commit(self) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True)
class TableResult:
    table: str
    source_rows: int
    target_rows: int
    source_hash: str
    target_hash: str

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows and self.source_hash == self.target_hash


@dataclass
class TransferReport:
    source: str
    target: str
    tables: list[TableResult] = field(default_factory=list)
    not_copied: dict[str, str] = field(default_factory=dict)  # table -> why
    derived: dict[str, str] = field(default_factory=dict)  # source table -> why skipped
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.not_copied and all(t.ok for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.source_rows for t in self.tables)

    def skipped_lines(self) -> list[str]:
        """What was not copied because it is derived, bookkeeping or empty, grouped by why."""
        by_reason: dict[str, list[str]] = {}
        for table, why in self.derived.items():
            by_reason.setdefault(why, []).append(table)
        return [f"{', '.join(names)}: {why}" for why, names in by_reason.items()]

    def lines(self) -> list[str]:
        """The per-table comparison as a text table."""
        width = max([len("table"), *(len(t.table) for t in self.tables)])
        out = [
            f"{'table':<{width}}  {'source rows':>11}  {'target rows':>11}  sha256 (sum of rows)"
        ]
        for t in self.tables:
            mark = "ok" if t.ok else f"MISMATCH (target {t.target_hash[:16]})"
            out.append(
                f"{t.table:<{width}}  {t.source_rows:>11}  {t.target_rows:>11}  "
                f"{t.source_hash[:16]}  {mark}"
            )
        out += [f"{name:<{width}}  NOT COPIED: {why}" for name, why in self.not_copied.items()]
        return out


class TargetNotEmpty(DatabaseError):
    """The target already holds data: `pinch migrate` only writes into an empty one."""


class TransferFailed(DatabaseError):
    """The copy did not verify (or a table could not be copied); nothing was committed."""

    def __init__(self, message: str, report: TransferReport) -> None:
        super().__init__(message)
        self.report = report


def copy_order(tables: Sequence[str]) -> list[str]:
    """Parents first (`ORDER`), then the other tables by name, then each generation's vectors."""
    first = [t for t in ORDER if t in tables]
    vectors = sorted(
        (t for t in tables if generation_of(t) is not None),
        key=lambda t: (generation_of(t), t),
    )
    rest = sorted(t for t in tables if t not in first and t not in vectors)
    return first + rest + vectors


def transfer(
    source: TransferSource,
    target: TransferTarget,
    *,
    batch: int = BATCH_ROWS,
    progress: Progress | None = None,
) -> TransferReport:
    """Copy every table of `source` into the empty `target`, then compare counts and hashes
    table by table; commit only when every table was copied and matches. Raises TargetNotEmpty
    before writing anything, TransferFailed (with the report; the target rolled back) after."""
    started = time.monotonic()
    full = target.nonempty_tables()
    if full:
        shown = ", ".join(full[:5]) + (" …" if len(full) > 5 else "")
        raise TargetNotEmpty(f"The target {target.label} already holds data ({shown}).")
    inventory = source.inventory()
    report = TransferReport(source.label, target.label, derived=dict(inventory.derived))
    hashes: dict[str, RowsHash] = {}
    try:
        tables = []
        for table in copy_order(list(inventory.tables)):
            why = target.refusal(table, inventory.tables[table])
            if why is None:
                tables.append(table)
            elif source.count(table):
                report.not_copied[table] = why
            else:  # nothing in it to lose (a store never used, say)
                report.derived[table] = f"empty, and {why}"
        if report.not_copied:  # known before a row is written: say so now
            raise _failed(source, target, report)
        for table in tables:
            columns = inventory.tables[table]
            total = source.count(table)
            seen = hashes[table] = RowsHash()
            target.begin_table(table, columns, total)
            for rows in source.rows(table, columns, batch):
                seen.add(rows)
                target.write(table, columns, rows)
                if progress is not None:
                    progress(table, seen.rows, total)
        target.finish(source.counters())
        for table, seen in hashes.items():
            columns = inventory.tables[table]
            written = RowsHash()
            for rows in target.rows(table, columns, batch):
                written.add(rows)
                if progress is not None:
                    progress(f"{table} (reading back)", written.rows, seen.rows)
            report.tables.append(
                TableResult(table, seen.rows, written.rows, seen.hexdigest(), written.hexdigest())
            )
    except BaseException:
        target.abort()
        raise
    report.seconds = time.monotonic() - started
    # Every table the source holds was copied and compared, or is named as not needing it.
    accounted = {t.table for t in report.tables} | set(report.derived)
    for table in inventory.tables:
        if table not in accounted:
            report.not_copied.setdefault(table, "not copied (a bug: please report it)")
    if not report.ok:
        target.abort()
        raise _failed(source, target, report)
    target.commit()
    return report


def _failed(
    source: TransferSource, target: TransferTarget, report: TransferReport
) -> TransferFailed:
    bad = [t.table for t in report.tables if not t.ok] + list(report.not_copied)
    return TransferFailed(
        f"The copy of {source.label} did not complete ({', '.join(bad)}): nothing was "
        f"committed to {target.label}; the source is untouched.",
        report,
    )
