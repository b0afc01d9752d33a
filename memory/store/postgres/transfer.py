"""The PostgreSQL side of `pinch migrate` (memory/store/transfer.py): an agent's schema read in
one REPEATABLE READ, READ ONLY transaction (nothing migrated, nothing written), and an empty
agent schema written in one transaction (COPY), committed only once the copy verified.

    with open_postgres_source(dsn, "pinch_main") as source: ...
    with open_postgres_target(dsn, "pinch_main") as target: ...

Writing holds the schema's advisory lock (the one migrations take), so a gateway started on the
schema meanwhile waits at its start until the copy is committed or rolled back.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from common.redact import redact
from memory.errors import DatabaseError
from memory.store.agent_leases import LEASE_NOT_COPIED, LEASE_TABLES
from memory.store.postgres.database import server_said, setup_refused
from memory.store.postgres.migrations import apply_all
from memory.store.postgres.transfer_values import (
    float32_rows,
    matrix_floats,
    pgvector_binary,
    text_array,
)
from memory.store.postgres.vectors import CREATE_MATRIX, PgKnnIndex
from memory.store.store_config import dsn_problem, redacted_dsn
from memory.store.transfer import (
    DERIVED_META,
    MATRIX,
    MATRIX_LOG,
    MATRIX_PACK,
    PACK_DERIVED,
    Inventory,
    Rows,
)
from memory.store.transfer_values import coded_rows

DERIVED = {
    "schema_migrations": "migration records: the target keeps its own",
    "memory_keyword_stats": "bm25's row and token totals: recomputed from the keyword rows",
    "memory_keyword_df": "each token's document frequency: recomputed from the keyword rows",
    "memory_keyword_postings": "each token's rows, counts and lengths: kept by triggers",
    **dict.fromkeys(LEASE_TABLES, LEASE_NOT_COPIED),
}
# The per-generation vector tables, as memory/store/postgres/vectors.py makes them (the HNSW
# index of a matrix table is built once its rows are in: faster than row by row).
_CREATE = {
    MATRIX: CREATE_MATRIX,
    MATRIX_LOG: "CREATE TABLE {} (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "chunk_id bigint NOT NULL)",
}
# A generation's logical matrix rows: (chunk id, scope, float32 blob), the blob read from and
# written to pgvector's `embedding`, each centroid's one copy (vectors.py).
MATRIX_COLUMNS = ("chunk_id", "scope", "vector")

BULK_ROWS = 5000  # a table this big gets its secondary indexes built after its rows
_SECONDARY_INDEXES = (
    "SELECT i.indexname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
    "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = i.schemaname "
    "JOIN pg_index x ON x.indexrelid = c.oid WHERE i.schemaname = %s AND i.tablename = %s "
    "AND NOT x.indisunique AND NOT x.indisprimary"
)
_IDENTITIES = (
    "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' "
    "AND a.attidentity <> '' AND NOT a.attisdropped"
)
_cursor_names = itertools.count(1)


def _connect(dsn: str) -> psycopg.Connection[Any]:
    problem = dsn_problem(dsn)
    if problem:
        raise DatabaseError(problem)
    try:
        return psycopg.connect(dsn, connect_timeout=10)
    except psycopg.Error as exc:
        raise DatabaseError(
            f"Cannot use the PostgreSQL store {redacted_dsn(dsn)}: {server_said(exc)} Check the "
            "DSN and that the server is running and reachable."
        ) from exc


F = TypeVar("F", bound=Callable[..., Any])


def _worded(fn: F) -> F:
    """PostgreSQL's errors during the copy (a row it refuses, a lost connection) as one
    DatabaseError line, the DSN's password redacted."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except psycopg.Error as exc:
            raise _failure(self.label, exc) from exc

    return wrapper  # type: ignore[return-value]


def _failure(label: str, exc: BaseException) -> DatabaseError:
    reason = redact(" ".join(str(exc).split()))[:300]
    return DatabaseError(
        f"PostgreSQL {label} failed during the copy: {reason}. Nothing was committed; the "
        "source is untouched."
    )


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


class _PgTables:
    """Reading the logical tables of one agent schema (source and target alike)."""

    conn: psycopg.Connection[Any]
    schema: str
    label: str

    def _tables(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE' ORDER BY table_name",
            (self.schema,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _columns(self, table: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (self.schema, table),
        ).fetchall()
        return [str(r[0]) for r in rows]

    @_worded
    def inventory(self) -> Inventory:
        tables: dict[str, tuple[str, ...]] = {}
        derived: dict[str, str] = {}
        for name in self._tables():
            if name in DERIVED:
                derived[name] = DERIVED[name]
            elif name == "memory_keywords":
                tables["keywords"] = ("chunk_id", "body")  # tokens: derived from the body
            elif MATRIX.fullmatch(name):
                tables[name] = MATRIX_COLUMNS  # an older schema's `vector` copy: not read
            elif MATRIX_PACK.fullmatch(name):
                derived[name] = PACK_DERIVED  # an older schema's, brought from SQLite
            else:
                tables[name] = tuple(self._columns(name))
        return Inventory(tables, derived)

    def _select(self, table: str, columns: Sequence[str]) -> sql.Composed:
        if table == "keywords":
            return sql.SQL("SELECT chunk_id, body FROM memory_keywords").format()
        where: sql.Composable = sql.SQL("")
        if table == "meta":
            where = sql.SQL(" WHERE key NOT LIKE {}").format(sql.Literal(DERIVED_META))
        if MATRIX.fullmatch(table):  # the vector is pgvector's column (float32 read back)
            columns = ["embedding" if c == "vector" else c for c in columns]
        picked = sql.SQL(", ").join(_ident(c) for c in columns) if columns else sql.SQL("1")
        return sql.SQL("SELECT {} FROM {}{}").format(picked, _ident(table), where)

    def _exists(self, table: str) -> bool:
        physical = "memory_keywords" if table == "keywords" else table
        return physical in self._tables()

    @_worded
    def count(self, table: str) -> int:
        if not self._exists(table):
            return 0
        counted = sql.SQL("SELECT count(*) FROM ({}) AS t").format(self._select(table, ()))
        row = self.conn.execute(counted).fetchone()
        return int(row[0]) if row else 0

    def rows(self, table: str, columns: Sequence[str], batch: int) -> Iterator[Rows]:
        try:
            yield from self._rows(table, columns, batch)
        except psycopg.Error as exc:
            raise _failure(self.label, exc) from exc

    def _rows(self, table: str, columns: Sequence[str], batch: int) -> Iterator[Rows]:
        if not self._exists(table):
            return
        with self.conn.cursor(name=f"pinch_transfer_{next(_cursor_names)}") as cursor:
            cursor.itersize = batch
            matrix = MATRIX.fullmatch(table) is not None
            cursor.execute(self._select(table, columns), binary=matrix)  # pgvector's exact bits
            portable = (matrix_floats if matrix else float32_rows)(table, columns)
            while found := cursor.fetchmany(batch):
                yield portable(found)

    def _identities(self) -> list[tuple[str, str]]:
        return [(str(t), str(c)) for t, c in self.conn.execute(_IDENTITIES, (self.schema,))]

    def _sequence(self, table: str, column: str) -> str:
        """The qualified name of the sequence behind an identity column."""
        qualified = sql.SQL("{}.{}").format(_ident(self.schema), _ident(table)).as_string(self.conn)
        row = self.conn.execute("SELECT pg_get_serial_sequence(%s, %s)", (qualified, column))
        found = row.fetchone()
        return str(found[0]) if found and found[0] else ""

    @_worded
    def counters(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for table, column in self._identities():
            sequence = self._sequence(table, column)
            if not sequence:
                continue
            # The name comes from pg_get_serial_sequence: already quoted where it needs to be.
            row = self.conn.execute(
                sql.SQL("SELECT last_value, is_called FROM {}").format(sql.SQL(sequence))
            ).fetchone()
            if row and row[1]:
                found[table] = int(row[0])
        return found


class NoSchema(DatabaseError):
    """The agent has no schema in that database."""


class PgSource(_PgTables):
    """An agent's schema, read in one REPEATABLE READ, READ ONLY transaction."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.schema = schema
        self.label = f"{redacted_dsn(dsn)} (schema {schema})"
        self.conn = _connect(dsn)
        self.conn.read_only = True
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        if not self.conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone():
            self.conn.close()
            raise NoSchema(
                f"There is no agent schema {schema} at {redacted_dsn(dsn)}: nothing to migrate."
            )
        self.conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(_ident(schema)))
        register_vector(self.conn)  # the centroids come back through pgvector's binary form
        if "created_at" in self._columns("embedding_cache"):  # before p002_cache_short_key
            self.conn.close()
            raise DatabaseError(
                f"The agent schema {schema} at {redacted_dsn(dsn)} is in an older version's "
                "layout, which this version reads only after upgrading it: run `pinch memory "
                "status` once with this store (it upgrades the schema), then `pinch migrate` "
                "again. Nothing was copied."
            )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.rollback()
        self.conn.close()

    @_worded
    def lease_holder(self, now: float, lease_s: float) -> str | None:
        """ "host H, pid P" of the gateway holding the agent's lease (renewed within `lease_s`
        seconds of `now`) — on any machine sharing this database — else None."""
        if "agent_lease" not in self._tables():
            return None
        row = self.conn.execute(
            "SELECT host, pid FROM agent_lease WHERE gateway IS NOT NULL AND renewed_at >= %s",
            (now - lease_s,),
        ).fetchone()
        return f"host {row[0]}, pid {row[1]}" if row else None


class PgTarget(_PgTables):
    """An agent's schema (created and migrated if missing), written in one transaction."""

    def __init__(self, dsn: str, schema: str, on_wait: Callable[[], None] | None = None) -> None:
        self.schema = schema
        self.label = f"{redacted_dsn(dsn)} (schema {schema})"
        self.conn = _connect(dsn)
        try:
            if on_wait is not None and not self._lock_free():
                on_wait()  # another copy, or a gateway migrating the schema: it waits for that
            apply_all(self.conn, schema)  # its own transaction: the empty tables
            self.conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"pinch:{schema}",)
            )
            self.conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(_ident(schema)))
            register_vector(self.conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            self.conn.close()
            raise DatabaseError(setup_refused(redacted_dsn(dsn), exc)) from exc
        except psycopg.Error as exc:
            self.conn.close()
            raise DatabaseError(
                f"Cannot prepare the schema {schema} at {redacted_dsn(dsn)}: "
                f"{redact(' '.join(str(exc).split()))[:300]}"
            ) from exc
        self._stems: dict[str, str] = {}  # token -> its stem, asked once per copy
        self._words: dict[str, list[str]] = {}  # a body's word -> its tokens
        self._made: dict[str, int | None] = {}  # per-generation tables made: matrix -> width
        self._deferred: list[str] = []  # CREATE INDEX statements to run once the rows are in
        self._open = True

    def _lock_free(self) -> bool:
        """Whether the schema's advisory lock is free this moment (taken and let go at once)."""
        key = (f"pinch:{self.schema}",)
        free = self.conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", key)
        if (row := free.fetchone()) and row[0]:
            self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", key)
        self.conn.commit()
        return bool(row and row[0])

    @_worded
    def nonempty_tables(self) -> list[str]:
        full = []
        for table in self._tables():
            if table in DERIVED:
                continue
            found = self.conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(_ident(table))
            ).fetchone()
            if found and found[0]:
                full.append(table)
        return full

    def refusal(self, table: str, columns: Sequence[str]) -> str | None:
        if table == "keywords" or any(p.fullmatch(table) for p in _CREATE):
            return None
        if table not in self._tables():
            return "no such table in PostgreSQL's schema yet"
        missing = [c for c in columns if c not in self._columns(table)]
        return f"no column {', '.join(missing)} in PostgreSQL" if missing else None

    def _create(self, table: str, columns: Sequence[str], rows: Rows) -> bool:
        """Make a missing per-generation table; False when a matrix's width is not known yet."""
        if table in self._made:
            return True
        pattern = next((p for p in _CREATE if p.fullmatch(table)), None)
        if pattern is None:
            return True
        width: int | None = None
        if pattern is MATRIX:
            at = list(columns).index("vector")
            width = len(rows[0][at]) // 4 if rows else self._generation_width(table)
            if not width:
                return False
        self.conn.execute(sql.SQL(_CREATE[pattern]).format(_ident(table), sql.Literal(width)))
        self._made[table] = width
        return True

    def _generation_width(self, table: str) -> int | None:
        match = MATRIX.fullmatch(table)
        assert match is not None
        row = self.conn.execute(
            "SELECT dimensions FROM memory_generations WHERE id = %s", (int(match.group(1)),)
        ).fetchone()
        return int(row[0]) if row and row[0] else None

    @_worded
    def begin_table(self, table: str, columns: Sequence[str], expected_rows: int) -> None:
        if expected_rows >= BULK_ROWS and table in self._tables():
            physical = "memory_keywords" if table == "keywords" else table
            # Built once after the rows (in finish) rather than updated row by row; the same
            # definitions, read from the catalogue; the unique ones stay to check as rows come.
            for name, definition in self.conn.execute(_SECONDARY_INDEXES, (self.schema, physical)):
                self.conn.execute(sql.SQL("DROP INDEX {}").format(_ident(str(name))))
                self._deferred.append(str(definition))
        if expected_rows == 0:
            self._create(table, columns, [])

    @_worded
    def write(self, table: str, columns: Sequence[str], rows: Rows) -> None:
        if not rows or not self._create(table, columns, rows):
            return
        if table == "keywords":
            self._write_keywords(rows)
            return
        names = list(columns)
        rows = coded_rows(table, names, rows)
        binary = MATRIX.fullmatch(table) is not None and tuple(names) == MATRIX_COLUMNS
        if binary:  # pgvector's binary form is built from the blob, not from 384 floats as text
            names[2] = "embedding"
            rows = [(*r[:2], pgvector_binary(bytes(r[2]))) for r in rows]
        statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
            _ident(table),
            sql.SQL(", ").join(_ident(c) for c in names),
            sql.SQL(" (FORMAT BINARY)" if binary else ""),
        )
        with self.conn.cursor().copy(statement) as copy:
            if binary:
                copy.set_types(["bigint", "text", "bytea"])
            for row in rows:
                copy.write_row(row)

    def _write_keywords(self, rows: Rows) -> None:
        """Keyword rows with their tokens stemmed as the index writes them (keywords.py
        `stemmed`: Porter, as FTS5's tokenizer), each distinct token stemmed once rather than
        once per occurrence."""
        from memory.store.postgres.keywords import keyword_tokens, stemmed

        split = [(chunk_id, body, self._tokens(body, keyword_tokens)) for chunk_id, body in rows]
        new = sorted({t for _, _, tokens in split for t in tokens} - self._stems.keys())
        if new:
            self._stems.update(zip(new, stemmed(new), strict=True))
        with self.conn.cursor().copy(
            "COPY memory_keywords (chunk_id, body, tokens) FROM STDIN"
        ) as copy:
            for chunk_id, body, tokens in split:
                copy.write_row((chunk_id, body, text_array([self._stems[t] for t in tokens])))

    def _tokens(self, body: str, tokens_of: Any) -> list[str]:
        """`tokens_of(body)` (keyword_tokens), computed word by word with each distinct word
        once: the same tokens, as no token spans whitespace and normalising (NFKD, dropping
        combining marks, lower case) works character by character."""
        if len(self._words) > 200_000:
            self._words.clear()
        out: list[str] = []
        for word in body.split():
            found = self._words.get(word)
            if found is None:
                found = self._words[word] = tokens_of(word)
            out += found
        return out

    @_worded
    def finish(self, counters: dict[str, int]) -> None:
        for definition in self._deferred:
            self.conn.execute(definition)  # as pg_indexes gave it
        self.conn.execute(
            "UPDATE memory_keyword_stats SET rows = (SELECT count(*) FROM memory_keywords), "
            "tokens = (SELECT coalesce(sum(cardinality(tokens)), 0) FROM memory_keywords) "
            "WHERE id = 1"
        )
        self.conn.execute("DELETE FROM memory_keyword_df")
        self.conn.execute(
            "INSERT INTO memory_keyword_df (token, rows) SELECT t, count(*) FROM memory_keywords, "
            "LATERAL (SELECT DISTINCT unnest(tokens) AS t) AS u GROUP BY t"
        )
        for table, width in self._made.items():
            match = MATRIX.fullmatch(table)
            if match is None or width is None:
                continue
            self.conn.execute(
                sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
                    _ident(f"{table}_hnsw"), _ident(table)
                )
            )
            PgKnnIndex(width).catch_up(self.conn, int(match.group(1)))  # HNSW is in step
        for table, column in self._identities():
            top = self.conn.execute(
                sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(_ident(column), _ident(table))
            ).fetchone()
            last = max(counters.get(table, 0), int(top[0]) if top else 0)
            sequence = self._sequence(table, column)
            if last > 0 and sequence:
                self.conn.execute("SELECT setval(%s::regclass, %s)", (sequence, last))

    def commit(self) -> None:
        self.conn.commit()
        self._open = False

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.rollback()
        self._open = False

    def close(self) -> None:
        if self._open:
            self.abort()
        self.conn.close()


@contextlib.contextmanager
def open_postgres_source(dsn: str, schema: str) -> Iterator[PgSource]:
    source = PgSource(dsn, schema)
    try:
        yield source
    finally:
        source.close()


@contextlib.contextmanager
def open_postgres_target(
    dsn: str, schema: str, on_wait: Callable[[], None] | None = None
) -> Iterator[PgTarget]:
    """The empty agent `schema` at `dsn` to copy into; `on_wait()` is called first if another
    process holds the schema's lock (the copy waits for it)."""
    target = PgTarget(dsn, schema, on_wait)
    try:
        yield target
    finally:
        target.close()
