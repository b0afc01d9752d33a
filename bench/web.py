"""Server time of the web page's six pages with many sessions and chunks, and /memory/search
beside the CLI's own search (`MemoryIndex.search`, what `pinch memory search` calls).

    .venv/bin/python bench/web.py --quick    # 1,000 sessions, 10k chunks (under a minute once
                                             # its data is built: the first run, ~2 min)
    .venv/bin/python bench/web.py            # 10,000 sessions, 100k chunks
    .venv/bin/python bench/web.py --json

The pages run as `pinch gateway` serves them (the real templates and handlers over a real
`Runtime` from the composition root), on an aiohttp test server at 127.0.0.1; a middleware
times each handler (server time: from the request's arrival to the response rendered, without
the network). Memory is keyword-only (`[memory.embedding] provider = "none"`): the page's own
cost is measured, not the embedding model's. Workspaces and databases go to bench/out/web-*.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from rich.console import Console
from rich.table import Table

from app.config import Settings
from app.web.context import WebContext
from app.web.server import NAV, PAGE_MODULES, make_templates
from app.wiring import build_runtime
from bench.speed import scale_files
from bench.workspace import write_workspace
from memory.memory_config import MemoryConfig
from memory.store.sessions import SessionKey, SqliteSessionStore

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("dentist appointment", "train tickets", "birthday present", "project deadline")
EVENTS_PER_SESSION = 2
Result = dict[str, Any]


def _settings(home: Path) -> Settings:
    return Settings(
        home=home,
        agent={"model": "claude-test", "timezone": "Europe/Berlin"},
        memory={"embedding": {"provider": "none"}},
    )


def prepare(home: Path, chunks: int, sessions: int) -> Result:
    """The workspace of `chunks` chunks and `sessions` sessions (reused when already there)."""
    settings = _settings(home)
    config = MemoryConfig()
    files, count, _ = scale_files(chunks, config.chunking.tokens, config.chunking.overlap)
    files["MEMORY.md"] = "# MEMORY.md\n\n- The owner lives in Lisbon.\n- Prefers window seats.\n"
    write_workspace(settings.workspace_dir, files)
    started = time.perf_counter()
    from memory.index.index import MemoryIndex

    index = MemoryIndex.open(settings.workspace_dir, settings.database_path, settings.memory)
    try:
        index.sync()
        store = SqliteSessionStore(index.db)
        have = len(store.all_sessions())
        for n in range(have, sessions):
            channel = ("telegram", "slack", "cli")[n % 3]
            key = SessionKey("main", channel, "direct", f"person{n:05d}")
            session = store.current(key)
            for i in range(EVENTS_PER_SESSION):
                kind = "user" if i % 2 == 0 else "assistant"
                usage = (
                    None
                    if kind == "user"
                    else {
                        "input_tokens": 120,
                        "output_tokens": 40,
                        "cache_read_tokens": 900,
                        "cache_write_tokens": 0,
                    }
                )
                store.append(session.id, kind, {"text": f"message {i} of {n}"}, usage)
        chunk_count = index.status().chunks
    finally:
        index.close()
    return {
        "chunks": chunk_count,
        "planned_chunks": count,
        "sessions": sessions,
        "prepare_s": time.perf_counter() - started,
    }


def _timed() -> tuple[Callable[..., Awaitable[web.StreamResponse]], dict[str, list[float]]]:
    times: dict[str, list[float]] = {}

    @web.middleware
    async def timing(request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.perf_counter()
        response: web.StreamResponse = await handler(request)
        label = request.get("bench_label", request.path)
        times.setdefault(label, []).append((time.perf_counter() - started) * 1000)
        return response

    return timing, times


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def measure(home: Path, rounds: int) -> Result:
    settings = _settings(home)
    runtime = await build_runtime(settings)
    try:
        await runtime.sync_index()
        ctx = WebContext(settings, runtime, make_templates())
        ctx.globals["nav"] = NAV
        timing, times = _timed()
        app = web.Application(middlewares=[timing])
        for module in PAGE_MODULES:
            module.add_routes(app, ctx)
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        sid = runtime.store.all_sessions()[-1].id
        pages = {
            "/memory": "/memory",
            "/memory/file (MEMORY.md)": "/memory/file?path=MEMORY.md",
            "/dreams": "/dreams",
            "/sessions": "/sessions",
            "/sessions?page=10": "/sessions?page=10",
            "/sessions?channel=slack": "/sessions?channel=slack",
            "/sessions/{id}": f"/sessions/{sid}",
            "/sessions/{id}/forget (preview)": f"/sessions/{sid}/forget",
            "/access": "/access",
            "/automations": "/automations",
            "/health": "/health",
        }
        measured: dict[str, list[float]] = {}
        try:
            for label, path in pages.items():
                times.clear()
                for _ in range(rounds):
                    response = await client.get(path)
                    assert response.status == 200, (path, response.status, await response.text())
                    await response.read()
                measured[label] = times.pop(path.split("?")[0])
            search_page: list[float] = []
            search_cli: list[float] = []
            for i in range(rounds):
                q = QUERIES[i % len(QUERIES)]
                times.clear()
                response = await client.get(f"/memory/search?q={q}&preset=keyword")
                assert response.status == 200
                await response.read()
                search_page.append(times.pop("/memory/search")[0])
                started = time.perf_counter()
                await asyncio.to_thread(runtime.index.search, q, preset="keyword")
                search_cli.append((time.perf_counter() - started) * 1000)
            measured["/memory/search"] = search_page
        finally:
            await client.close()
    finally:
        await runtime.aclose()
    rows = {
        label: {"p50": statistics.median(v), "p95": _pct(v, 95), "n": len(v)}
        for label, v in measured.items()
    }
    return {
        "pages": rows,
        "search": {
            "page_p50": statistics.median(search_page),
            "page_p95": _pct(search_page, 95),
            "cli_p50": statistics.median(search_cli),
            "cli_p95": _pct(search_cli, 95),
        },
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 sessions and 10k chunks")
    p.add_argument("--rounds", type=int, default=None, help="requests per page")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    p.add_argument("--fresh", action="store_true", help="rebuild the workspace and database")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    chunks, sessions = (10_000, 1_000) if args.quick else (100_000, 10_000)
    rounds = args.rounds or (20 if args.quick else 40)
    home = args.out / f"web-{sessions}s-{chunks}c"
    if args.fresh and home.exists():
        shutil.rmtree(home)
    console = Console(stderr=True)
    console.print(f"preparing {sessions:,} sessions and {chunks:,} chunks in {home} …")
    built = prepare(home, chunks, sessions)
    console.print(f"ready in {built['prepare_s']:.1f} s; measuring ({rounds} requests a page) …")
    result = {**built, "rounds": rounds, **asyncio.run(measure(home, rounds))}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(
        title=f"server time per page, {built['sessions']:,} sessions, "
        f"{built['chunks']:,} chunks (ms)"
    )
    for column in ("page", "p50", "p95"):
        table.add_column(column, justify="left" if column == "page" else "right")
    for label, row in result["pages"].items():
        table.add_row(label, f"{row['p50']:.1f}", f"{row['p95']:.1f}")
    Console().print(table)
    s = result["search"]
    Console().print(
        f"/memory/search p50 {s['page_p50']:.1f} ms, p95 {s['page_p95']:.1f} ms; the CLI's own "
        f"search p50 {s['cli_p50']:.1f} ms, p95 {s['cli_p95']:.1f} ms; the page adds "
        f"{s['page_p50'] - s['cli_p50']:.1f} ms at p50, {s['page_p95'] - s['cli_p95']:.1f} ms "
        "at p95"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
