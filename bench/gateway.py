"""The gateway under load: lost, duplicated and out-of-order replies, throughput, overhead, memory.

    .venv/bin/python bench/gateway.py                     # 50 conversations x 20 messages
    .venv/bin/python bench/gateway.py --conversations 10 --messages 5 --kills 2

Offline. Two parts, side by side in one run:

1. **Overhead** (in process): the real `Gateway` — access check, de-duplication, durable queue
   in the agent SQLite, per-session ordering, streamed delivery and its records — with an
   in-memory channel and a turn that answers at once (no agent, no model), so the time from
   `on_message` to the delivered reply is the gateway's own cost per message (p50/p95).
2. **End to end, with and without kill -9**: a real gateway process (`pinch gateway`'s code;
   its channel talks to a small local chat platform that redelivers unconfirmed updates, as
   Telegram does) and the real Agent against the scripted model server (which answers at
   once). Each conversation sends its next message when the previous one is answered (one turn
   per message), or with `--burst` every message at once, a round every 50 ms (the gateway
   collects what arrives during a turn into the next one). Counted from the platform's final
   message texts:
   *lost* (a message no reply covers), *duplicated* (covered by two or more replies; the only
   window is a kill between the platform accepting a send and Pinch's commit of it),
   *out of order* (a conversation's replies covering its messages out of order); messages/s
   from the first post to the last reply; peak RSS of the gateway process. The second run kills
   the gateway with SIGKILL `--kills` times, restarting it at once: at evenly spaced times of
   the first run's duration, or with `--kill-at reply` the moment a reply lands (the worst case:
   inside the window between the platform accepting a send and Pinch recording it).
   `--telegram` runs the real `pinch gateway` with the Telegram adapter against the fake Bot API.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent_support import responder  # noqa: E402
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply  # noqa: E402
from tests.fakes.relay_server import RelayServer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


# -- 1. overhead in process --------------------------------------------------------------------


async def overhead(conversations: int, messages: int, home: Path) -> dict[str, float]:
    from agent.requests import AgentRequest
    from app.gateway.access import Access, Pairing
    from app.gateway.queue import GatewayStore
    from app.gateway.server import Gateway, GatewayOptions
    from app.gateway.turns import Runtime, TurnResult
    from channels.base import OutboundMessage, SentMessage
    from channels.channel_config import TelegramConfig
    from memory.store.db import open_database
    from memory.store.pairing_store import SqlitePairingStore
    from memory.store.queue_store import SqliteQueueStore
    from tests.gateway_support import FakeChannel

    db = open_database(home / "overhead.sqlite", vector_backend="numpy")
    channel = FakeChannel("telegram")
    received: dict[str, float] = {}
    delivered: dict[str, float] = {}
    original_send = channel.send

    async def timed_send(message: OutboundMessage) -> list[SentMessage]:
        sent = await original_send(message)
        for tag in re.findall(r"c\d+m\d+", message.text):
            delivered.setdefault(tag, time.perf_counter())
        return sent

    channel.send = timed_send  # type: ignore[method-assign]

    async def instant(
        runtime: Runtime, request: AgentRequest, on_text: Callable[[str], None]
    ) -> TurnResult:
        return TurnResult(f"re: {request.text}")

    gateway = Gateway(
        runtime=None,  # type: ignore[arg-type]
        channels={"telegram": channel},
        store=GatewayStore(SqliteQueueStore(db)),
        access=Access(
            owners={},
            channels={"telegram": TelegramConfig(dm_policy="open")},
            pairing=Pairing(SqlitePairingStore(db)),
        ),
        options=GatewayOptions(collect_window_s=0),
        turn_runner=instant,
    )
    await gateway.start()
    for m in range(messages):
        for c in range(conversations):
            tag = f"c{c}m{m}"
            received[tag] = time.perf_counter()
            await channel.deliver(str(1000 + c), tag)
        await gateway.idle()
    await gateway.stop(5)
    db.close()
    ms = sorted((delivered[t] - received[t]) * 1000 for t in received if t in delivered)
    return {
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[int(len(ms) * 0.95) - 1],
        "answered": len(ms),
        "messages": len(received),
    }


# -- 2. a real gateway process --------------------------------------------------------------------


class RelayPlatform:
    """The small local chat platform; the gateway runs as tests/gateway_child.py."""

    def __init__(self, relay: RelayServer) -> None:
        self.relay = relay
        self.command = [sys.executable, "-m", "tests.gateway_child", relay.url]
        self.env: dict[str, str] = {}

    def post(self, chat: int, text: str) -> None:
        self.relay.post(chat_id=str(chat), text=text)

    def replies(self) -> list[tuple[str, int, str]]:
        with self.relay.lock:
            return [(r.chat_id, int(r.message_id), r.text) for r in self.relay.replies.values()]


class TelegramPlatform:
    """The fake Telegram Bot API; the gateway is `pinch gateway` with the real adapter."""

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.command = [sys.executable, "-m", "app.cli.main", "gateway"]
        self.env = {
            "PINCH_TELEGRAM__BOT_TOKEN": tg.token,
            "PINCH_TELEGRAM__API_BASE_URL": tg.url,
            "PINCH_TELEGRAM__POLL_TIMEOUT_S": "1",
        }

    def post(self, chat: int, text: str) -> None:
        sender = {"id": chat, "is_bot": False, "first_name": f"P{chat}"}
        self.tg.push(self.tg.private_text(text, sender=sender))

    def replies(self) -> list[tuple[str, int, str]]:
        return [(str(m.chat_id), m.message_id, m.text) for m in list(self.tg.sent)]


Platform = RelayPlatform | TelegramPlatform


class Child:
    def __init__(self, model: FakeModelServer, platform: Platform, home: Path) -> None:
        self.env = {
            **os.environ,
            "PINCH_HOME": str(home),
            "PINCH_AGENT__MODEL": "claude-test",
            "PINCH_AGENT__API_BASE": model.url,
            "PINCH_AGENT__MAX_RETRIES": "0",
            "ANTHROPIC_API_KEY": "test-key",
            "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
            "PINCH_TELEGRAM__DM_POLICY": "open",
            "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
            **platform.env,
        }
        self.command = platform.command
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss_kb = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.home / "gateway.log", "ab"),  # noqa: SIM115
        )
        heartbeat = self.home / "gateway.heartbeat"
        proc = self.proc
        wait_for(
            lambda: heartbeat.exists() and json.loads(heartbeat.read_text())["pid"] == proc.pid,
            60,
        )

    def sample_rss(self) -> None:
        if self.proc is None:
            return
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        if match:
            self.peak_rss_kb = max(self.peak_rss_kb, int(match.group(1)))

    def kill(self) -> None:
        assert self.proc is not None
        self.sample_rss()
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.sample_rss()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.02)


def tally(platform: Platform, conversations: int, messages: int) -> dict[str, int]:
    replies = sorted(platform.replies(), key=lambda r: r[1])
    lost = duplicated = out_of_order = duplicate_replies = 0
    for c in range(conversations):
        chat = str(1000 + c)
        seen: list[int] = []
        for chat_id, _, text in replies:
            if chat_id == chat:
                tags = [int(m) for m in re.findall(rf"\bc{c}m(\d+)\b", text)]
                duplicate_replies += bool(tags) and set(tags) <= set(seen)
                seen.extend(tags)
        counts = {m: seen.count(m) for m in range(messages)}
        lost += sum(1 for n in counts.values() if n == 0)
        duplicated += sum(n - 1 for n in counts.values() if n > 1)
        firsts = list(dict.fromkeys(seen))
        out_of_order += sum(1 for a, b in itertools.pairwise(firsts) if b < a)
    return {
        "lost": lost,
        "duplicated": duplicated,
        "duplicate_replies": duplicate_replies,
        "out_of_order": out_of_order,
    }


def end_to_end(
    conversations: int,
    messages: int,
    kills: int,
    home: Path,
    burst: bool,
    telegram: bool,
    kill_every: float | None = None,
) -> dict[str, float]:
    with FakeModelServer() as model, RelayServer() as relay, FakeTelegram() as tg:
        platform: Platform = TelegramPlatform(tg) if telegram else RelayPlatform(relay)
        return _end_to_end(conversations, messages, kills, home, burst, model, platform, kill_every)


def _end_to_end(
    conversations: int,
    messages: int,
    kills: int,
    home: Path,
    burst: bool,
    model: FakeModelServer,
    platform: Platform,
    kill_every: float | None,
) -> dict[str, float]:
    total = conversations * messages
    model.respond_with(responder(turn=echo))
    child = Child(model, platform, home)
    child.start()

    def covered() -> set[str]:
        return {t for r in platform.replies() for t in re.findall(r"c\d+m\d+", r[2])}

    sent = [0] * conversations

    def post_ready(seen: set[str]) -> None:
        """Burst: every message at once, a round every 50 ms. Turns: each conversation
        sends its next message when the previous one is answered."""
        for c in range(conversations):
            m = sent[c]
            if m >= messages or (burst and m > (time.perf_counter() - started) / 0.05):
                continue
            if burst or m == 0 or f"c{c}m{m - 1}" in seen:
                platform.post(1000 + c, f"c{c}m{m}")
                sent[c] += 1

    started = time.perf_counter()
    killed = 0
    seen: set[str] = set()

    def due(done_kills: int, answered: int, elapsed: float) -> bool:
        """Kill number `done_kills + 1`: at evenly spaced times of the kill-free run (`kill_every`
        seconds), or — the adversarial case — the moment a reply lands past an even share of the
        messages (inside the window between the platform's acceptance and Pinch's record)."""
        if kill_every is None:
            return answered >= total * (done_kills + 1) / (kills + 1)
        return elapsed >= kill_every * (done_kills + 1)

    while len(seen) < total:
        post_ready(seen)
        child.sample_rss()
        if killed < kills and due(killed, len(seen), time.perf_counter() - started):
            child.kill()
            killed += 1
            child.start()
        time.sleep(0.01)
        seen = covered()
    seconds = time.perf_counter() - started
    time.sleep(0.5)  # anything still to be (wrongly) sent again
    child.stop()
    result: dict[str, float] = dict(tally(platform, conversations, messages))
    result.update(
        messages=total,
        kills=killed,
        seconds=seconds,
        messages_per_s=total / seconds,
        model_requests=len(model.requests),
        replies=len(platform.replies()),
        peak_rss_mb=child.peak_rss_kb / 1024,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument(
        "--burst",
        action="store_true",
        help="send every message at once (collected into few turns) instead of one at a time",
    )
    parser.add_argument(
        "--telegram",
        action="store_true",
        help="run `pinch gateway` with the real Telegram adapter against the fake Bot API",
    )
    parser.add_argument(
        "--kill-at",
        choices=("time", "reply"),
        default="time",
        help="kill at evenly spaced times (default) or right after a reply lands (worst case)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pinch-bench-gateway-"))
    try:
        results = {
            "overhead": asyncio.run(overhead(args.conversations, args.messages, work)),
        }
        for name, kills in (("no_kill", 0), ("kill_9", args.kills)):
            home = work / name
            home.mkdir()
            every = None
            if args.kill_at == "time" and kills:
                every = results["no_kill"]["seconds"] / (kills + 1)
            results[name] = end_to_end(
                args.conversations,
                args.messages,
                kills,
                home,
                args.burst,
                args.telegram,
                every,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    o = results["overhead"]
    print(
        f"gateway overhead (in process, no agent): p50 {o['p50_ms']:.2f} ms, "
        f"p95 {o['p95_ms']:.2f} ms over {o['answered']:.0f}/{o['messages']:.0f} messages"
    )
    print("| | no kill | kill -9 |")
    print("|---|---|---|")
    keys = [
        "messages",
        "kills",
        "lost",
        "duplicated",
        "duplicate_replies",
        "out_of_order",
        "replies",
        "model_requests",
        "seconds",
        "messages_per_s",
        "peak_rss_mb",
    ]
    for key in keys:
        a, b = results["no_kill"][key], results["kill_9"][key]
        fmt = "{:.1f}" if isinstance(a, float) and not float(a).is_integer() else "{:.0f}"
        print(f"| {key} | {fmt.format(a)} | {fmt.format(b)} |")


if __name__ == "__main__":
    main()
