"""Is the `pinch memory index` progress bar's time-left estimate honest?

    .venv/bin/python bench/index_progress.py                 # a 1 MB workspace (minutes)
    .venv/bin/python bench/index_progress.py --bytes 300000  # a quicker variant

Indexes a generated workspace from an empty database with the default embedding model, through
the bar `pinch memory index` draws (`app.cli.memory_commands.index_progress_bar`, not displayed
here), and at
10/25/50/75/90 % of the bar records the time left it would show (rich's `task.time_remaining`)
against the time that really remained until the index was done. Prints a table (and --json).

Workspace: daily notes, `daily_note(source, day, source.rng.randint(3, 12))` with
`source = TextSource(2024, rich=True)`, one a day from 2024-01-01 until `--bytes` (1 MB = 389
notes), the generator bench/RESULTS.md used for its 1 MB index timing.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from rich.console import Console
from rich.table import Table

from app.cli.memory_commands import INDEX_PROGRESS_LABEL, index_progress_bar
from bench.synthetic import TextSource, daily_note
from bench.workspace import write_workspace
from memory.index.index import MemoryIndex
from memory.memory_config import MemoryConfig

MARKS = (10, 25, 50, 75, 90)


def notes(total_bytes: int) -> dict[str, str]:
    source = TextSource(2024, rich=True)
    files: dict[str, str] = {}
    size, day = 0, date(2024, 1, 1)
    while size < total_bytes:
        text = daily_note(source, day, source.rng.randint(3, 12))
        files[f"memory/{day.isoformat()}.md"] = text
        size += len(text.encode("utf-8"))
        day += timedelta(days=1)
    return files


def run(total_bytes: int, workdir: Path) -> dict[str, Any]:
    files = notes(total_bytes)
    workspace = workdir / "workspace"
    write_workspace(workspace, files)
    started = time.perf_counter()
    index = MemoryIndex.open(workspace, workdir / "agent.sqlite", MemoryConfig())
    # (wall time, CPU time of the process, done, total, the time left the bar shows)
    samples: list[tuple[float, float, int, int, float | None]] = []
    try:
        assert index.provider is not None, index.degraded_reason()
        loaded = time.perf_counter()  # the model loads before the bar appears
        with index_progress_bar(disable=True) as bar:
            task = bar.add_task(INDEX_PROGRESS_LABEL, total=None)

            def on_progress(done: int, total: int, path: str) -> None:
                bar.update(task, completed=done, total=total)
                now, cpu = time.perf_counter(), time.process_time()
                samples.append((now, cpu, done, total, bar.tasks[0].time_remaining))

            report = index.sync(on_progress=on_progress)
        finished = time.perf_counter()
        chunks = index.status().chunks
    finally:
        index.close()
    rows = []
    prev = samples[0] if samples else None
    for mark in MARKS:
        at = next((s for s in samples if s[3] and 100 * s[2] / s[3] >= mark), None)
        if at is None:
            continue
        t, cpu, done, total, shown = at
        assert prev is not None
        rate = (done - prev[2]) / (t - prev[0]) if t > prev[0] else None
        cpu_ms = 1000 * (cpu - prev[1]) / (done - prev[2]) if done > prev[2] else None
        prev = at
        # The alternative: the average rate since the first batch (rich's window: the last 30 s).
        whole = (done - samples[0][2]) / (t - samples[0][0]) if t > samples[0][0] else None
        rows.append(
            {
                "mark_pct": mark,
                "done": done,
                "total": total,
                "elapsed_s": round(t - loaded, 1),
                "passages_per_s_since_last_mark": None if rate is None else round(rate, 1),
                "cpu_ms_per_passage_since_last_mark": None if cpu_ms is None else round(cpu_ms),
                "shown_left_s": shown,
                "whole_run_rate_left_s": round((total - done) / whole) if whole else None,
                "really_left_s": round(finished - t, 1),
            }
        )
    first_bar = samples[0][0] if samples else finished
    last_batch = next((s[0] for s in samples if s[2] == s[3] and s[3]), finished)
    return {
        "bytes": sum(len(t.encode("utf-8")) for t in files.values()),
        "notes": len(files),
        "chunks": chunks,
        "passages_embedded": samples[-1][3] if samples else 0,
        "model_load_s": round(loaded - started, 1),
        "before_bar_s": round(first_bar - loaded, 1),  # discovery, chunking, cache lookup
        "after_bar_s": round(finished - last_batch, 1),  # rows, vectors, pack after 100 %
        "sync_s": round(report.seconds, 1),
        "cpu_s": round(time.process_time(), 1),
        "marks": rows,
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def print_table(result: dict[str, Any], console: Console) -> None:
    table = Table(
        title=(
            f"{result['bytes']:,} bytes, {result['notes']} notes, "
            f"{result['chunks']:,} chunks, {result['passages_embedded']:,} passages embedded; "
            f"sync {result['sync_s']} s, CPU {result['cpu_s']} s "
            f"(before the bar {result['before_bar_s']} s, after 100 % {result['after_bar_s']} s)"
        )
    )
    columns = ("bar", "passages", "elapsed s", "passages/s", "CPU ms/passage", "bar shows left s")
    for col in (*columns, "error", "whole-run rate: left s", "error", "really left s"):
        table.add_column(col, justify="right")

    def error(estimate: float | None, real: float) -> str:
        return f"{100 * (estimate - real) / real:+.0f} %" if estimate is not None and real else "—"

    for r in result["marks"]:
        shown, whole, real = r["shown_left_s"], r["whole_run_rate_left_s"], r["really_left_s"]
        table.add_row(
            f"{r['mark_pct']} %",
            f"{r['done']:,}/{r['total']:,}",
            f"{r['elapsed_s']}",
            f"{r['passages_per_s_since_last_mark']}",
            f"{r['cpu_ms_per_passage_since_last_mark']}",
            "—" if shown is None else f"{shown:.0f}",
            error(shown, real),
            "—" if whole is None else f"{whole}",
            error(whole, real),
            f"{real}",
        )
    console.print(table)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=1_000_000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinch-index-progress-") as tmp:
        result = run(args.bytes, Path(tmp))
    if args.json:
        print(json.dumps(result))
    print_table(result, Console(stderr=args.json, width=150))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
