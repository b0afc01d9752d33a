"""What a full garbage collection costs a long-running process, before and after the warm-up
freezes what is loaded (memory/search/schedule.py `calibrate_after_load`): a latency scale built
by bench/speed.py opened as the chat and the gateway open it, searched once, warmed, and
`gc.collect()` timed before the warm-up ends and after.

    .venv/bin/python bench/gc_pause.py --chunks 100000 --out DIR    # DIR/scale-100000/…
    .venv/bin/python bench/gc_pause.py --chunks 1000                 # builds a small scale

Prints JSON: objects the collector tracks, and each full collection's ms (median of five),
before (the model, the index and its caches all walked) and after (only what came since).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench import speed

REPO = Path(__file__).resolve().parents[1]


def full_collections(rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        gc.collect()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--chunks", type=int, default=1000)
    p.add_argument("--backend", default="numpy", choices=["numpy", "sqlite-vec"])
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "speed")
    args = p.parse_args(argv)
    spec = {"chunks": args.chunks, "backend": args.backend, "out": str(args.out), "fresh": False}
    db_path = speed._scale_paths(spec)[1]
    if not db_path.exists():
        speed.build_scale(spec)
    index = speed._open_scale(spec)
    index.search("the first question loads the model and the matrix", record=False)
    for store in getattr(index, "_stores", {}).values():
        getattr(store, "wait_loaded", lambda timeout: True)(120)
    out = {"chunks": args.chunks, "tracked_objects": len(gc.get_objects())}
    out["full_collection_ms_before"] = full_collections()
    index.warm()
    for thread in threading.enumerate():
        if thread.name == "warm-up":
            thread.join(300)
    out["frozen_objects"] = gc.get_freeze_count()
    out["full_collection_ms_after"] = full_collections()
    index.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
