"""A real gateway process (`pinch gateway`'s code, its "telegram" channel talking to a tiny local
platform) stopped with SIGTERM, a second one refused, its health endpoint. (kill -9 of the real
`pinch gateway` with the Telegram adapter: tests/test_gateway_telegram.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.relay_server import RelayServer

ROOT = Path(__file__).resolve().parents[1]


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # another process: polling is the only way to watch it
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def servers() -> Iterator[tuple[FakeModelServer, RelayServer]]:
    with FakeModelServer() as model, RelayServer() as relay:
        yield model, relay


def start_gateway(
    model: FakeModelServer, relay: RelayServer, pinch_home: Path, **env: str
) -> subprocess.Popen[str]:
    environ = {
        **os.environ,
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model.url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_TELEGRAM__DM_POLICY": "open",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "100",
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.gateway_child", relay.url],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    heartbeat = pinch_home / "gateway.heartbeat"
    wait_for(
        lambda: (
            (heartbeat.exists() and json.loads(heartbeat.read_text())["pid"] == proc.pid)
            or proc.poll() is not None
        ),
        what="the gateway to start",
    )
    return proc


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}", delay_s=0.1)


def said(relay: RelayServer) -> list[str]:
    """The replies without the sender line the agent shows the model ("[from 501 (…)]")."""
    return [re.sub(r"\[from [^\]]*\]\n", "", t) for t in relay.reply_texts()]


def answered(relay: RelayServer, texts: list[str]) -> dict[str, int]:
    """How many delivered replies mention each of `texts` (as a whole word)."""
    replies = relay.reply_texts()
    return {t: sum(bool(re.search(rf"\b{t}\b", r)) for r in replies) for t in texts}


def test_sigterm_finishes_the_running_turn_and_keeps_the_queued_one(
    servers: tuple[FakeModelServer, RelayServer], pinch_home: Path
) -> None:
    model, relay = servers
    model.respond_with(
        responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=0.8))
    )
    proc = start_gateway(model, relay, pinch_home)
    relay.post(chat_id="501", text="first")
    wait_for(lambda: bool(model.requests), what="the first turn")
    relay.post(chat_id="501", text="second")
    wait_for(lambda: relay.confirmed >= 3 or relay.typing > 0, what="the second message")
    time.sleep(0.2)  # the relay client confirms "second" on its next poll
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert said(relay) == ["re: first"]

    model.respond_with(responder(turn=echo))
    proc = start_gateway(model, relay, pinch_home)
    wait_for(lambda: len(relay.reply_texts()) == 2, what="the queued message answered")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert said(relay) == ["re: first", "re: second"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_second_gateway_on_the_same_home_exits_with_one_clear_line(
    servers: tuple[FakeModelServer, RelayServer], pinch_home: Path
) -> None:
    model, relay = servers
    port = free_port()
    first = start_gateway(model, relay, pinch_home, PINCH_GATEWAY__HEALTH_PORT=str(port))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            health = json.loads(resp.read())
        second = subprocess.run(
            [sys.executable, "-m", "tests.gateway_child", relay.url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert health["ok"] is True
    assert health["channels"]["telegram"] == {"ok": True, "detail": f"relay at {relay.url}"}
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
