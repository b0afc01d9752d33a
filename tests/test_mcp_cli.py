"""`pinch mcp list` (servers, state, tools, last error) and `pinch doctor`'s check of each
server, against the SDK test servers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import main
from tests.mcp_support import SERVERS


@pytest.fixture
def configured(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    pinch_home.mkdir(parents=True, exist_ok=True)
    python, script = json.dumps(sys.executable), json.dumps(str(SERVERS))
    (pinch_home / "config.toml").write_text(
        f'[mcp.servers.calc]\ncommand = {python}\nargs = [{script}, "calc"]\n\n'
        f'[mcp.servers.dies]\ncommand = {python}\nargs = [{script}, "dies"]\n\n'
        '[mcp.servers.off]\ncommand = "nothing"\nenabled = false\n',
        encoding="utf-8",
    )
    return pinch_home


def test_pinch_mcp_list_shows_state_tools_and_last_error(configured: Path) -> None:
    result = CliRunner().invoke(main, ["mcp", "list"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "calc  (stdio)  ready" in out
    assert "tools (5): calc__add, calc__multiply, calc__divide, calc__pid, calc__getenv" in out
    assert "dies  (stdio)  failed" in out
    assert "; stderr: cannot start: no configuration" in out  # its own words
    assert "off  (stdio)  disabled" in out


def test_pinch_mcp_list_without_servers_says_how_to_add_one(pinch_home: Path) -> None:
    result = CliRunner().invoke(main, ["mcp", "list"], catch_exceptions=False)
    assert result.exit_code == 0 and "[mcp.servers.NAME]" in result.output


def test_doctor_checks_each_server(configured: Path) -> None:
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    result = CliRunner().invoke(main, ["doctor", "--offline"], catch_exceptions=False)
    lines = {line[5:16].strip(): line for line in result.output.splitlines()}
    assert lines["mcp calc"].startswith("ok") and "ready, 5 tool(s)" in lines["mcp calc"]
    assert lines["mcp dies"].startswith("FAIL") and "no configuration" in lines["mcp dies"]
    assert lines["mcp off"].startswith("ok") and "disabled" in lines["mcp off"]
    assert result.exit_code == 1


def test_pinch_mcp_list_shows_no_token_a_failing_server_echoes_and_no_escape_sequence(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_PAT", "ghp_0123456789abcdefSECRET")  # not a secret by its name
    pinch_home.mkdir(parents=True, exist_ok=True)
    python, script = json.dumps(sys.executable), json.dumps(str(SERVERS))
    (pinch_home / "config.toml").write_text(
        f'[mcp.servers.leaky]\ncommand = {python}\nargs = [{script}, "leaky"]\n'
        'env = { MCP_TEST_TOKEN = "${GH_PAT}" }\n',
        encoding="utf-8",
    )

    result = CliRunner().invoke(main, ["mcp", "list"], catch_exceptions=False)

    assert "leaky  (stdio)  failed" in result.output
    assert "stderr: auth failed for token [redacted]" in result.output
    assert "ghp_0123456789abcdefSECRET" not in result.output and "\x1b" not in result.output


def test_pinch_mcp_list_says_why_a_server_that_never_answers_the_handshake_is_not_ready(
    pinch_home: Path,
) -> None:
    pinch_home.mkdir(parents=True, exist_ok=True)
    silent = json.dumps("import sys; sys.stdin.read()")  # reads, never answers
    (pinch_home / "config.toml").write_text(
        f'[mcp.servers.mute]\ncommand = {json.dumps(sys.executable)}\nargs = ["-c", {silent}]\n'
        "timeout_s = 0.5\n",
        encoding="utf-8",
    )

    result = CliRunner().invoke(main, ["mcp", "list"], catch_exceptions=False)

    assert "mute  (stdio)  failed" in result.output
    assert "no answer to the MCP start-up handshake within 5.5 s" in result.output
