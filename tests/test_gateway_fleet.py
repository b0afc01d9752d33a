"""Three real `pinch gateway` processes share 30 agents (each its own bot token on one fake
Telegram server) by lease; one is killed with SIGKILL mid-turn: its agents move to the others,
every message is answered exactly once, none is lost, each chat's order is kept, and no two
processes ever poll one token (the fake answers 409 when they do: counted, must be 0)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory.store.agent_leases import AgentLease, SqliteAgentLeaseStore
from memory.store.db import open_database
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_fleet import FleetBot, TelegramFleet

ROOT = Path(__file__).resolve().parents[1]
AGENTS = [f"a{i:02d}" for i in range(30)]
CHATS = (501, 502)  # two people talk to every agent
ROUNDS = 3  # messages per chat: q0, q1, q2 (sent in order)
TOKEN = re.compile(r"\bm-a\d\d-\d+-q\d\b")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # other processes: polling is the only way to watch them
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def echo_tokens(request: RecordedRequest) -> Reply:
    found = TOKEN.findall(request.last_user_text())
    return text_reply("re: " + " ".join(found), delay_s=0.4)


def make_agents(home: Path, tg: TelegramFleet) -> dict[str, FleetBot]:
    bots = {}
    for i, name in enumerate(AGENTS):
        folder = home / "agents" / name
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text(
            f'[telegram]\napi_base_url = "{tg.url}"\ndm_policy = "open"\npoll_timeout_s = 1\n',
            encoding="utf-8",
        )
        bots[name] = tg.add_bot(f"{7000 + i}:AAfleet{i:02d}_secret_token_for_tests")
    return bots


def gateway(home: Path, model: FakeModelServer, bots: dict[str, FleetBot], log: Path) -> Any:
    environ = {
        **os.environ,
        **{f"PINCH_AGENTS__{n.upper()}__TELEGRAM__BOT_TOKEN": b.token for n, b in bots.items()},
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model.url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "50",
        "PINCH_GATEWAY__AGENT_LEASE_S": "6",
        "PINCH_GATEWAY__AGENT_HEARTBEAT_S": "1",
        "PINCH_GATEWAY__SHUTDOWN_GRACE_S": "2",
        "PINCH_DREAMING__ENABLED": "false",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "gateway"],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def leases(home: Path) -> dict[str, AgentLease | None]:
    found = {}
    for name in AGENTS:
        db = open_database(home / "agents" / name / "agent.sqlite", vector_backend="numpy")
        try:
            found[name] = SqliteAgentLeaseStore(db).current()
        finally:
            db.close()
    return found


def holders(home: Path) -> Counter[int]:
    return Counter(lease.holder.pid for lease in leases(home).values() if lease is not None)


def running_turns(home: Path, names: list[str]) -> int:
    total = 0
    for name in names:
        with sqlite3.connect(home / "agents" / name / "agent.sqlite") as conn:
            row = conn.execute("SELECT count(*) FROM inbound_queue WHERE state = 'running'")
            total += int(row.fetchone()[0])
    return total


def send_round(bots: dict[str, FleetBot], q: int) -> list[str]:
    sent = []
    for name, bot in bots.items():
        for chat in CHATS:
            text = f"m-{name}-{chat}-q{q}"
            bot.push(bot.private_text(text, user_id=chat))
            sent.append(text)
    return sent


def answered(bots: dict[str, FleetBot]) -> Counter[str]:
    """How many final bot messages name each inbound message."""
    seen: Counter[str] = Counter()
    for bot in bots.values():
        for chat in CHATS:
            for text in bot.texts(chat):
                seen.update(TOKEN.findall(text))
    return seen


def test_three_gateways_share_thirty_agents_and_survive_one_killed_mid_turn(
    pinch_home: Path, tmp_path: Path
) -> None:
    with FakeModelServer() as model, TelegramFleet() as tg:
        model.respond_with(responder(turn=echo_tokens))
        bots = make_agents(pinch_home, tg)
        procs = [gateway(pinch_home, model, bots, tmp_path / f"gw{i}.log") for i in range(3)]
        try:
            # Every agent served, by all three, evenly enough (none holds more than 12).
            wait_for(
                lambda: (
                    sum(holders(pinch_home).values()) == 30
                    and len(holders(pinch_home)) == 3
                    and max(holders(pinch_home).values()) <= 12
                ),
                timeout=60,
                what="30 agents leased by 3 gateways",
            )
            wait_for(lambda: all(b.polls for b in bots.values()), 10, "every bot polled")
            sent = send_round(bots, 0)
            victim = procs[0]
            theirs = [
                n
                for n, lease in leases(pinch_home).items()
                if lease and lease.holder.pid == victim.pid
            ]
            wait_for(lambda: running_turns(pinch_home, theirs) > 0, 15, "the victim mid-turn")
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            busy = running_turns(pinch_home, theirs)
            for q in range(1, ROUNDS):  # more messages while its agents move
                sent += send_round(bots, q)
                time.sleep(0.3)
            wait_for(lambda: set(sent) <= set(answered(bots)), 40, "every message answered")
            moved = leases(pinch_home)
            for proc in procs[1:]:
                proc.send_signal(signal.SIGTERM)
            codes = [proc.wait(timeout=30) for proc in procs[1:]]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        logs = {p.name: p.read_text() for p in tmp_path.glob("gw*.log")}

    assert busy > 0  # killed with turns running: their claims had to be recovered
    assert codes == [0, 0], logs
    # The killed gateway's agents are served by the others now.
    assert all(
        lease is not None and lease.holder.pid in (procs[1].pid, procs[2].pid)
        for name, lease in moved.items()
        if name in theirs
    )
    counts = answered(bots)
    assert {t: counts[t] for t in sent} == dict.fromkeys(sent, 1)  # once each, none lost
    for name, bot in bots.items():  # each chat's replies in the order its messages were sent
        for chat in CHATS:
            order = [int(t[-1]) for text in bot.texts(chat) for t in TOKEN.findall(text)]
            assert order == sorted(order) == list(range(ROUNDS)), (name, chat, bot.texts(chat))
    assert tg.conflicts == [], logs  # no two processes ever polled one token
