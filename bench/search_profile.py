"""Where one search's milliseconds go: each step of `memory_search` timed on a latency scale
built by bench/speed.py (`--worker build`), new questions every time (query embeddings and term
counts forgotten, as speed.py's steady pass does).

    .venv/bin/python bench/search_profile.py --chunks 100000 --backend numpy
    .venv/bin/python bench/search_profile.py --quick          # 10 questions of a 1k scale

Passes over the same questions, alternating question by question: `serial` runs the vector side
inline (each step's own cost, no contention), `parallel:SCHEDULE` as a search runs with that
schedule (memory/search/schedule.py). Each step's wall time and its own thread's CPU time are
summed over its calls within one search and reported as p50 / p95 over the questions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import numpy as np

from bench import speed
from bench.synthetic import TextSource
from memory.search import candidates, hybrid, ranking
from memory.search import matrix_cache as matrix_module
from memory.search import schedule as schedule_module

REPO = Path(__file__).resolve().parents[1]


class _Timings:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: dict[str, float] = defaultdict(float)

    def add(self, name: str, ms: float) -> None:
        with self.lock:
            self.current[name] += ms

    def take(self) -> dict[str, float]:
        with self.lock:
            out, self.current = dict(self.current), defaultdict(float)
        return out


TIMINGS = _Timings()


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMINGS.add(name, 1000 * (time.perf_counter() - started))
            TIMINGS.add(name + " (CPU)", 1000 * (time.thread_time() - cpu))

    return wrapper


class _Inline:
    """An executor that runs what it is given at once, in the caller's thread."""

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            f.set_exception(exc)
        return f


@contextlib.contextmanager
def instrumented(index: Any, *, serial: bool, schedule: str) -> Iterator[None]:
    """Each step of the search pipeline wrapped with a timer (module attributes patched)."""
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        patches.append((owner, name, original))
        setattr(owner, name, _timed(label, original))

    for name in (
        "common_term_match",
        "keyword_candidates",
        "load_candidates",
        "best_chunk_coverage",
        "chunk_coverages",
        "rerank_by_lines",
        "mmr_select",
        "query_coverage",
        "keep_vector_best",
        "focused_snippet",
        "merge_hybrid",
        "vector_candidates",
    ):
        if hasattr(hybrid, name):
            patch(hybrid, name, name)
    patch(candidates, "vector_candidates", "vector_candidates")
    patch(schedule_module, "vector_candidates", "vector_candidates")
    patch(candidates, "chunk_vector_scores", "vector: passages re-scored")
    provider = index.provider
    patch(provider, "embed_query", "vector: query embedding")
    store_search = matrix_module.MatrixCache.search
    patches.append((matrix_module.MatrixCache, "search", store_search))
    matrix_module.MatrixCache.search = _timed("vector: centroid matrix", store_search)
    patches.append((schedule_module, "SCHEDULE", schedule_module.SCHEDULE))
    schedule_module.SCHEDULE = schedule
    if serial:
        patches.append((schedule_module, "_WORKERS", schedule_module._WORKERS))
        schedule_module._WORKERS = _Inline()  # type: ignore[assignment]
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def _forget(index: Any) -> None:
    getattr(index, "_query_cache", {}).clear()
    getattr(candidates, "_term_counts", {}).clear()
    getattr(candidates, "_newest_ids", {}).clear()
    ranking.text_stems.cache_clear()  # a new question's lines: none of their stems known yet


def profile(spec: dict[str, Any]) -> dict[str, Any]:
    index = speed._open_scale(spec)
    source = TextSource(99, rich=True)
    questions = [source.question() for _ in range(spec["queries"])]
    index.search("warm up the model and the matrix", preset=spec["preset"], record=False)
    for store in getattr(index, "_stores", {}).values():
        getattr(store, "wait_loaded", lambda timeout: True)(120)
    calibrate = getattr(index.provider, "calibrate_query_cores", None)
    cores = calibrate() if calibrate is not None else 1  # as the chat and the gateway do
    out: dict[str, Any] = {
        "backend": index.vector_backend,
        "questions": len(questions),
        "query_cores": cores,  # parallel:embed-first needs 2 (else it runs beside)
    }
    modes = spec["modes"]
    runs: dict[str, dict[str, Any]] = {
        m: {"steps": defaultdict(list), "walls": [], "cpus": []} for m in modes
    }
    for _ in range(spec["rounds"]):
        for q in questions:  # modes alternate question by question: the load hits each alike
            for mode in modes:
                kind, _, schedule = mode.partition(":")
                run = runs[mode]
                _forget(index)
                with instrumented(index, serial=(kind == "serial"), schedule=schedule or "beside"):
                    TIMINGS.take()
                    started, cpu = time.perf_counter(), time.process_time()
                    index.search(q, preset=spec["preset"], record=False)
                    run["walls"].append(1000 * (time.perf_counter() - started))
                    run["cpus"].append(1000 * (time.process_time() - cpu))
                    for name, ms in TIMINGS.take().items():
                        run["steps"][name].append(ms)
    n = len(questions) * spec["rounds"]
    for mode, run in runs.items():
        walls, cpus = run["walls"], run["cpus"]
        out[mode] = {
            "wall_p50_ms": float(np.percentile(walls, 50)),
            "wall_p95_ms": float(np.percentile(walls, 95)),
            "cpu_p50_ms": float(np.percentile(cpus, 50)),
            "cpu_p95_ms": float(np.percentile(cpus, 95)),
            "steps": {
                name: {
                    "p50_ms": float(np.percentile(v + [0.0] * (n - len(v)), 50)),
                    "p95_ms": float(np.percentile(v + [0.0] * (n - len(v)), 95)),
                    "mean_ms": float(sum(v) / n),
                }
                for name, v in sorted(run["steps"].items())
            },
        }
    index.close()
    return out


def answers(spec: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """Every preset's hits (path, lines, score to 6 places) for the questions, searched once."""
    from datetime import datetime

    from memory.search.presets import PRESETS

    index = speed._open_scale(spec)
    source = TextSource(99, rich=True)
    questions = [source.question() for _ in range(spec["queries"])]
    now = datetime(2026, 12, 2, 12, 0)
    # The steady state's answers: a large matrix's first pass is exact until its projection is
    # fitted in the background, so without the wait a question's hits depend on the timing.
    index.search("warm up the model and the matrix", record=False)
    for store in getattr(index, "_stores", {}).values():
        getattr(store, "wait_loaded", lambda timeout: True)(120)
    out = {
        name: [
            [
                (h.path, h.start_line, h.end_line, round(h.score, 6))
                for h in index.search(q, preset=name, now=now, record=False)
            ]
            for q in questions
        ]
        for name in sorted(PRESETS)
    }
    index.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="1k chunks, 10 questions")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--backend", default="numpy", choices=["numpy", "sqlite-vec"])
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "speed")
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--preset", default="pinch")
    p.add_argument(
        "--modes",
        default="serial,parallel:auto,parallel:embed-first,parallel:beside",
        help="serial (one thread), parallel:SCHEDULE (memory.search.schedule.SCHEDULE)",
    )
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument(
        "--dsn", help="profile the scale's schema on this PostgreSQL (bench/bulk_scale.py load)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--dump",
        type=Path,
        help="instead: write every preset's hits for the questions to this JSON file (to compare "
        "two trees' answers: run each with its PYTHONPATH)",
    )
    args = p.parse_args(argv)
    chunks, queries = (1_000, 10) if args.quick else (args.chunks, args.queries)
    spec = {
        "chunks": chunks,
        "backend": args.backend,
        "out": str(args.out),
        "fresh": False,
        "queries": queries,
        "preset": args.preset,
        "modes": args.modes.split(","),
        "rounds": args.rounds,
        "dsn": args.dsn,
    }
    db_path = args.out / f"scale-{chunks}" / f"index-{args.backend}.sqlite"
    if not args.dsn and not db_path.exists():
        speed.build_scale(spec)
    if args.dump:
        args.dump.write_text(json.dumps(answers(spec)), encoding="utf-8")
        return 0
    result = profile(spec)
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


def table(result: dict[str, Any]) -> str:
    """Markdown: one row per step; per mode its wall time and its own thread's CPU time, p50 /
    p95 ms over the questions (a step's CPU leaves out the engine threads it waits for)."""
    modes = [m for m in result if isinstance(result[m], dict)]
    head = f"{result['backend']}, {result['questions']} new questions"
    cols = [f"{m} {kind} p50 / p95 ms" for m in modes for kind in ("wall", "thread CPU")]
    lines = [f"| {head} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    names = sorted({n for m in modes for n in result[m]["steps"] if not n.endswith(" (CPU)")})

    def cell(mode: str, name: str) -> str:
        s = result[mode]["steps"].get(name)
        return f"{s['p50_ms']:.1f} / {s['p95_ms']:.1f}" if s else "—"

    for name in names:
        cells = [cell(m, n) for m in modes for n in (name, name + " (CPU)")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for m in modes:
        r = result[m]
        cells += [
            f"{r['wall_p50_ms']:.1f} / {r['wall_p95_ms']:.1f}",
            f"{r['cpu_p50_ms']:.1f} / {r['cpu_p95_ms']:.1f} (all threads)",
        ]
    lines.append("| **search** | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
