"""`pinch doctor`: one line per check, exit 1 on any failure, secrets shown only as set/missing;
`--health` answers from the gateway's heartbeat file or health endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.doctor import CheckResult, channel_check, run_checks
from app.cli.main import main
from app.config import load_settings
from app.gateway.heartbeat import write_heartbeat
from channels.base import Channel, ChannelHealth, MessageHandler, OutboundMessage, SentMessage
from tests.fakes.local_server import LocalHTTPServer
from tests.fakes.model_server import FakeModelServer, text_reply

KEY = "sk-ant-test-0123456789-secret"
TOKEN = "123456:telegram-secret-token"


def doctor(*args: str) -> Result:
    return CliRunner().invoke(main, ["doctor", *args], catch_exceptions=False)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(api_key=KEY) as server:
        yield server


@pytest.fixture
def home(pinch_home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised, indexed, keyword-only home whose model is the fake server."""
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    assert CliRunner().invoke(main, ["memory", "index"]).exit_code == 0
    return pinch_home


def lines(result: Result) -> dict[str, str]:
    """check name -> its whole line."""
    out = {}
    for line in result.output.strip().splitlines():
        status, name = line[:4].strip(), line[5:16].strip()
        out[name] = f"{status} {line[16:]}"
    return out


def test_a_healthy_installation_passes_every_check(home: Path, server: FakeModelServer) -> None:
    server.script(text_reply("p"))
    result = doctor()

    assert result.exit_code == 0, result.output
    checks = lines(result)
    assert list(checks) == ["config", "secrets", "file modes", "database", "index", "model", "web"]
    assert all(line.startswith("ok") for line in checks.values())
    assert "127.0.0.1:8765" in checks["web"]  # where the page is served (the web channel)
    assert "ANTHROPIC_API_KEY set" in checks["secrets"]
    assert "quick_check ok" in checks["database"]
    assert "keyword-only" in checks["index"]  # degraded is reported, not a failure


def test_the_model_check_sends_one_tiny_request(home: Path, server: FakeModelServer) -> None:
    server.script(text_reply("p"))
    doctor()

    [request] = server.requests
    assert request.body["max_tokens"] == 1


def test_a_missing_api_key_fails_without_calling_the_model(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    result = doctor()

    assert result.exit_code == 1
    assert "FAIL ANTHROPIC_API_KEY missing" in lines(result)["secrets"]
    assert lines(result)["model"].startswith("FAIL")
    assert server.requests == []


def test_secrets_are_shown_as_set_or_missing_never_their_values(
    home: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", TOKEN)
    monkeypatch.setenv("PINCH_SLACK__BOT_TOKEN", "xoxb-slack-secret")
    server.script(text_reply("p"))
    result = doctor("--json")

    assert TOKEN not in result.output and KEY not in result.output
    assert "xoxb-slack-secret" not in result.output
    secrets = next(c for c in json.loads(result.output)["checks"] if c["name"] == "secrets")
    assert "PINCH_TELEGRAM__BOT_TOKEN set" in secrets["detail"]
    assert "PINCH_SLACK__APP_TOKEN missing" in secrets["detail"]  # socket mode needs both
    assert not secrets["ok"] and result.exit_code == 1


def test_a_rejected_key_fails_the_model_check_in_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-key")
    result = doctor()

    assert result.exit_code == 1
    assert lines(result)["model"].startswith("FAIL")
    assert "sk-ant-wrong-key" not in result.output


def test_an_unreachable_model_fails_quickly_in_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalHTTPServer(BaseHTTPRequestHandler) as closed:
        port = closed.port
    monkeypatch.setenv("PINCH_AGENT__API_BASE", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    result = doctor()

    assert result.exit_code == 1
    assert lines(result)["model"].startswith("FAIL")
    assert time.monotonic() - started < 15


def test_offline_skips_the_model(home: Path, server: FakeModelServer) -> None:
    result = doctor("--offline")

    assert result.exit_code == 0, result.output
    assert "model" not in lines(result) and server.requests == []


def test_a_damaged_database_fails_with_what_to_do(home: Path) -> None:
    db = home / "agents" / "main" / "agent.sqlite"
    with db.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xa5" * 8192)
    result = doctor("--offline")

    assert result.exit_code == 1
    assert lines(result)["database"].startswith("FAIL")
    assert f"mv {db} {db}.broken" in lines(result)["database"]


def test_an_index_never_built_fails_and_says_to_index(home: Path) -> None:
    (home / "agents" / "main" / "agent.sqlite").unlink()
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    result = doctor("--offline")

    assert lines(result)["index"].startswith("FAIL")
    assert "pinch memory index" in lines(result)["index"]


def test_a_too_open_home_fails_the_file_modes_check(home: Path) -> None:
    os.chmod(home, 0o755)
    result = doctor("--offline")

    assert lines(result)["file modes"].startswith("FAIL") and "pinch init" in result.output


def test_a_too_open_workspace_outside_the_home_fails_the_file_modes_check(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "notes-vault"
    workspace.mkdir(mode=0o755)
    os.chmod(workspace, 0o755)
    monkeypatch.setenv("PINCH_WORKSPACE", str(workspace))
    result = doctor("--offline")

    assert lines(result)["file modes"].startswith("FAIL") and str(workspace) in result.output


def test_an_invalid_config_is_one_failed_check(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINCH_AGENT__TIMEZONE", "Mars/Olympus_Mons")
    result = doctor()

    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "FAIL config" in result.output


def test_extra_checks_run_after_the_built_in_ones(home: Path) -> None:
    def telegram(settings: object) -> CheckResult:
        return CheckResult("telegram", True, "getMe ok (@pinch_bot)")

    async def slack(settings: object) -> CheckResult:
        return CheckResult("slack", False, "auth.test: invalid_auth")

    results = run_checks(load_settings(), [telegram, slack], offline=True)

    assert [r.name for r in results[-2:]] == ["telegram", "slack"]
    assert results[-2].ok and not results[-1].ok


def test_a_check_that_raises_is_a_failed_check_not_a_crash(home: Path) -> None:
    def check_broken(settings: object) -> CheckResult:
        raise RuntimeError("the fake platform is down")

    [*_, broken] = run_checks(load_settings(), [check_broken], offline=True)

    assert broken == CheckResult("broken", False, "the fake platform is down")


class _QuietChannel(Channel):
    """A channel adapter reporting a fixed health, or never answering its check."""

    name = "telegram"

    def __init__(self, health: ChannelHealth | None) -> None:
        self.health = health

    async def start(self, on_message: MessageHandler) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        return []

    async def edit(self, sent: SentMessage, text: str) -> list[SentMessage]:
        return [sent]

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None: ...

    async def check(self) -> ChannelHealth:
        if self.health is None:
            await asyncio.Event().wait()  # hangs
        assert self.health is not None
        return self.health


def test_a_channel_adapter_becomes_a_check_by_its_name(home: Path) -> None:
    checks = [channel_check(_QuietChannel(ChannelHealth(True, "getMe ok (@pinch_bot)")))]
    [*_, result] = run_checks(load_settings(), checks, offline=True)

    assert result == CheckResult("telegram", True, "getMe ok (@pinch_bot)")


def test_a_channel_check_that_hangs_fails_after_its_timeout(home: Path) -> None:
    checks = [channel_check(_QuietChannel(None), timeout_s=0.05)]
    [*_, result] = run_checks(load_settings(), checks, offline=True)

    assert not result.ok and "no answer" in result.detail


# ---- --health ---------------------------------------------------------------------------------


def test_health_is_ok_with_a_fresh_heartbeat_from_a_live_process(pinch_home: Path) -> None:
    pinch_home.mkdir()
    write_heartbeat(pinch_home, {"telegram": ChannelHealth(True, "polling")})
    result = doctor("--health")

    assert result.exit_code == 0 and result.output.strip() == "healthy"


def test_health_fails_without_a_heartbeat(pinch_home: Path) -> None:
    pinch_home.mkdir()
    result = doctor("--health")

    assert result.exit_code == 1 and "no gateway heartbeat" in result.output


def test_health_fails_on_a_heartbeat_older_than_90_seconds(pinch_home: Path) -> None:
    pinch_home.mkdir()
    write_heartbeat(pinch_home, {}, at=time.time() - 91)
    result = doctor("--health")

    assert result.exit_code == 1 and "old" in result.output


def test_health_fails_when_the_gateway_process_is_gone(pinch_home: Path) -> None:
    pinch_home.mkdir()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    write_heartbeat(pinch_home, {}, pid=int(gone.stdout))
    result = doctor("--health")

    assert result.exit_code == 1 and "gone" in result.output


def test_health_fails_when_the_last_beat_says_the_gateway_is_stopping(pinch_home: Path) -> None:
    pinch_home.mkdir()
    (pinch_home / "gateway.heartbeat").write_text(
        json.dumps({"pid": os.getpid(), "at": time.time(), "stopping": True, "channels": {}})
    )
    result = doctor("--health")

    assert result.exit_code == 1 and "shutting down" in result.output


def test_health_fails_when_a_channel_is_down(pinch_home: Path) -> None:
    pinch_home.mkdir()
    write_heartbeat(pinch_home, {"telegram": ChannelHealth(False, "409 Conflict for 5 min")})
    result = doctor("--health")

    assert result.exit_code == 1 and "telegram: 409 Conflict" in result.output


class _Healthz(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_health_uses_the_health_endpoint_when_a_port_is_set(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalHTTPServer(_Healthz) as endpoint:
        monkeypatch.setenv("PINCH_GATEWAY__HEALTH_PORT", str(endpoint.port))
        healthy = doctor("--health")
    unreachable = doctor("--health")

    assert healthy.exit_code == 0
    assert unreachable.exit_code == 1 and "unreachable" in unreachable.output


def test_the_heartbeat_file_is_private(pinch_home: Path) -> None:
    pinch_home.mkdir()
    write_heartbeat(pinch_home, {})
    assert (pinch_home / "gateway.heartbeat").stat().st_mode & 0o777 == 0o600


def test_doctor_shows_the_running_gateways_last_poll_and_last_error(
    tmp_path: Path, pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README promises the age of the last completed poll and the last error: they come
    from the running gateway (its heartbeat), since doctor's own adapter does not poll."""
    import dataclasses

    from tests.fakes.telegram_server import FakeTelegram
    from tests.gateway_support import make_rig
    from tests.telegram_support import make_channel, telegram_config, until

    async def scenario(tg: FakeTelegram, server: FakeModelServer) -> str:
        rig = make_rig(tmp_path, server, telegram=telegram_config(tg))
        rig.gateway.options = dataclasses.replace(
            rig.gateway.options,
            heartbeat_path=pinch_home / "gateway.heartbeat",
            heartbeat_every_s=0.2,
        )
        channel = make_channel(tg, tmp_path)
        rig.gateway.channels = {"telegram": channel}
        tg.disconnect_next("getUpdates")
        await rig.gateway.start()
        beat = pinch_home / "gateway.heartbeat"
        await until(
            lambda: (
                beat.exists()
                and "last poll" in beat.read_text()
                and "last error" in beat.read_text()
            ),
            what="a beat with a completed poll and the poll error",
            timeout=30,
        )
        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["doctor", "--offline", "--json"]
        )
        await rig.close()
        return result.output

    with FakeModelServer() as server, FakeTelegram() as tg:
        monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", tg.token)
        monkeypatch.setenv("PINCH_TELEGRAM__API_BASE_URL", tg.url)
        output = asyncio.run(scenario(tg, server))
    checks = {c["name"]: c for c in json.loads(output)["checks"]}
    detail = checks["telegram"]["detail"]
    assert "last poll" in detail and "last error" in detail, detail
