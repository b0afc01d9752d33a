"""CJK bigrams as index tokens (issues 20/22/19): the keyword side of Chinese questions on the
old layout (one token per CJK character, a bigram a two-token phrase) beside the new one (each
CJK run as its bigrams and its last character, memory/text.py `fts_body`), and what the upgrade
of an existing database costs.

    python bench/cjk_keywords.py upgrade SRC.sqlite OUT_DIR   # copy, time the migration, sizes
    python bench/cjk_keywords.py keywords OLD.sqlite NEW.sqlite [--rounds 5]
    python bench/cjk_keywords.py --quick                        # both on a 2k-chunk build

`upgrade` copies SRC (main's layout) to OUT_DIR/new.sqlite, opens the copy with this tree (the
"cjk_keywords" migration rewrites the keyword index) and reports its time and the FTS5 tables'
sizes before and after (dbstat), beside what indexing every CJK character as well would take.
`keywords` runs the keyword side of the Chinese questions of bench/speed.py's latency set
(`TextSource(99, rich=True)`, preset `pinch`) on OLD with the old expressions and on NEW with
today's, alternating question by question, each step's thread CPU (`time.thread_time`), the
term counts forgotten before every question; it checks that both return the same chunks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.synthetic import TextSource
from common.text import strip_comments
from memory.search import candidates
from memory.search.presets import PINCH
from memory.store.db import Database, _load_driver, open_database
from memory.store.search_queries import SqliteSearchQueries
from memory.text import _CJK_RUN, CJK_CHAR, fts_body, fts_match_expression, query_terms

FTS = "body, content = '', tokenize = 'porter unicode61 remove_diacritics 2'"


def old_body(text: str) -> str:
    """The keyword body before this change: every CJK character its own token."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group(0)) + " ", strip_comments(text))


def unigrams_too_body(text: str) -> str:
    """The alternative measured: bigrams and every character (a one-character query a token)."""
    return _CJK_RUN.sub(
        lambda m: " " + " ".join([*m.group(0), *(m.group(0)[i : i + 2] for i in range(
            len(m.group(0)) - 1))]) + " ",
        strip_comments(text),
    )  # fmt: skip


def old_expression(terms: list[str], *, operator: str = "OR") -> str | None:
    """The expression before this change: a CJK bigram a two-token phrase."""
    if not terms:
        return None
    quoted = [" ".join(t) if CJK_CHAR.match(t) else t for t in terms]
    return f" {operator} ".join('"' + t.replace('"', '""') + '"' for t in quoted)


def fts_sizes(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'memory_fts%' GROUP BY name"
    ).fetchall()
    total = conn.execute("SELECT page_count * page_size FROM pragma_page_count, pragma_page_size")
    out = {str(n): int(s) for n, s in rows}
    out["file"] = int(total.fetchone()[0])
    conn.close()
    return out


def alternative_sizes(path: Path, scratch: Path) -> dict[str, Any]:
    """FTS5 sizes of each layout, built from `path`'s chunk texts into a scratch file."""
    src = sqlite3.connect(path)
    out: dict[str, Any] = {}
    for name, body in (("old", old_body), ("new", fts_body), ("unigrams_too", unigrams_too_body)):
        scratch.unlink(missing_ok=True)
        conn = sqlite3.connect(scratch)
        conn.execute(f"CREATE VIRTUAL TABLE f USING fts5({FTS})")
        tokens, start = 0, time.perf_counter()
        for chunk_id, text in src.execute("SELECT id, text FROM memory_chunks ORDER BY id"):
            made = body(text)
            tokens += len(made.split())
            conn.execute("INSERT INTO f(rowid, body) VALUES (?, ?)", (chunk_id, made))
        conn.commit()
        size = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'f%'"
        ).fetchone()[0]  # fmt: skip
        out[name] = {"fts_bytes": int(size), "tokens_split": tokens,
                     "build_s": round(time.perf_counter() - start, 1)}  # fmt: skip
        conn.close()
    scratch.unlink(missing_ok=True)
    return out


def upgrade(src: Path, out: Path, alternatives: bool = True) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    copy = out / "new.sqlite"
    shutil.copyfile(src, copy)
    before = fts_sizes(copy)
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    db = open_database(copy, vector_backend="numpy")
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    chunks = int(db.execute("SELECT count(*) FROM memory_chunks")[0][0])
    check = db.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 0)")
    db.conn.execute("VACUUM")
    db.close()
    result: dict[str, Any] = {
        "chunks": chunks,
        "migration_wall_s": round(wall, 1),
        "migration_cpu_s": round(cpu, 1),
        "integrity_check": "ok" if check == [] else check,
        "fts_before": before,
        "fts_after_vacuum": fts_sizes(copy),
    }
    if alternatives:
        result["layouts"] = alternative_sizes(copy, out / "scratch.sqlite")
    return result


def raw_database(path: Path) -> Database:
    """`path` opened without migrating it (an old layout stays old)."""
    driver, name = _load_driver(False)
    conn = driver.connect(str(path), isolation_level=None, check_same_thread=False)
    version = conn.execute("SELECT sqlite_version()").fetchone()[0]
    return Database(path=path, conn=conn, driver=name, sqlite_version=version, vec_version=None)


def _keyword_side(
    db: Database, question: str, expression: Callable[..., str | None]
) -> tuple[float, float, list[int]]:
    """Thread CPU ms of the term counts and of bm25's ranking, and the chunks found."""
    queries = SqliteSearchQueries(db)
    generation = int(db.execute("SELECT max(id) FROM memory_generations")[0][0])
    terms = query_terms(question)[:32]
    candidates._term_counts.clear()
    real = candidates.fts_match_expression
    candidates.fts_match_expression = expression
    try:
        start = time.thread_time()
        match = candidates.common_term_match(queries, generation, terms, 0.05)
        counted = time.thread_time()
        pool = max(PINCH.candidate_multiplier * PINCH.max_results, PINCH.min_candidates)
        found = candidates.keyword_candidates(
            queries, generation, match or "", pool, [""], PINCH.keyword_rank_cap
        ) if match else []  # fmt: skip
        ranked = time.thread_time()
    finally:
        candidates.fts_match_expression = real
    return 1000 * (counted - start), 1000 * (ranked - counted), [i for i, _ in found]


def keywords(old: Path, new: Path, rounds: int, questions: int = 30) -> dict[str, Any]:
    source = TextSource(99, rich=True)
    asked = [source.question() for _ in range(questions + 1)]
    chinese = [q for q in asked if CJK_CHAR.search(q)]
    dbs = {"old": raw_database(old), "new": raw_database(new)}
    exprs = {"old": old_expression, "new": fts_match_expression}
    per: dict[str, dict[str, list[float]]] = {k: {"counts": [], "bm25": []} for k in dbs}
    same, differing = 0, set()
    by_question: dict[str, list[float]] = {}
    for _ in range(rounds):
        for q in chinese:
            found = {}
            for layout in ("old", "new"):
                counts, bm25, found[layout] = _keyword_side(dbs[layout], q, exprs[layout])
                per[layout]["counts"].append(counts)
                per[layout]["bm25"].append(bm25)
                by_question.setdefault(f"{layout}: {q}", []).append(counts + bm25)
            same += found["old"] == found["new"]
            if found["old"] != found["new"]:
                differing.add(q)
    for db in dbs.values():
        db.close()

    out: dict[str, Any] = {
        "questions": chinese,
        "rounds": rounds,
        "same_chunks": f"{same}/{rounds * len(chinese)}",
        "differing": sorted(differing),
        "per_question_total_ms_p50": {
            k: round(statistics.median(v), 2) for k, v in sorted(by_question.items())
        },
    }
    for layout, steps in per.items():
        steps["total"] = [a + b for a, b in zip(steps["counts"], steps["bm25"], strict=True)]
        for step, values in steps.items():
            out[f"{layout}_{step}_ms_p50_p95"] = _p50_p95(values)
    return out


def _p50_p95(values: list[float]) -> list[float]:
    ordered = sorted(values)
    return [round(statistics.median(ordered), 2), round(ordered[int(0.95 * (len(ordered) - 1))], 2)]


def quick_build(folder: Path, chunks: int) -> tuple[Path, Path]:
    """Two keyword-only databases of the same synthetic chunks, old and new layout."""
    source = TextSource(chunks, rich=True)
    texts = [" ".join(source.sentence(0.3) for _ in range(6)) for _ in range(chunks)]
    paths = []
    for name, body in (("old", old_body), ("new", fts_body)):
        path = folder / f"{name}.sqlite"
        db = open_database(path, vector_backend="numpy")
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_generations(identity, state, created_at) "
                "VALUES ('{}', 'active', 0)"
            )
            conn.execute("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")
            for i, text in enumerate(texts, start=1):
                conn.execute(
                    "INSERT INTO memory_chunks(id, generation, path, source, origin, start_line, "
                    "end_line, hash, text) VALUES (?, 1, 'a.md', 'memory', 'owner', ?, ?, 'h', ?)",
                    (i, i, i, text),
                )
                conn.execute("INSERT INTO memory_fts(rowid, body) VALUES (?, ?)", (i, body(text)))
            if name == "old":  # as main left it: the upgrade still to come
                conn.execute("DELETE FROM schema_migrations WHERE owner = 'cjk_keywords'")
        db.close()
        paths.append(path)
    return paths[0], paths[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["upgrade", "keywords"])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-alternatives", action="store_true")
    parser.add_argument("--quick", action="store_true", help="2k synthetic chunks, < 1 min")
    args = parser.parse_args()
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            old, new = quick_build(Path(tmp), 2000)
            result = {"quick_2k": keywords(old, new, rounds=3)}
            result["upgrade_2k"] = upgrade(old, Path(tmp) / "up")
    elif args.command == "upgrade":
        result = upgrade(args.paths[0], args.paths[1], not args.no_alternatives)
    elif args.command == "keywords":
        result = keywords(args.paths[0], args.paths[1], args.rounds)
    else:
        parser.error("a command or --quick")
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
