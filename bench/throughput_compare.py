"""First index of the synthetic chat log, this tree beside another, alternating, on a busy
machine: `bench/speed.py --worker throughput` (local model) and `--worker during` (a query's
embedding while the sync runs) from each tree, the order swapped every round, then medians.

    python bench/throughput_compare.py --old /tmp/old-tree --rounds 3            # 150 kB
    python bench/throughput_compare.py --old /tmp/old-tree --rounds 3 --quick    # 30 kB

`--old` is a checkout of the code to compare with (`git archive <commit> | tar -x -C DIR`),
given this tree's `bench/speed.py` so both report the same fields.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
FIELDS = {
    "throughput": ["sync_s", "chunks_per_s", "tokens_per_s", "peak_mb"],
    "during": ["sync_s", "during_p50_ms", "during_p95_ms", "during_max_ms", "idle_p50_ms"],
}


def run(tree: Path, kind: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, str(tree / "bench" / "speed.py"), "--worker", kind]
        cmd += ["--spec", json.dumps(spec), "--result", str(result)]
        if subprocess.run(cmd, check=False).returncode != 0:
            return None
        data: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
        return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a 30 kB log instead of 150 kB")
    p.add_argument("--kinds", default="throughput,during")
    p.add_argument("--new-first", action="store_true", help="this tree first in round 1")
    args = p.parse_args()
    size = 30_000 if args.quick else 150_000
    specs = {
        "throughput": {"provider": "local", "bytes": size},
        "during": {"bytes": size, "every_s": 0.25, "queries": 10},
    }
    trees = {"old": args.old, "new": HERE}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for kind in args.kinds.split(","):
            for name in ("old", "new") if (r + args.new_first) % 2 == 0 else ("new", "old"):
                data = run(trees[name], kind, specs[kind])
                if data is None:
                    print(r, name, kind, "failed", flush=True)
                    continue
                print(r, name, kind, {k: data.get(k) for k in FIELDS[kind]}, flush=True)
                runs.setdefault((kind, name), []).append(data)
    print("medians:")
    for (kind, name), ds in sorted(runs.items()):
        medians = {
            k: round(statistics.median(d[k] for d in ds if d.get(k) is not None), 1)
            for k in FIELDS[kind]
            if any(d.get(k) is not None for d in ds)
        }
        print(f"  {kind} {name}: {medians}")


if __name__ == "__main__":
    main()
