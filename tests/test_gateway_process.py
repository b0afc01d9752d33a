"""A real gateway process (`pinch gateway`'s code, its "telegram" channel talking to a tiny local
platform) killed with SIGKILL or stopped with SIGTERM: nothing lost, nothing answered twice."""

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


def test_kill_9_with_queued_messages_then_restart_answers_each_message_once(
    servers: tuple[FakeModelServer, RelayServer], pinch_home: Path
) -> None:
    model, relay = servers
    model.respond_with(
        responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=0.3))
    )
    # One turn at a time, killed while the model thinks: no send is between the platform's
    # acceptance and Pinch's record of it (that window, one commit wide, is measured in bench/).
    proc = start_gateway(
        model,
        relay,
        pinch_home,
        PINCH_GATEWAY__COLLECT_WINDOW_MS="0",
        PINCH_GATEWAY__MAX_CONCURRENT_TURNS="1",
    )
    texts = [f"c{c}m{m}" for m in range(4) for c in range(3)]
    for text in texts:
        relay.post(chat_id=f"50{text[1]}", text=text)
    wait_for(lambda: len(model.requests) >= 3, what="the third turn")
    proc.kill()
    proc.wait()
    assert min(answered(relay, texts).values()) == 0  # some were still queued
    assert max(answered(relay, texts).values()) == 1

    model.respond_with(responder(turn=echo))
    proc = start_gateway(model, relay, pinch_home)
    wait_for(lambda: min(answered(relay, texts).values()) >= 1, what="every message answered")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    assert answered(relay, texts) == dict.fromkeys(texts, 1)


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
