"""`DatabaseSnapshots` on PostgreSQL: a consistent logical copy of one agent's schema in one file
the backup archive holds (`agents/<id>/agent.pgdump`), and loading such a file back.

    snapshots = PgSnapshots(db)                # bound to the agent's schema
    snapshots.copy(source, dest)               # every table's rows, as of one moment
    snapshots.facts(dest)                      # counts and migrations (the file's header)
    PgSnapshots(other_db).load(dest)           # into an empty, migrated schema (`pinch restore`)

The copy runs in ONE `REPEATABLE READ, READ ONLY` transaction: every table is read as of the
same moment while the gateways keep committing (PostgreSQL's snapshots never block writers).
Each table goes out with `COPY … TO STDOUT (FORMAT binary)`, with its columns and indexes, so
the tables an index generation creates (`memory_matrix_g<N>` …) are re-created on load. The
file is: a magic line, a JSON header (schema, server version, applied migrations, the
manifest's counts, tables), each table's COPY data in length-prefixed chunks ending with an
empty one, and a JSON trailer with the sha256 of everything before it; `copy` reads the file
back and refuses (DatabaseCorruptError) one whose checksum or structure does not hold.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from psycopg import sql

from common.private_files import PRIVATE_FILE_MODE
from memory.errors import DatabaseCorruptError, DatabaseError
from memory.store.postgres.centroids_once import p001_centroids_once
from memory.store.postgres.cjk_keywords import p001_cjk_bigram_keywords
from memory.store.postgres.database import PgDatabase
from memory.store.postgres.migrations import PG_SETS
from memory.store.snapshot import COUNTED, DatabaseFacts

MAGIC = b"PINCH-PGDUMP 1\n"
_LENGTH = struct.Struct(">Q")
# The target has its own migration records (and refuses unknown ones); the postings are
# written by the keyword rows' triggers as those rows are loaded.
NOT_COPIED = ("schema_migrations", "memory_keyword_postings")


class PgSnapshots:
    """`DatabaseSnapshots` of one agent's PostgreSQL schema. `copy`'s `source` is the name the
    backup gives the database; the store copies the schema it is bound to."""

    def __init__(self, db: PgDatabase | None) -> None:
        self._db = db  # None: only `facts` (a snapshot file's header) can be asked

    @property
    def db(self) -> PgDatabase:
        if self._db is None:
            raise DatabaseError("No PostgreSQL store is open to copy from or load into.")
        return self._db

    # -- copy ---------------------------------------------------------------------------------

    def copy(self, source: Path, dest: Path) -> None:
        fd = dest.open("xb")  # a new file, never somebody else's
        dest.chmod(PRIVATE_FILE_MODE)
        with fd:
            digest = _HashingWriter(fd)
            digest.write(MAGIC)
            with self.db.transaction() as conn:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                header = self._header(conn)
                digest.write(json.dumps(header).encode() + b"\n")
                for table in header["tables"]:
                    columns = sql.SQL(", ").join(sql.Identifier(c) for c, _ in table["columns"])
                    statement = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT binary)")
                    with conn.cursor().copy(
                        statement.format(columns, sql.Identifier(table["name"]))
                    ) as out:
                        for data in out:
                            digest.write(_LENGTH.pack(len(data)) + bytes(data))
                    digest.write(_LENGTH.pack(0))
            fd.write(json.dumps({"sha256": digest.hexdigest()}).encode() + b"\n")
        _verify(dest)

    def _header(self, conn: Any) -> dict[str, Any]:
        schema = self.db.schema
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
                (schema,),
            )
        ]
        tables = []
        for name in _parents_first(conn, schema, names):
            if name in NOT_COPIED:
                continue
            columns = [
                [str(c), str(t)]
                for c, t in conn.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                    "ORDER BY attnum",
                    (f"{schema}.{name}",),
                )
            ]
            indexes = [
                str(r[0]).replace(f" ON {schema}.", " ON ")
                for r in conn.execute(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s "
                    "ORDER BY indexname",
                    (schema, name),
                )
            ]
            tables.append({"name": name, "columns": columns, "indexes": indexes})
        migrations: dict[str, list[str]] = {}
        for owner, migration in conn.execute(
            "SELECT owner, name FROM schema_migrations ORDER BY owner, applied_at, name"
        ):
            migrations.setdefault(str(owner), []).append(str(migration))
        counts: dict[str, int | None] = {}
        for label, (table, where) in COUNTED.items():
            needs = {table, "memory_generations"} if where else {table}
            counts[label] = (
                int(conn.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0])
                if needs <= set(names)
                else None
            )
        version = str(conn.execute("SHOW server_version").fetchone()[0])
        return {
            "schema": schema,
            "server_version": version,
            "migrations": migrations,
            "counts": counts,
            "tables": tables,
        }

    # -- facts --------------------------------------------------------------------------------

    def facts(self, path: Path) -> DatabaseFacts:
        header = read_header(path)
        return DatabaseFacts(
            dict(header["counts"]),
            {k: list(v) for k, v in header["migrations"].items()},
            engine=f"postgresql {header['server_version']}",
        )

    # -- load ---------------------------------------------------------------------------------

    def load(self, path: Path) -> None:
        """Load the copy at `path` into this store's schema, which must hold no sessions and no
        index (a fresh, migrated one): one transaction, so a failure leaves it as it was.
        Identity columns continue after the loaded ids."""
        header = _verify(path)
        with self.db.transaction() as conn, path.open("rb") as fd:
            _skip_header(fd)
            present = {
                str(r[0])
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                )
            }
            for busy in ("sessions", "memory_chunks"):
                if busy in present and conn.execute(f"SELECT 1 FROM {busy} LIMIT 1").fetchone():
                    raise DatabaseError(
                        f"The PostgreSQL schema {self.db.schema} already holds data ({busy}); "
                        "a backup is loaded only into an empty agent: use a new database or "
                        "drop the schema first."
                    )
            loaded = [t["name"] for t in header["tables"] if t["name"] in present]
            if loaded:  # what the migrations put there (one-row tables): replaced by the copy
                conn.execute(
                    sql.SQL("TRUNCATE {}").format(
                        sql.SQL(", ").join(sql.Identifier(n) for n in loaded)
                    )
                )
            for table in header["tables"]:  # parents before the tables referring to them
                name = sql.Identifier(table["name"])
                if table["name"] not in present:
                    conn.execute(_create_table(table))
                    for index in table["indexes"]:
                        conn.execute(index)
                columns = sql.SQL(", ").join(sql.Identifier(c) for c, _ in table["columns"])
                with conn.cursor().copy(
                    sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(name, columns)
                ) as into:
                    for data in _chunks(fd):
                        into.write(data)
            if "memory_keyword_df" in present and "memory_keyword_df" not in loaded:
                # A copy made before the table existed: its frequencies from the keyword rows.
                conn.execute(
                    "INSERT INTO memory_keyword_df (token, rows) SELECT t, count(*) FROM "
                    "memory_keywords, LATERAL (SELECT DISTINCT unnest(tokens) AS t) AS u GROUP BY t"
                )
            if "p001_cjk_bigram_keywords" not in header["migrations"].get("cjk_keywords", []):
                # A copy made before CJK bigram tokens (the schema's own migration ran on no
                # rows): its keyword rows rewritten as this code writes and reads them.
                p001_cjk_bigram_keywords(conn)
            if "p001_centroids_once" not in header["migrations"].get("centroids_once", []):
                # A copy made while centroids were kept three times (its generations' tables
                # made as it describes them): the bytea copies and the packs dropped, as the
                # schema's own migration drops them.
                p001_centroids_once(conn)
            _continue_identities(conn)


def _parents_first(conn: Any, schema: str, names: list[str]) -> list[str]:
    """`names` ordered so that a table comes after every table its foreign keys refer to."""
    parents: dict[str, set[str]] = {n: set() for n in names}
    for child, parent in conn.execute(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c "
        "JOIN pg_namespace n ON n.oid = c.connamespace WHERE c.contype = 'f' AND n.nspname = %s",
        (schema,),
    ):
        child, parent = str(child).rpartition(".")[2], str(parent).rpartition(".")[2]
        if child in parents and parent != child:
            parents[child].add(parent)
    ordered: list[str] = []
    while parents:
        ready = sorted(n for n, p in parents.items() if not p - set(ordered))
        if not ready:  # a cycle (none today): the rest in name order
            ready = sorted(parents)
        for n in ready:
            ordered.append(n)
            del parents[n]
    return ordered


def _create_table(table: dict[str, Any]) -> sql.Composed:
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in table["columns"]
    )
    return sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table["name"]), columns)


def _continue_identities(conn: Any) -> None:
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND is_identity = 'YES'"
    ).fetchall()
    for table, column in rows:
        conn.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence({t}, {c}), m) FROM "
                "(SELECT max({col}) AS m FROM {tab}) x WHERE m IS NOT NULL"
            ).format(
                t=sql.Literal(table),
                c=sql.Literal(column),
                col=sql.Identifier(column),
                tab=sql.Identifier(table),
            )
        )


# -- the file -----------------------------------------------------------------------------------


class _HashingWriter:
    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.hash = out, hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.hash.update(data)

    def hexdigest(self) -> str:
        return self.hash.hexdigest()


def _damaged(path: Path, why: str) -> DatabaseCorruptError:
    return DatabaseCorruptError(
        f"The PostgreSQL snapshot {path} is damaged ({why}); make the backup again "
        "(the database itself is untouched)."
    )


def _skip_header(fd: IO[bytes]) -> dict[str, Any]:
    if fd.readline() != MAGIC:
        raise DatabaseError(f"{fd.name} is not a Pinch PostgreSQL snapshot.")
    try:
        header: dict[str, Any] = json.loads(fd.readline())
    except ValueError as exc:
        raise _damaged(Path(fd.name), "unreadable header") from exc
    return header


def read_header(path: Path) -> dict[str, Any]:
    """The header of the snapshot at `path` (counts, migrations, tables)."""
    try:
        with path.open("rb") as fd:
            return _skip_header(fd)
    except OSError as exc:
        raise DatabaseError(f"Cannot read the snapshot {path}: {exc.strerror or exc}") from exc


def _chunks(fd: IO[bytes]) -> Iterator[bytes]:
    """One table's COPY data, chunk by chunk, up to its empty end chunk."""
    while True:
        head = fd.read(_LENGTH.size)
        if len(head) != _LENGTH.size:
            raise _damaged(Path(fd.name), "cut short")
        (size,) = _LENGTH.unpack(head)
        if size == 0:
            return
        data = fd.read(size)
        if len(data) != size:
            raise _damaged(Path(fd.name), "cut short")
        yield data


def _verify(path: Path) -> dict[str, Any]:
    """The header of the snapshot at `path` once its structure and checksum hold; else
    DatabaseCorruptError."""
    digest = hashlib.sha256()
    with path.open("rb") as fd:
        header = _skip_header(fd)
        end = fd.tell()
        fd.seek(0)
        digest.update(fd.read(end))
        for _table in header["tables"]:
            for data in _chunks(fd):
                digest.update(_LENGTH.pack(len(data)) + data)
            digest.update(_LENGTH.pack(0))
        try:
            trailer = json.loads(fd.readline())
        except ValueError as exc:
            raise _damaged(path, "no trailer") from exc
        if fd.read(1):
            raise _damaged(path, "data after the trailer")
    if trailer.get("sha256") != digest.hexdigest():
        raise _damaged(path, "checksum mismatch")
    return header


def known_pg_migrations() -> dict[str, set[str]]:
    """Every PostgreSQL migration this code knows, by set (what a snapshot may have applied)."""
    known: dict[str, set[str]] = {}
    for found in PG_SETS:
        known.setdefault(found.name, set()).update(m.__name__ for m in found.migrations)
    return known
