"""Many agents through several gateway processes: N agents (each its own bot token) x M sessions
(people talking to each bot) through K real `pinch gateway` processes sharing the agents by lease,
against one fake Telegram server holding every bot and the scripted model server (answering at
once, so what is measured is Pinch's own time).

    .venv/bin/python bench/scale.py --quick          # 6 agents x 5 sessions, 2 gateways
    .venv/bin/python bench/scale.py --agents 30 --sessions 10 --gateways 3 --rounds 3

Each round, every session sends one message (all at once), and the next round starts when every
message of the round is answered; a first round (not timed) warms up: the sessions are made and
each process has loaded the model SDK. Reported, from the bots' final message texts:
- messages/s: every message of every round over the time from the first round's first push to
  the last reply (the gateways' start-up not included);
- reply latency p50/p95: from the update being ready for getUpdates to the reply text on the
  platform: the long poll, de-duplication, the durable queue, the agent's context and turn, the
  streamed delivery — everything but the model, which answers at once ("gateway overhead");
- lost (no reply names the message) and duplicated (two or more replies name it): must be 0;
- 409 Conflicts (two processes polling one token): must be 0;
- per gateway: agents served, peak RSS (VmHWM), and the time until every agent was served at
  an even share (the rounds start then).

Offline; nice -n 10 it on a shared machine. The full target (1,000 agents x 50 sessions) needs
what the quick run's per-agent figures project (see bench/RESULTS.md): not run here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory.store.agent_leases import SqliteAgentLeaseStore  # noqa: E402
from memory.store.db import open_database  # noqa: E402
from tests.agent_support import responder  # noqa: E402
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply  # noqa: E402
from tests.fakes.telegram_fleet import FleetBot, TelegramFleet  # noqa: E402

TOKEN = re.compile(r"\bm-\d+-\d+-r\d+\b")
# The fakes are http.server's ThreadingHTTPServer, whose listen backlog is 5: at 100 agents the
# gateways' long polls, typing indicators and model calls overflow it and connections time out
# (a model turn failed "did not finish answering" 70 s into a run). The real Telegram and model
# APIs have no such limit: give the fakes a real backlog.
ThreadingHTTPServer.request_queue_size = 4096  # the kernel caps it at somaxconn


def echo_tokens(request: RecordedRequest) -> Reply:
    return text_reply("re: " + " ".join(TOKEN.findall(request.last_user_text())))


def setup(home: Path, tg: TelegramFleet, agents: int) -> dict[str, FleetBot]:
    bots = {}
    for i in range(agents):
        name = f"s{i:04d}"
        folder = home / "agents" / name
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text(
            f'[telegram]\napi_base_url = "{tg.url}"\ndm_policy = "open"\npoll_timeout_s = 5\n'
        )
        bots[name] = tg.add_bot(f"{100000 + i}:AAscale_{i:04d}_token_for_the_benchmark")
    return bots


def start_gateway(
    home: Path, model: FakeModelServer, bots: dict[str, FleetBot], log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PINCH_")},
        **{f"PINCH_AGENTS__{n.upper()}__TELEGRAM__BOT_TOKEN": b.token for n, b in bots.items()},
        "PINCH_HOME": str(home),
        "XDG_RUNTIME_DIR": str(home.parent / "xdg"),
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model.url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "PINCH_AGENT__RECALL_MODE": "triggers",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
        "PINCH_DREAMING__ENABLED": "false",
    }
    (home.parent / "xdg").mkdir(mode=0o700, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "gateway"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def holders(home: Path, names: list[str]) -> Counter[int]:
    found: Counter[int] = Counter()
    for name in names:
        path = home / "agents" / name / "agent.sqlite"
        if not path.exists():
            continue
        db = open_database(path, vector_backend="numpy")
        try:
            lease = SqliteAgentLeaseStore(db).current()
        finally:
            db.close()
        if lease is not None:
            found[lease.holder.pid] += 1
    return found


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def first_seen(bots: dict[str, FleetBot]) -> dict[str, float]:
    """When each message's token first appeared in a bot's message (sent or edited)."""
    seen: dict[str, float] = {}
    for bot in bots.values():
        for at, text in bot.history:
            for token in TOKEN.findall(text):
                seen.setdefault(token, at)
    return seen


def answered(bots: dict[str, FleetBot]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for bot in bots.values():
        for sent in bot.sent:
            counts.update(TOKEN.findall(sent.text))
    return counts


def run(agents: int, sessions: int, gateways: int, rounds: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="pinch-scale-"))
    home = work / "home"
    try:
        with FakeModelServer() as model, TelegramFleet() as tg:
            model.respond_with(responder(turn=echo_tokens))
            bots = setup(home, tg, agents)
            names = list(bots)
            began = time.monotonic()
            procs = [start_gateway(home, model, bots, work / f"gw{k}.log") for k in range(gateways)]
            try:
                wait(
                    lambda: (
                        sum(holders(home, names).values()) == agents
                        and all(b.polls for b in bots.values())
                    ),
                    600,
                    "every agent served",
                )
                # Settled: an even share (gateways that started first hand agents over) and a
                # fresh poll on every token since (the holders now serving are polling).
                fair = -(-agents // gateways)
                wait(lambda: max(holders(home, names).values()) <= fair, 600, "an even share")
                polls = {n: b.polls for n, b in bots.items()}
                wait(lambda: all(b.polls > polls[n] for n, b in bots.items()), 60, "fresh polls")
                served_after = time.monotonic() - began
                spread = holders(home, names)
                pushed: dict[str, float] = {}
                start = time.monotonic()
                warm: set[str] = set()
                for r in range(rounds + 1):  # round 0 warms up (sessions made, SDK loaded)
                    if r == 1:
                        warm, pushed = set(pushed), {}
                        start = time.monotonic()
                    batch = []
                    for i, bot in enumerate(bots.values()):
                        for s in range(sessions):
                            text = f"m-{i}-{s}-r{r}"
                            bot.push(bot.private_text(text, user_id=1000 + s))
                            pushed[text] = time.time()
                            batch.append(text)
                    wait(
                        lambda batch=batch: set(batch) <= set(answered(bots)),  # type: ignore[misc]
                        600,
                        f"round {r} answered",
                    )
                elapsed = time.monotonic() - start
                counts = answered(bots)
                seen = first_seen(bots)
                rss = [peak_rss_mb(p.pid) for p in procs]
            finally:
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                for p in procs:
                    try:
                        p.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        p.kill()
            latencies = sorted((seen[t] - pushed[t]) * 1000 for t in pushed if t in seen)
            total = len(pushed)
            every = [*warm, *pushed]
            return {
                "agents": agents,
                "sessions": sessions,
                "gateways": gateways,
                "messages": total,
                "messages_per_s": total / elapsed,
                "p50_ms": statistics.median(latencies),
                "p95_ms": latencies[int(len(latencies) * 0.95) - 1],
                "lost": sum(1 for t in every if counts[t] == 0),
                "duplicated": sum(1 for t in every if counts[t] > 1),
                "conflicts": len(tg.conflicts),
                "served_after_s": served_after,
                "agents_per_gateway": sorted(spread.values(), reverse=True),
                "peak_rss_mb": rss,
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 agents x 5 sessions, 2 gateways")
    parser.add_argument("--agents", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--gateways", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.agents, args.sessions, args.gateways, args.rounds = 6, 5, 2, 2
    r = run(args.agents, args.sessions, args.gateways, args.rounds)
    rss = ", ".join(f"{mb:.0f}" for mb in r["peak_rss_mb"])  # type: ignore[attr-defined]
    print(
        f"{r['agents']} agents x {r['sessions']} sessions through {r['gateways']} gateways, "
        f"{r['messages']} messages\n"
        f"  messages/s        {r['messages_per_s']:.1f}\n"
        f"  reply latency     p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms "
        "(model answers at once: the gateway's and agent's own time)\n"
        f"  lost {r['lost']}, duplicated {r['duplicated']}, 409 conflicts {r['conflicts']}\n"
        f"  every agent served {r['served_after_s']:.1f} s after start; agents per gateway "
        f"{r['agents_per_gateway']}\n"
        f"  peak RSS per gateway (MB): {rss}"
    )


if __name__ == "__main__":
    main()
