"""Scheduler precision under load: how late scheduled messages are delivered.

    .venv/bin/python bench/scheduler.py                      # 200 jobs in 2 min, 20 busy chats
    .venv/bin/python bench/scheduler.py --jobs 50 --window 20 --json

200 reminders (`--jobs`) due at random instants within the next 2 minutes (`--window`) run on
the real scheduler (APScheduler 3.x timer, the jobs tables in the agent database), while 20
conversations (`--busy`) keep a real Agent answering turn after turn (the anthropic SDK against
the scripted model server, transcripts written to the same database). Lateness is the time from
a job's due instant to the moment its message is handed to the channel. Target: p95 ≤ 1 s.
`loop_lag` is how late a 50 ms asyncio sleep wakes meanwhile: the floor the busy event loop puts
under any lateness (on a loaded machine, most of it). The jobs store uses the agent's own
connection, as the gateway does (a second connection through another SQLite library in one
process breaks SQLite's file locks: tried, and it damaged the file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from agent.agent_config import AgentConfig
from agent.model.factory import AnthropicClient
from agent.requests import AgentRequest
from app.automations.jobs import Jobs, NewJob, Schedule, Target
from app.automations.scheduler import Scheduler
from app.wiring import build_agent
from channels.base import OutboundMessage
from memory.index.index import MemoryIndex
from memory.memory_config import EmbeddingConfig, MemoryConfig
from memory.store.jobs_store import SqliteJobStore
from memory.store.sessions import SessionKey, SqliteSessionStore
from tests.fakes.model_server import FakeModelServer, text_reply

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_template"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def bench(jobs: int, window: float, busy: int, root: Path) -> dict[str, object]:
    workspace = root / "workspace"
    shutil.copytree(TEMPLATE, workspace)
    (workspace / "memory").mkdir(exist_ok=True)
    index = MemoryIndex.open(
        workspace, root / "agent.sqlite", MemoryConfig(embedding=EmbeddingConfig(provider="none"))
    )
    server = FakeModelServer().start()
    server.respond_with(lambda request: text_reply("Noted. " * 40))
    agent = build_agent(
        model=AnthropicClient("claude-test", api_key="k", base_url=server.url, max_retries=0),
        store=SqliteSessionStore(index.db),
        index=index,
        workspace=workspace,
        config=AgentConfig(model="claude-test"),
    )
    store = Jobs(SqliteJobStore(index.db))
    due: dict[str, datetime] = {}
    lateness: list[float] = []
    done = asyncio.Event()
    start = datetime.now(UTC)
    rng = random.Random(7)
    for i in range(jobs):
        when = start + timedelta(seconds=3 + rng.random() * (window - 3))
        text = f"reminder {i}"
        due[text] = when
        store.create(
            NewJob(
                Schedule("at", "x", "UTC", when),
                "reminder",
                text,
                Target("bench", "1"),
                "main:bench:direct:owner",
                owner_private=True,
            ),
            start,
        )

    async def deliver(message: OutboundMessage) -> None:
        lateness.append((datetime.now(UTC) - due[message.text]).total_seconds())
        if len(lateness) == jobs:
            done.set()

    async def no_turn(request: AgentRequest) -> str:
        return ""

    turns = 0
    stop = asyncio.Event()

    async def conversation(i: int) -> None:
        nonlocal turns
        key = SessionKey("main", "bench", "direct", f"person-{i}")
        while not stop.is_set():
            request = AgentRequest(key, f"message {turns} " + "words " * 50, sender="person")
            async for _ in agent.run(request):
                pass
            turns += 1

    lags: list[float] = []

    async def loop_lag() -> None:
        # How long a callback waits for the busy event loop: the floor under any lateness.
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append(time.monotonic() - before - 0.05)

    scheduler = Scheduler(store, deliver=deliver, run_turn=no_turn)
    probe = asyncio.ensure_future(loop_lag())
    chats = [asyncio.ensure_future(conversation(i)) for i in range(busy)]
    await scheduler.start()
    log(f"{jobs} jobs due within {window:.0f} s, {busy} busy conversations …")
    began = time.monotonic()
    try:
        await asyncio.wait_for(done.wait(), window + 60)
    finally:
        elapsed = time.monotonic() - began
        stop.set()
        await scheduler.stop()
        await asyncio.gather(*chats, probe, return_exceptions=True)
        server.stop()
        index.close()
    return {
        "jobs": jobs,
        "delivered": len(lateness),
        "window_s": window,
        "busy_conversations": busy,
        "agent_turns": turns,
        "turns_per_s": round(turns / elapsed, 1),
        "lateness_p50_s": round(statistics.median(lateness), 3),
        "lateness_p95_s": round(percentile(lateness, 95), 3),
        "lateness_max_s": round(max(lateness), 3),
        "early": sum(1 for x in lateness if x < 0),
        "loop_lag_p50_s": round(statistics.median(lags), 3),
        "loop_lag_p95_s": round(percentile(lags, 95), 3),
        "target_p95_s": 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--window", type=float, default=120.0, help="seconds")
    parser.add_argument("--busy", type=int, default=20, help="conversations answering meanwhile")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinch-bench-scheduler-") as tmp:
        result = asyncio.run(bench(args.jobs, args.window, args.busy, Path(tmp)))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, value in result.items():
            print(f"{name:>20}: {value}")


if __name__ == "__main__":
    main()
