"""A burst through one `pinch gateway` process serving three agents (issue 19): every person of
every bot sends several messages at the same moment, the process may run only 2 turns at once
(`[gateway] max_concurrent_turns_per_process`), and the model server — the scripted fake behind
a gate that takes 7 connections at once and resets the rest (tests/fakes/tcp_gate.py) — is
slow enough for turns to overlap. What must hold: every message answered exactly once, the
replies of each chat in the order its messages were sent, no turn failed (no error notice),
and never more than 2 model calls at once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.tcp_gate import TcpGate
from tests.fakes.telegram_fleet import TelegramFleet
from tests.web_support import wait_for

ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"\bm-\d+-\d+-\d+\b")
AGENTS, PEOPLE, MESSAGES = 3, 3, 3
BOUND = 2


class SlowEcho:
    """Answers "re: <the message tokens>" after a short while, counting calls at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(0.15)
            return text_reply("re: " + " ".join(TOKEN.findall(request.last_user_text())))
        finally:
            with self.lock:
                self.running -= 1


def test_a_burst_to_several_agents_is_answered_once_in_order_none_failed(
    pinch_home: Path, tmp_path: Path
) -> None:
    echo = SlowEcho()
    # The gate counts every open connection, idle ones in a client's keep-alive pool too: each
    # agent's model client may keep up to BOUND of them between turns. With a gate of 3, a
    # full-suite run (2026-12-02 17:12) saw connections reset and three turns fail after their
    # retries — most likely the three agents' warm pools (not traced further). One more than
    # the pools can hold at once: a process that broke the bound would still meet resets.
    max_open = AGENTS * BOUND + 1
    with (
        FakeModelServer() as model,
        TcpGate(model.port, max_open=max_open) as gate,
        TelegramFleet() as tg,
    ):
        model.respond_with(echo)
        bots, env = [], dict(os.environ)
        for a in range(AGENTS):
            name = f"b{a}"
            folder = pinch_home / "agents" / name
            folder.mkdir(parents=True)
            (folder / "config.toml").write_text(
                f'[telegram]\napi_base_url = "{tg.url}"\npoll_timeout_s = 1\ndm_policy = "open"\n'
            )
            bot = tg.add_bot(f"{8300 + a}:AAburst_{name}_token_for_tests")
            env[f"PINCH_AGENTS__{name.upper()}__TELEGRAM__BOT_TOKEN"] = bot.token
            bots.append(bot)
        env.update(
            {
                "PINCH_AGENT__MODEL": "claude-test",
                "PINCH_AGENT__API_BASE": gate.url,
                "PINCH_AGENT__MAX_RETRIES": "0",  # connection failures are retried anyway
                "ANTHROPIC_API_KEY": "test-key",
                "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
                "PINCH_AGENT__RECALL_MODE": "triggers",
                "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
                "PINCH_GATEWAY__MAX_CONCURRENT_TURNS_PER_PROCESS": str(BOUND),
                "PINCH_DREAMING__ENABLED": "false",
                "PINCH_BACKUP__EVERY": "",
            }
        )
        log_path = tmp_path / "gateway.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli.main", "gateway"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_for(lambda: all(b.polls for b in bots), 90, "every bot polled")
                sent: dict[tuple[int, int], list[str]] = {}
                for a, bot in enumerate(bots):  # all at once: every person, every message
                    updates = []
                    for n in range(MESSAGES):
                        for p in range(PEOPLE):
                            token = f"m-{a}-{p}-{n}"
                            sent.setdefault((a, 500 + p), []).append(token)
                            updates.append(bot.private_text(f"{token} hello", user_id=500 + p))
                    bot.push(*updates)
                every = {t for tokens in sent.values() for t in tokens}

                def answered() -> set[str]:
                    return {t for bot in bots for m in bot.sent for t in TOKEN.findall(m.text)}

                wait_for(lambda: answered() >= every, 120, "every message answered")
                time.sleep(0.5)  # a second answer, were there one, would show by now
            finally:
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(timeout=60)
    logged = log_path.read_text()
    assert code == 0, logged
    for (a, person), tokens in sent.items():
        texts = bots[a].texts(person)
        assert all(TOKEN.search(text) for text in texts), texts  # no error notice
        shown = [t for text in texts for t in TOKEN.findall(text)]
        assert shown == tokens, (a, person, texts)  # each once, in the order sent
    assert "A turn of" not in logged, logged  # no turn failed
    assert echo.peak <= BOUND
    assert len(model.requests) <= len(every)  # no turn answered twice
