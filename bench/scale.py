"""Many agents through several gateway processes: N agents (each its own bot token) x M sessions
(people talking to each bot) through K real `pinch gateway` processes sharing the agents by lease,
against a fake Telegram holding every bot and fake model servers answering at once — the fakes
in processes of their own, on aiohttp (bench/scale_fakes.py), so what is measured is Pinch's own
time, not the harness's.

    .venv/bin/python bench/scale.py --quick          # 6 agents x 5 sessions, 2 gateways (< 1 min)
    nice -n 15 .venv/bin/python bench/scale.py --agents 1000 --sessions 50 --gateways 3
    # a burst, before/after: the same run with the gateways of another checkout
    nice -n 10 .venv/bin/python bench/scale.py --agents 334 --sessions 5 --gateways 1 \
        --paced 0 --fakes-nice 0 --gateway-code /path/to/main

The run: the gateways start together on a fresh home; once every agent is served (its token
polled) at an even share (no gateway above ceil(N / K) agents, read from the agents' leases),
- warm-up: one message to each agent (its model client made, the SDK loaded);
- burst: every session sends one message at the same instant (`--rounds` times, the next round
  when every message of the last is answered) — throughput;
- paced: `--paced` messages spread evenly over time at `--rate` a second (default: a third of
  the burst's rate, below capacity, as people send), to random sessions — the per-message
  overhead without a burst's queue.

Reported:
- messages/s of the burst: its messages over the time from the push to the last reply;
- CPU per message: the gateways' CPU time (user + system, /proc) over the burst, per message;
- gateway overhead p50/p95, burst and paced: from a getUpdates answer carrying the message
  (fetched) to the reply's text reaching Telegram (sent or edited), minus the model call that
  carried it (the model fake times it): the long poll's hand-over, de-duplication, the durable
  queue, the agent's context and turn, the streamed delivery. In a burst it includes the wait
  behind the other messages of the burst; paced, it is one message's own cost. Also end to end
  (pushed to replied);
- failed: turns that ended in an error notice (a bot message naming no message: "Could not
  connect to the model server…") — a round ends when every message is answered or failed, or
  after `--stall-s` without either (what is left then is lost);
- lost (no final bot message names the message, failed ones apart) and duplicated (two or more
  do): must be 0, warm-up and paced included; 409 Conflicts (two processes polling one token):
  must be 0;
- start-up: until every agent is served, and until the share is even; per gateway: agents,
  resident memory at the even share and peak (VmHWM), and the fakes' CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory.store.agent_leases import SqliteAgentLeaseStore  # noqa: E402
from memory.store.db import open_database  # noqa: E402

FAKES = ROOT / "bench" / "scale_fakes.py"
TICK = os.sysconf("SC_CLK_TCK")


def raise_fd_limit(want: int = 65536) -> int:
    """As many descriptors as the hard limit allows (the gateways inherit it): ~3 an agent
    (its database, its long poll, its reply connection) plus the model connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


class Fake:
    """One fake server process (bench/scale_fakes.py)."""

    def __init__(self, kind: str, work: Path, log: Path, nice: int | None = None) -> None:
        port_file = work / f"{kind}-{id(self)}.port"
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKES), kind, "--port-file", str(port_file)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        if nice is not None:  # the fakes stand for Telegram's and the model's servers: not
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, nice)  # starved with the gateways
        wait(lambda: port_file.exists() and port_file.read_text().strip() != "", 60, kind)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"
        self.http = httpx.Client(base_url=self.url, timeout=120)

    def get(self, path: str) -> Any:
        return self.http.get(path).raise_for_status().json()

    def post(self, path: str, body: object) -> Any:
        return self.http.post(path, json=body).raise_for_status().json()

    def stop(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def setup(home: Path, telegram: Fake, agents: int, poll_s: int) -> dict[str, str]:
    tokens = {}
    for i in range(agents):
        name = f"s{i:04d}"
        folder = home / "agents" / name
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text(
            f'[telegram]\napi_base_url = "{telegram.url}"\ndm_policy = "open"\n'
            f"poll_timeout_s = {poll_s}\n"
        )
        tokens[name] = f"{100000 + i}:AAscale_{i:04d}_token_for_the_benchmark"
    telegram.post("/_scale/bots", {"tokens": list(tokens.values())})
    return tokens


def start_gateway(
    home: Path,
    model_url: str,
    tokens: dict[str, str],
    log: Path,
    args: argparse.Namespace,
    profile: Path | None = None,
) -> subprocess.Popen[bytes]:
    code = args.gateway_code
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PINCH_")},
        **{f"PINCH_AGENTS__{n.upper()}__TELEGRAM__BOT_TOKEN": t for n, t in tokens.items()},
        "PINCH_HOME": str(home),
        "XDG_RUNTIME_DIR": str(home.parent / "xdg"),
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model_url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "PINCH_AGENT__TIMEOUT_S": "600",  # a burst queues turns: the model itself is instant
        "PINCH_AGENT__RECALL_MODE": "triggers",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
        "PINCH_DREAMING__ENABLED": "false",
        "PINCH_BACKUP__EVERY": "",  # a thousand agents' first backups all fall due 10 min in
        "PYTHONPATH": str(code),
    }
    if args.turns_per_process:
        env["PINCH_GATEWAY__MAX_CONCURRENT_TURNS_PER_PROCESS"] = str(args.turns_per_process)
    (home.parent / "xdg").mkdir(mode=0o700, exist_ok=True)
    profiled = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    return subprocess.Popen(
        [sys.executable, *profiled, "-m", "app.cli.main", "gateway"],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def holders(home: Path, names: list[str]) -> Counter[int]:
    """How many agents each gateway process holds, from the agents' leases."""
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


def proc_status(pid: int, field: str) -> float:
    """A /proc/PID/status memory figure in MB (VmRSS, VmHWM)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK


def wait(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q + 0.5) - 1)]


def push_all(telegram: Fake, items: list[list[object]]) -> None:
    for i in range(0, len(items), 5000):
        telegram.post("/_scale/push", {"items": items[i : i + 5000]})


def settle(telegram: Fake, total: int, what: str, stall_s: float) -> None:
    """Wait until `total` messages are answered or failed (a notice naming no message): a
    failed turn is counted, not waited for. Gives up, saying so, after `stall_s` without
    progress (the report then counts what is missing as lost)."""
    last, since = (-1, -1), time.monotonic()
    while True:
        progress = telegram.get("/_scale/progress")
        now = (progress["replied"], progress["notices"])
        if sum(now) >= total:
            return
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall_s:
            print(f"gave up waiting for {what}: {now[0]} answered, {now[1]} failed of {total}")
            return
        time.sleep(0.2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    agents, sessions, gateways = args.agents, args.sessions, args.gateways
    fds = raise_fd_limit()
    work = Path(tempfile.mkdtemp(prefix="pinch-scale-"))
    home = work / "home"
    fakes: list[Fake] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        telegram = Fake("telegram", work, work / "telegram.log", args.fakes_nice)
        fakes.append(telegram)
        models = [
            Fake("model", work, work / f"model{m}.log", args.fakes_nice)
            for m in range(args.model_procs)
        ]
        fakes += models
        tokens = setup(home, telegram, agents, args.poll_s)
        names = list(tokens)
        began = time.monotonic()
        procs = [
            start_gateway(
                home,
                models[k % len(models)].url,
                tokens,
                work / f"gw{k}.log",
                args,
                args.profile / f"gw{k}.prof" if args.profile else None,
            )
            for k in range(gateways)
        ]
        every = 0.5 if agents <= 100 else 5.0  # reading a thousand leases takes a while

        def polled() -> bool:
            return all(telegram.get("/_scale/progress")["polls"])

        wait(polled, 3600, "every token polled", every)
        first_served = time.monotonic() - began
        wait(lambda: sum(holders(home, names).values()) == agents, 600, "every lease", every)
        fair = -(-agents // gateways)
        wait(lambda: max(holders(home, names).values()) <= fair, 3600, "an even share", every)
        polls = telegram.get("/_scale/progress")["polls"]

        def fresh() -> bool:  # the holders now serving are polling
            now = telegram.get("/_scale/progress")["polls"]
            return all(a > b for a, b in zip(now, polls, strict=True))

        wait(fresh, args.poll_s * 3 + 60, "fresh polls", every)
        even_after = time.monotonic() - began
        spread = holders(home, names)
        rss_started = [proc_status(p.pid, "VmRSS") for p in procs]
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a gateway exited during start-up: see its log in " + str(work))

        sent = 0
        # warm-up: one message to each agent
        push_all(telegram, [[i, 1000, f"m-{i}-0-r0"] for i in range(agents)])
        sent += agents
        settle(telegram, sent, "the warm-up", args.stall_s)
        notices0 = telegram.get("/_scale/progress")["notices"]

        # burst: every session at once, `rounds` times
        burst: list[str] = []
        cpu0 = [cpu_s(p.pid) for p in procs]
        fakes_cpu0 = [cpu_s(f.proc.pid) for f in fakes]
        start = time.monotonic()
        for r in range(1, args.rounds + 1):
            items = [
                [i, 1000 + s, f"m-{i}-{s}-r{r}"] for i in range(agents) for s in range(sessions)
            ]
            burst += [str(x[2]) for x in items]
            push_all(telegram, items)
            sent += len(items)
            settle(telegram, sent, f"burst round {r}", args.stall_s)
        burst_s = time.monotonic() - start
        burst_failed = telegram.get("/_scale/progress")["notices"] - notices0
        burst_cpu = sum(cpu_s(p.pid) for p in procs) - sum(cpu0)
        fakes_cpu = sum(cpu_s(f.proc.pid) for f in fakes) - sum(fakes_cpu0)
        rate = len(burst) / burst_s

        # paced: below capacity, one at a time
        paced_rate = args.rate or max(1.0, rate / 3)
        picks = random.Random(7)
        paced: list[str] = []
        r = args.rounds + 1
        t0 = time.monotonic()
        for n in range(args.paced):
            i, s = picks.randrange(agents), picks.randrange(sessions)
            text = f"m-{i}-{s}-r{r + n}"
            delay = t0 + n / paced_rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            telegram.post("/_scale/push", {"items": [[i, 1000 + s, text]]})
            paced.append(text)
        sent += len(paced)
        settle(telegram, sent, "the paced messages", args.stall_s)
        rss_peak = [proc_status(p.pid, "VmHWM") for p in procs]
        fakes_rss = [proc_status(f.proc.pid, "VmHWM") for f in fakes]
        report = telegram.get("/_scale/report")
        timing: dict[str, list[float]] = {}
        for model in models:
            timing.update(model.get("/_scale/report")["timing"])
        alive = sum(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
        for fake in fakes:
            fake.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    def overhead(tokens: list[str]) -> tuple[list[float], list[float]]:
        e2e, own = [], []
        for t in tokens:
            if t not in report["replied"]:
                continue
            e2e.append((report["replied"][t] - report["pushed"][t]) * 1000)
            if t in report["fetched"] and t in timing:
                began_, ended = timing[t]
                own.append(
                    ((report["replied"][t] - report["fetched"][t]) - (ended - began_)) * 1000
                )
        return e2e, own

    burst_e2e, burst_own = overhead(burst)
    paced_e2e, paced_own = overhead(paced)
    counts = report["answered"]
    every_token = list(report["pushed"])
    return {
        "agents": agents,
        "sessions": sessions,
        "gateways": gateways,
        "model_procs": args.model_procs,
        "fd_limit": fds,
        "messages": sent,
        "burst_messages": len(burst),
        "burst_failed": burst_failed,
        "failed": report["notices"],
        "max_concurrent_turns_per_process": args.turns_per_process,
        "gateway_code": str(args.gateway_code),
        "burst_s": burst_s,
        "messages_per_s": rate,
        "cpu_ms_per_message": burst_cpu * 1000 / len(burst),
        "fakes_cpu_ms_per_message": fakes_cpu * 1000 / len(burst),
        "burst_overhead_p50_ms": statistics.median(burst_own) if burst_own else float("nan"),
        "burst_overhead_p95_ms": percentile(burst_own, 0.95),
        "burst_e2e_p50_ms": statistics.median(burst_e2e) if burst_e2e else float("nan"),
        "burst_e2e_p95_ms": percentile(burst_e2e, 0.95),
        "paced_messages": len(paced),
        "paced_rate": paced_rate,
        "paced_overhead_p50_ms": statistics.median(paced_own) if paced_own else float("nan"),
        "paced_overhead_p95_ms": percentile(paced_own, 0.95),
        "paced_e2e_p50_ms": statistics.median(paced_e2e) if paced_e2e else float("nan"),
        "paced_e2e_p95_ms": percentile(paced_e2e, 0.95),
        "lost": sum(1 for t in every_token if counts.get(t, 0) == 0) - report["notices"],
        "duplicated": sum(1 for t in every_token if counts.get(t, 0) > 1),
        "conflicts": report["conflicts"],
        "every_token_polled_s": first_served,
        "even_share_s": even_after,
        "agents_per_gateway": sorted(spread.values(), reverse=True),
        "rss_started_mb": rss_started,
        "rss_peak_mb": rss_peak,
        "fakes_peak_rss_mb": fakes_rss,
        "gateways_alive_at_end": alive,
    }


def main() -> None:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `timeout`: stop what we started
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 agents x 5 sessions, 2 gateways")
    parser.add_argument("--agents", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--gateways", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="burst rounds (every session once)")
    parser.add_argument("--paced", type=int, default=300, help="paced messages")
    parser.add_argument("--rate", type=float, default=0.0, help="paced messages a second")
    parser.add_argument("--model-procs", type=int, default=0, help="default: one per gateway")
    parser.add_argument("--poll-s", type=int, default=20, help="each bot's long-poll timeout")
    parser.add_argument(
        "--fakes-nice",
        type=int,
        help="the fakes' niceness (e.g. 0 when the bench runs at nice 15 on a loaded machine: "
        "at 1,000 agents fakes starved with the gateways timed connections out)",
    )
    parser.add_argument(
        "--turns-per-process",
        type=int,
        default=0,
        help="[gateway] max_concurrent_turns_per_process for the gateways (default: theirs)",
    )
    parser.add_argument(
        "--gateway-code",
        type=Path,
        default=ROOT,
        help="run the gateways from this checkout (e.g. main's, for a before/after)",
    )
    parser.add_argument(
        "--stall-s",
        type=float,
        default=180.0,
        help="stop waiting for a round after this long without an answer or a failure",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--profile", type=Path, help="run the gateways under cProfile, here")
    parser.add_argument("--keep", action="store_true", help="keep the home and the logs")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.sessions, args.gateways, args.rounds, args.paced = 6, 5, 2, 1, 30
        args.poll_s = 5
    args.model_procs = args.model_procs or args.gateways
    r = run(args)
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    mb = lambda xs: ", ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    print(
        f"{r['agents']} agents x {r['sessions']} sessions through {r['gateways']} gateways "
        f"({r['model_procs']} model fakes), {r['messages']} messages\n"
        f"  burst             {r['burst_messages']} messages in {r['burst_s']:.1f} s: "
        f"{r['messages_per_s']:.1f} messages/s, {r['cpu_ms_per_message']:.1f} gateway CPU-ms a "
        f"message (fakes {r['fakes_cpu_ms_per_message']:.1f})\n"
        f"  burst overhead    p50 {r['burst_overhead_p50_ms']:.0f} ms, "
        f"p95 {r['burst_overhead_p95_ms']:.0f} ms (end to end p50 {r['burst_e2e_p50_ms']:.0f}, "
        f"p95 {r['burst_e2e_p95_ms']:.0f} ms)\n"
        f"  paced overhead    p50 {r['paced_overhead_p50_ms']:.0f} ms, "
        f"p95 {r['paced_overhead_p95_ms']:.0f} ms at {r['paced_rate']:.1f}/s over "
        f"{r['paced_messages']} messages (end to end p50 {r['paced_e2e_p50_ms']:.0f}, "
        f"p95 {r['paced_e2e_p95_ms']:.0f} ms)\n"
        f"  failed (error notices) {r['failed']} (burst {r['burst_failed']}), lost {r['lost']}, "
        f"duplicated {r['duplicated']}, 409 conflicts {r['conflicts']}\n"
        f"  start-up          every token polled {r['every_token_polled_s']:.1f} s, even share "
        f"{r['even_share_s']:.1f} s; agents per gateway {r['agents_per_gateway']}\n"
        f"  RSS per gateway   at even share {mb(r['rss_started_mb'])} MB, peak "
        f"{mb(r['rss_peak_mb'])} MB; fakes peak {mb(r['fakes_peak_rss_mb'])} MB"
    )


if __name__ == "__main__":
    main()
