"""No orphan MCP server processes: `pinch gateway` ended by SIGTERM and `pinch chat` ended by the
end of its input both stop every server they started (checked in /proc by the pids the servers
write as they start). While the gateway runs, `pinch mcp list` shows its servers' live state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from app.cli.main import main
from tests.fakes.model_server import FakeModelServer
from tests.fakes.relay_server import RelayServer
from tests.mcp_support import ROOT, SERVERS, alive, wait_until
from tests.test_gateway_process import start_gateway


def configure(pinch_home: Path, pidfile: Path) -> None:
    """One stdio server in config.toml (more would only make the test slower)."""
    pinch_home.mkdir(parents=True, exist_ok=True)
    table = ""
    for name, kind in (("calc", "calc"),):
        table += (
            f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = {json.dumps([str(SERVERS), kind])}\n"
            f"env = {{ MCP_TEST_PIDFILE = {json.dumps(str(pidfile))} }}\n\n"
        )
    (pinch_home / "config.toml").write_text(table, encoding="utf-8")


def mcp_list() -> str:
    return CliRunner().invoke(main, ["mcp", "list"], catch_exceptions=False).output


def pids(pidfile: Path) -> list[int]:
    if not pidfile.exists():
        return []
    return [int(p) for p in pidfile.read_text().split()]


def test_the_gateway_stopped_by_sigterm_leaves_no_server_running(
    pinch_home: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "mcp.pids"
    configure(pinch_home, pidfile)
    with FakeModelServer() as model, RelayServer() as relay:
        proc = start_gateway(model, relay, pinch_home)
        try:
            wait_until(lambda: len(pids(pidfile)) == 1, what="the server started")
            started = pids(pidfile)
            assert all(alive(p) for p in started)
            wait_until(lambda: "calc  (stdio)  ready" in mcp_list(), what="the live state")
            listed = mcp_list()
            assert f"Live, from the running Pinch process {proc.pid}" in listed
            assert "calc  (stdio)  ready" in listed and "calc__add" in listed
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
            assert code == 0, proc.stderr.read()[-3000:] if proc.stderr else code
    assert not [p for p in started if alive(p)]


def test_pinch_chat_leaves_no_server_running_when_it_exits(
    pinch_home: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "mcp.pids"
    configure(pinch_home, pidfile)
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
    }
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "chat"],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    started = pids(pidfile)
    assert len(started) == 1  # it ran while the chat did
    assert not [p for p in started if alive(p)]
