"""Is the `pinch memory index` progress bar's time-left estimate honest?

    .venv/bin/python bench/index_progress.py                 # a 1 MB workspace (minutes)
    .venv/bin/python bench/index_progress.py --bytes 300000  # a quicker variant

Indexes a generated workspace from an empty database with the default embedding model, through
the bar `pinch memory index` draws (`app.cli.index_progress_bar`, not displayed here), and at
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

from app.cli import INDEX_PROGRESS_LABEL, index_progress_bar
from bench.synthetic import TextSource, daily_note
from bench.workspace import write_workspace
from memory.config import MemoryConfig
from memory.index import MemoryIndex

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
    samples: list[tuple[float, int, int, float | None]] = []  # (t, done, total, time left)
    try:
        assert index.provider is not None, index.degraded_reason()
        loaded = time.perf_counter()  # the model loads before the bar appears
        with index_progress_bar(disable=True) as bar:
            task = bar.add_task(INDEX_PROGRESS_LABEL, total=None)

            def on_progress(done: int, total: int, path: str) -> None:
                bar.update(task, completed=done, total=total)
                samples.append((time.perf_counter(), done, total, bar.tasks[0].time_remaining))

            report = index.sync(on_progress=on_progress)
        finished = time.perf_counter()
    finally:
        index.close()
    rows = []
    prev = samples[0] if samples else None
    for mark in MARKS:
        at = next((s for s in samples if s[2] and 100 * s[1] / s[2] >= mark), None)
        if at is None:
            continue
        t, done, total, shown = at
        assert prev is not None
        rate = (done - prev[1]) / (t - prev[0]) if t > prev[0] else None
        prev = at
        rows.append(
            {
                "passages_per_s_since_last_mark": None if rate is None else round(rate, 1),
                "mark_pct": mark,
                "done": done,
                "total": total,
                "elapsed_s": round(t - loaded, 1),
                "shown_left_s": shown,
                "really_left_s": round(finished - t, 1),
            }
        )
    first_bar = samples[0][0] if samples else finished
    last_batch = next((s[0] for s in samples if s[1] == s[2] and s[2]), finished)
    return {
        "bytes": sum(len(t.encode("utf-8")) for t in files.values()),
        "notes": len(files),
        "chunks": report.chunks_embedded + report.chunks_from_cache,
        "passages_embedded": samples[-1][2] if samples else 0,
        "model_load_s": round(loaded - started, 1),
        "before_bar_s": round(first_bar - loaded, 1),  # discovery, chunking, cache lookup
        "after_bar_s": round(finished - last_batch, 1),  # rows, vectors, pack after 100 %
        "sync_s": round(report.seconds, 1),
        "first_batch_s": round(samples[1][0] - samples[0][0], 2) if len(samples) > 1 else None,
        "marks": rows,
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def print_table(result: dict[str, Any], console: Console) -> None:
    table = Table(
        title=(
            f"{result['bytes']:,} bytes, {result['notes']} notes, "
            f"{result['passages_embedded']:,} passages embedded; sync {result['sync_s']} s "
            f"(before the bar {result['before_bar_s']} s, after 100 % {result['after_bar_s']} s)"
        )
    )
    columns = ("bar", "passages", "elapsed s", "passages/s", "bar shows left s", "really left s")
    for col in (*columns, "error"):
        table.add_column(col, justify="right")
    for r in result["marks"]:
        shown, real = r["shown_left_s"], r["really_left_s"]
        error = f"{100 * (shown - real) / real:+.0f} %" if shown is not None and real else "—"
        table.add_row(
            f"{r['mark_pct']} %",
            f"{r['done']:,}/{r['total']:,}",
            f"{r['elapsed_s']}",
            f"{r['passages_per_s_since_last_mark']}",
            "—" if shown is None else f"{shown:.0f}",
            f"{real}",
            error,
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
    else:
        print_table(result, Console())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
