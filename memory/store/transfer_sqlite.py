"""The SQLite side of `pinch migrate` (memory/store/transfer.py): an agent file read through a
read-only connection in one snapshot, and a new agent file written beside its final path and
moved into place only once the copy verified.

    with open_sqlite_source(settings.database_path) as source: ...
    with open_sqlite_target(Path("agent.sqlite")) as target: ...
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from memory.errors import DatabaseError
from memory.store.agent_leases import LEASE_NOT_COPIED, LEASE_TABLES
from memory.store.cache_codec import float32_from_cache
from memory.store.chunk_text import read_text, read_texts
from memory.store.content_hash import StoredHash, cache_key, hash_of_stored, stored_hash
from memory.store.db import Database, open_database, sqlite_driver
from memory.store.index_embedcache import cached_vectors, model_id
from memory.store.passage_pack import passage_count, portable_rows
from memory.store.schema import MigrationSet, apply
from memory.store.transfer import (
    DERIVED_META,
    INSTANTS,
    MATRIX,
    MATRIX_LOG,
    MATRIX_PACK,
    PACK_DERIVED,
    ROW_ORDER,
    Inventory,
    Rows,
    generation_of,
    instant,
)
from memory.store.transfer_values import (
    BareReader,
    coded_rows,
    float32_blob,
    float32_rows,
    fsync_path,
    matrix_generation,
    remove_database,
    sqlite_value,
)
from memory.store.vector_pack import SqliteMatrixPack, packed_rows
from memory.store.vector_tables import SqliteVectorTables
from memory.text import fts_body

TRIGGER_ROWS = 16  # intent_triggers rowid = intent id * 16 + entry (memory/store/intents_store)
VEC = re.compile(r"memory_vec_g\d+")
BOOKKEEPING = ("schema_migrations", "_migrations", "_lineage_migrations")
# The per-generation vector tables, as memory/store/vector_tables.py and vector_pack.py make them.
_CREATE = {
    MATRIX: "CREATE TABLE {} (chunk_id INTEGER PRIMARY KEY, scope TEXT NOT NULL, vector BLOB)",
    MATRIX_LOG: "CREATE TABLE {} (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "chunk_id INTEGER NOT NULL)",
    MATRIX_PACK: "CREATE TABLE {} (block INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
    "rows INTEGER NOT NULL, dimensions INTEGER NOT NULL, scopes TEXT NOT NULL, "
    "ids BLOB NOT NULL, scope_codes BLOB NOT NULL, vectors BLOB NOT NULL)",
}
# memory_units' reference to the embedding cache row holding its vector (SQLite only): the
# logical row carries the vector itself instead (see `_SqliteTables` below).
CACHE_ROW = "cache_row"
# The columns holding a text hash stored as bytes (memory/store/content_hash.py): the cache's
# key, the first 14 bytes of the digest, and a passage's, that key (a packed passage's is its
# cache row's; 28 hex digits in the portable form) or, come from PostgreSQL, the whole digest;
# the chunks' and files' hashes, the whole digest (m018).
HASHES = {
    "memory_units": "hash",
    "embedding_cache": "chunk_hash",
    "memory_chunks": "hash",
    "memory_sources": "hash",
}
_AS_STORED = {
    "memory_units": stored_hash,
    "embedding_cache": cache_key,
    "memory_chunks": stored_hash,
    "memory_sources": stored_hash,
}
# The columns naming a cached vector's model (its 4-bit codes are around that model's center).
_MODEL = ("provider", "model", "dimensions")
# The extra columns read to resolve a memory_units row's vector from the cache.
_UNIT_EXTRA = (CACHE_ROW, "hash", "generation")
# The embedding cache's logical row (PostgreSQL's): since m014 SQLite names the model by a number
# (`embedding_models`: provider, model and, since m016, width) and keeps an id of its own.
CACHE_COLUMNS = ("provider", "model", "chunk_hash", "dimensions", "vector")
# SQLite-only tables: rows part of a logical table (see `_SqliteTables`), or the cache's own
# bookkeeping.
_FOLDED = {
    "memory_passages": "packed passages: copied as memory_units rows",
    "embedding_models": "the embedding cache's model names: copied in its rows",
    "embedding_cache_writes": "which cache rows were written in the last hour (kept from "
    "pruning): a copy's rows count as older",
}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _SqliteTables:
    """Reading the logical tables of one SQLite connection (source and target alike).

    Vectors are read in the portable form both backends share, float32 little-endian: SQLite
    stores them as 8-bit codes and a scale (memory/store/vector_codec.py), decoded here — exact
    and deterministic, so the same file always gives the same rows and hashes. A memory_units
    row whose `vector` is NULL (its vector kept once, in the embedding cache row `cache_row`
    names) carries that cache row's vector, and `cache_row` is not a logical column; the
    embedding cache's vectors, the matrix rows and the pack's blocks come decoded. Float32
    blobs (older rows, or rows copied from PostgreSQL) are read as they are."""

    conn: Any
    label: str

    def _master(self) -> dict[str, str]:
        rows = self.conn.execute(
            "SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = 'table'"
        )
        return {str(name): str(sql) for name, sql in rows}

    def _columns(self, physical: str) -> list[str]:
        return [str(r[1]) for r in self.conn.execute(f"PRAGMA table_info({_quote(physical)})")]

    def _logical_columns(self, table: str) -> list[str]:
        if table == "embedding_cache":
            return list(CACHE_COLUMNS)
        return [c for c in self._columns(table) if not (table == "memory_units" and c == CACHE_ROW)]

    def inventory(self) -> Inventory:
        master = self._master()
        virtual = [n for n, s in master.items() if s.upper().startswith("CREATE VIRTUAL TABLE")]
        tables: dict[str, tuple[str, ...]] = {}
        derived: dict[str, str] = {}
        for name in sorted(master):
            owner = next((v for v in virtual if name.startswith(v + "_")), None)
            if name in BOOKKEEPING:
                derived[name] = "migration records: the target keeps its own"
            elif name in LEASE_TABLES:
                derived[name] = LEASE_NOT_COPIED
            elif name.startswith("sqlite_"):
                derived[name] = "SQLite's own (id counters are carried over)"
            elif owner is not None:
                derived[name] = "FTS5 and sqlite-vec internals: rebuilt from the rows"
            elif VEC.fullmatch(name):
                derived[name] = "sqlite-vec's KNN index: rebuilt from the vectors on first search"
            elif name == "memory_fts":
                tables["keywords"] = ("chunk_id", "body")
            elif name == "intent_triggers":
                tables["intent_triggers"] = ("intent_id", "entry", "terms")
            elif name in _FOLDED:
                derived[name] = _FOLDED[name]
            elif MATRIX_PACK.fullmatch(name):
                derived[name] = PACK_DERIVED  # read through the matrix rows it holds
            elif name in ("memory_units", "embedding_cache"):
                tables[name] = tuple(self._logical_columns(name))
            else:
                extra = (ROW_ORDER[name],) if name in ROW_ORDER else ()
                tables[name] = (*self._columns(name), *extra)
        return Inventory(tables, derived)

    def _select(self, table: str, columns: Sequence[str]) -> tuple[str, str]:
        """(the columns to select, FROM … WHERE …) of a logical table."""
        if table == "keywords":
            # The keyword index keeps no copy of its bodies (content=''): each is the chunk's
            # text as memory/text.py `fts_body` makes it (see `rows`).
            return "id, text", "FROM memory_chunks"
        if table == "intent_triggers":
            n = TRIGGER_ROWS
            return f"rowid / {n}, rowid % {n}, terms", "FROM intent_triggers"
        if table == "embedding_cache":
            named = {"provider": "m.provider", "model": "m.model", "dimensions": "m.dimensions"}
            picked = ", ".join(named.get(c, f"c.{_quote(c)}") for c in columns)
            return picked, (
                "FROM embedding_cache c JOIN embedding_models m ON m.id = c.model_id ORDER BY c.id"
            )
        order = ROW_ORDER.get(table)
        picked = ", ".join("rowid" if c == order else _quote(c) for c in columns)
        where = f" WHERE key NOT LIKE '{DERIVED_META}'" if table == "meta" else ""
        return picked, f"FROM {_quote(table)}{where}"

    def count(self, table: str) -> int:
        if table == "memory_units":
            return passage_count(self.conn)
        _, source = self._select(table, ())
        return int(self.conn.execute(f"SELECT count(*) {source}").fetchone()[0])

    def rows(self, table: str, columns: Sequence[str], batch: int) -> Iterator[Rows]:
        at = list(columns).index(HASHES[table]) if HASHES.get(table) in columns else None
        for found in self._rows(table, columns, batch):
            if at is None:
                yield found
            else:  # the portable form of a hash: hex text (SQLite keeps the digest's bytes)
                yield [(*r[:at], hash_of_stored(r[at]), *r[at + 1 :]) for r in found]

    def _rows(self, table: str, columns: Sequence[str], batch: int) -> Iterator[Rows]:
        if table == "memory_units":
            yield from portable_rows(self.conn, columns, max(1, batch // 10))
        units = table == "memory_units" and CACHE_ROW in self._columns(table)
        picked, source = self._select(table, [*columns, *_UNIT_EXTRA] if units else columns)
        instants = [i for i, c in enumerate(columns) if c in INSTANTS.get(table, ())]
        cursor = self.conn.execute(f"SELECT {picked} {source}")
        while found := cursor.fetchmany(batch):
            if units:
                yield self._unit_vectors(columns, found)
            elif table == "embedding_cache" and {"vector", *_MODEL} <= set(columns):
                yield self._cache_vectors(columns, found)
            elif (generation := matrix_generation(table, columns)) is not None:
                yield self._matrix_vectors(generation, columns, found)
            elif (convert := float32_rows(table, columns)) is not None:
                yield [convert(row) for row in found]
            elif table == "keywords":
                yield [(int(cid), fts_body(read_text(self.conn, text))) for cid, text in found]
            elif table == "memory_chunks" and "text" in columns:
                # (the portable form of a chunk's text: plain; SQLite may keep it compressed,
                # memory/store/chunk_text.py)
                yield read_texts(self.conn, found, list(columns).index("text"))
            elif table == "intent_triggers":
                yield [(int(a), int(b), str(t).split(" ") if t else []) for a, b, t in found]
            elif instants:
                yield [
                    tuple(instant(v) if i in instants else v for i, v in enumerate(row))
                    for row in found
                ]
            else:
                yield [tuple(row) for row in found]

    def _unit_vectors(self, columns: Sequence[str], found: Rows) -> Rows:
        """memory_units rows (`columns`, then `_UNIT_EXTRA`) with each vector as float32: the
        row's own, else the embedding cache's row it names (found as the search finds it,
        memory/store/search_queries.py passage_vectors: by rowid, checked by hash, else by
        hash under the generation's model); NULL when neither has it (search skips it too)."""
        at, n = list(columns).index("vector"), len(columns)
        wanted: dict[int, tuple[list[StoredHash], list[int | None]]] = {}
        for row in found:
            if row[at] is None:
                hashes, refs = wanted.setdefault(int(row[n + 2]), ([], []))
                hashes.append(stored_hash(row[n + 1]))
                refs.append(row[n])
        reader = BareReader(self.conn)
        cached = {
            g: cached_vectors(reader, g, h, refs)  # type: ignore[arg-type]
            for g, (h, refs) in wanted.items()
        }
        out: Rows = []
        for row in found:
            blob = (
                row[at]
                if row[at] is not None
                else cached[int(row[n + 2])].get(stored_hash(row[n + 1]))
            )
            vector = None if blob is None else float32_blob(blob)
            out.append((*row[:at], vector, *row[at + 1 : n]))
        return out

    def _matrix_vectors(self, generation: int, columns: Sequence[str], found: Rows) -> Rows:
        """A generation's matrix rows with each vector as float32: the row's own, else (NULL:
        the pack holds it, memory/store/vector_pack.py) the pack's."""
        names = list(columns)
        at, cid = names.index("vector"), names.index("chunk_id")
        packed = packed_rows(self.conn, generation, [int(r[cid]) for r in found if r[at] is None])
        out: Rows = []
        for row in found:
            blob = row[at] if row[at] is not None else packed.get(int(row[cid]), (None, None))[1]
            out.append((*row[:at], None if blob is None else float32_blob(blob), *row[at + 1 :]))
        return out

    def _cache_vectors(self, columns: Sequence[str], found: Rows) -> Rows:
        """embedding_cache rows with each vector as float32 (a centered one decoded around its
        model's center, memory/store/cache_codec.py: one call per model, not per row)."""
        names = list(columns)
        at, model_at = names.index("vector"), [names.index(c) for c in _MODEL]
        by_model: dict[tuple[Any, ...], list[int]] = {}
        for i, row in enumerate(found):
            by_model.setdefault(tuple(row[j] for j in model_at), []).append(i)
        floats: dict[int, bytes] = {}
        for model, rows in by_model.items():
            blobs = float32_from_cache(self.conn, model, [found[i][at] for i in rows])
            floats.update(zip(rows, blobs, strict=True))
        return [(*row[:at], floats[i], *row[at + 1 :]) for i, row in enumerate(found)]

    def counters(self) -> dict[str, int]:
        if "sqlite_sequence" not in self._master():
            return {}
        return {
            str(n): int(s) for n, s in self.conn.execute("SELECT name, seq FROM sqlite_sequence")
        }


class SqliteSource(_SqliteTables):
    """An agent file opened read-only (nothing is created, changed or migrated), read inside one
    transaction: every table as of one moment, even while a gateway writes."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise DatabaseError(f"There is no agent database at {path}: nothing to migrate.")
        self.label = str(path)
        driver = sqlite_driver()
        try:
            self.conn = driver.connect(
                path.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None, timeout=10
            )
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot
        except driver.Error as exc:
            raise DatabaseError(f"Cannot read the agent database {path}: {exc}") from exc
        master = self._master()
        if ("memory_units" in master and "memory_passages" not in master) or (  # before m014
            "embedding_cache" in master and "embedding_cache_writes" not in master  # before m016
        ):
            self.close()
            raise DatabaseError(
                f"The agent database {path} is in an older version's layout, which this "
                "version reads only after upgrading it: run `pinch memory status` once (it "
                "upgrades the file), then `pinch migrate` again. Nothing was copied."
            )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.execute("COMMIT")
        self.conn.close()


def migration_sets() -> list[MigrationSet]:
    """Every SQLite migration set in memory/store/ (found by looking, as backups do: a set added
    later is created without being listed here). The memory set is applied on open."""
    import memory.store as package

    found: dict[str, MigrationSet] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            continue  # memory/store/postgres: the other backend's sets
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, MigrationSet):
                found.setdefault(value.name, value)
    return [s for name, s in sorted(found.items()) if name != "memory"]


def create_agent_schema(db: Database) -> None:
    """Every table a fresh agent file gets from Pinch's SQLite stores."""
    from memory.store.lineage import apply_lineage_migrations

    with db.lock:
        for migration_set in migration_sets():
            apply(db.conn, migration_set)
    apply_lineage_migrations(db)


class SqliteTarget(_SqliteTables):
    """A new agent file, written as `<path>.migrating` in one transaction and moved to `path`
    by `commit` (an existing `path` is replaced only if it holds no rows)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)
        self.partial = path.with_name(path.name + ".migrating")
        remove_database(self.partial)  # what an interrupted run left: never anyone's data
        self.db = open_database(self.partial, vector_backend="numpy")
        self.conn = self.db.conn
        create_agent_schema(self.db)
        self.conn.execute("PRAGMA synchronous = OFF")  # verified before it is moved into place
        self.conn.execute("BEGIN IMMEDIATE")
        self._made: set[str] = set()

    def nonempty_tables(self) -> list[str]:
        if not self.path.exists():
            return []
        try:
            existing = SqliteSource(self.path)
        except DatabaseError:
            return [f"{self.path.name} (not a readable agent database)"]
        try:
            inventory = existing.inventory()
            return [t for t in inventory.tables if existing.count(t)]
        finally:
            existing.close()

    def refusal(self, table: str, columns: Sequence[str]) -> str | None:
        if table in ("keywords", "intent_triggers") or generation_of(table) is not None:
            return None
        if table not in self._master():
            return "no such table in a new SQLite agent file"
        have = {*self._logical_columns(table), *([ROW_ORDER[table]] if table in ROW_ORDER else [])}
        missing = [c for c in columns if c not in have]
        return f"no column {', '.join(missing)} in SQLite" if missing else None

    def begin_table(self, table: str, columns: Sequence[str], expected_rows: int) -> None:
        if generation_of(table) is not None and table not in self._made:
            pattern = next(p for p in _CREATE if p.fullmatch(table))
            self.conn.execute(_CREATE[pattern].format(_quote(table)))
            self._made.add(table)

    def write(self, table: str, columns: Sequence[str], rows: Rows) -> None:
        if not rows:
            return
        if table == "keywords":
            self.conn.executemany("INSERT INTO memory_fts (rowid, body) VALUES (?, ?)", rows)
            return
        if table == "intent_triggers":
            self.conn.executemany(
                "INSERT INTO intent_triggers (rowid, terms) VALUES (?, ?)",
                [(i * TRIGGER_ROWS + e, " ".join(terms)) for i, e, terms in rows],
            )
            return
        if HASHES.get(table) in columns:
            at, stored = list(columns).index(HASHES[table]), _AS_STORED[table]
            rows = [(*r[:at], stored(r[at]), *r[at + 1 :]) for r in rows]
        rows = coded_rows(table, columns, rows)  # SQLite's codes back as the same bytes
        if table == "embedding_cache":
            columns, rows = self._numbered_models(columns, rows)
        order = ROW_ORDER.get(table)
        names = ", ".join("rowid" if c == order else _quote(c) for c in columns)
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(
            f"INSERT INTO {_quote(table)} ({names}) VALUES ({marks})",
            [tuple(sqlite_value(v) for v in row) for row in rows],
        )

    def _numbered_models(self, columns: Sequence[str], rows: Rows) -> tuple[list[str], Rows]:
        """Logical embedding cache rows as SQLite keeps them: the model (and width) by its
        number."""
        names = list(columns)
        at = [names.index(c) for c in _MODEL]
        numbers = {
            (provider, model, dims): model_id(self.conn, provider, model, dims, create=True)
            for provider, model, dims in {tuple(r[i] for i in at) for r in rows}
        }
        kept = [i for i in range(len(names)) if i not in at]
        return ["model_id", *(names[i] for i in kept)], [
            (numbers[tuple(r[i] for i in at)], *(r[i] for i in kept)) for r in rows
        ]

    def finish(self, counters: dict[str, int]) -> None:
        master = self._master()
        for table, last in counters.items():
            if "AUTOINCREMENT" not in master.get(table, "").upper():
                continue  # SQLite hands out max(id) + 1 there: nothing to carry over
            self.conn.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (last, table)
            )
            if not self.conn.execute(
                "SELECT 1 FROM sqlite_sequence WHERE name = ?", (table,)
            ).fetchone():
                self.conn.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, last)
                )
        for table in sorted(self._made):  # each centroid kept once: packed, the rows emptied
            if match := MATRIX.fullmatch(table):
                generation = int(match.group(1))
                seq = SqliteVectorTables().last_seq(self.conn, generation) or 0
                SqliteMatrixPack().write(self.conn, generation, seq)

    def commit(self) -> None:
        self.conn.execute("COMMIT")
        self.db.close()  # the last connection: the journal is folded into the file
        fsync_path(self.partial)  # written without syncing (synchronous = OFF): sync it once now
        for old in (Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            remove_database(old)  # an empty file's journal must not be replayed onto the copy
        os.replace(self.partial, self.path)
        fsync_path(self.path.parent)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.execute("ROLLBACK")
        with contextlib.suppress(Exception):
            self.db.close()
        remove_database(self.partial)

    def close(self) -> None:
        if self.partial.exists():
            self.abort()


@contextlib.contextmanager
def open_sqlite_source(path: Path) -> Iterator[SqliteSource]:
    source = SqliteSource(path)
    try:
        yield source
    finally:
        source.close()


@contextlib.contextmanager
def open_sqlite_target(path: Path) -> Iterator[SqliteTarget]:
    target = SqliteTarget(path)
    try:
        yield target
    finally:
        target.close()
