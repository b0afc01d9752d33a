"""One `pinch gateway` process serving two agents, alice and bob, each with its own bot, memory
and web page (its own `[web] port`): a message goes to the agent whose bot received it; /healthz
lists both; bob's login link and bob's cookie never open alice's page; an agent whose token is
refused is reported while the others run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli.main import main
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_fleet import FleetBot, TelegramFleet
from tests.web_support import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
OWNER = 111


def answer_with_memory(request: RecordedRequest) -> Reply:
    """The reply names the secret in the MEMORY.md the agent was shown (whose memory it is)."""
    found = re.search(r"secret-of-(\w+)", request.system_text())
    return text_reply(f"{found.group(1) if found else 'nobody'}: {request.last_user_text()}")


@pytest.fixture
def two_agents(
    pinch_home: Path, tmp_path: Path
) -> Iterator[tuple[dict[str, FleetBot], dict[str, int], int, subprocess.Popen[str]]]:
    with FakeModelServer() as model, TelegramFleet() as tg:
        model.respond_with(responder(turn=answer_with_memory))
        bots, ports = {}, {}
        health = free_port()
        for i, name in enumerate(("alice", "bob")):
            ports[name] = free_port()
            folder = pinch_home / "agents" / name
            (folder / "workspace").mkdir(parents=True)
            (folder / "workspace" / "MEMORY.md").write_text(f"# Memory\n- secret-of-{name}\n")
            (folder / "config.toml").write_text(
                f'[telegram]\napi_base_url = "{tg.url}"\npoll_timeout_s = 1\n'
                f'[owners]\ntelegram = ["{OWNER}"]\n[web]\nport = {ports[name]}\n'
            )
            bots[name] = tg.add_bot(f"{8100 + i}:AAtwo_agents_{name}_token_for_tests")
        broken = pinch_home / "agents" / "carol"
        broken.mkdir(parents=True)
        (broken / "config.toml").write_text(f'[telegram]\napi_base_url = "{tg.url}"\n')
        env = {
            **os.environ,
            "PINCH_AGENTS__ALICE__TELEGRAM__BOT_TOKEN": bots["alice"].token,
            "PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN": bots["bob"].token,
            "PINCH_AGENTS__CAROL__TELEGRAM__BOT_TOKEN": "9999:not-a-bot-of-this-server",
            "PINCH_AGENT__MODEL": "claude-test",
            "PINCH_AGENT__API_BASE": model.url,
            "PINCH_AGENT__MAX_RETRIES": "0",
            "ANTHROPIC_API_KEY": "test-key",
            "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
            "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
            "PINCH_GATEWAY__HEALTH_PORT": str(health),
            "PINCH_DREAMING__ENABLED": "false",
        }
        log = (tmp_path / "gateway.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "gateway"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(lambda: all(b.polls for b in bots.values()), 60, "both bots polled")
            yield bots, ports, health, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            log.close()
        logged = (tmp_path / "gateway.log").read_text()
        assert code == 0, logged
        assert "alice: telegram: started" in logged and "bob: telegram: started" in logged


def login_link(agent: str) -> str:
    done = CliRunner().invoke(main, ["--agent", agent, "web", "login"])
    assert done.exit_code == 0, done.output
    return next(line for line in done.output.splitlines() if "/login?token=" in line)


def test_each_message_goes_to_the_agent_whose_bot_received_it(two_agents: tuple) -> None:
    bots, _ports, health_port, _proc = two_agents
    for name, bot in bots.items():
        bot.push(bot.private_text(f"hello {name}", user_id=OWNER))
    want = {name: [f"{name}: hello {name}"] for name in bots}
    # (a reply streams in: its message is sent, then edited until it is whole)
    wait_for(lambda: all(b.texts(OWNER) == want[n] for n, b in bots.items()), 30, "both answered")
    assert bots["alice"].texts(OWNER) == ["alice: hello alice"]
    assert bots["bob"].texts(OWNER) == ["bob: hello bob"]
    refused: list[urllib.error.HTTPError] = []

    def carol_reported() -> bool:  # carol's token is refused: once her start gave up, unhealthy
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=10)
        except urllib.error.HTTPError as exc:
            refused.append(exc)
            return True
        return False

    wait_for(carol_reported, 30, "carol reported unhealthy")
    health = json.loads(refused[-1].read())
    assert health["agents"]["alice"]["ok"] and health["agents"]["bob"]["ok"]
    assert health["agents"]["alice"]["channels"]["telegram"]["ok"] is True
    assert health["agents"]["carol"]["ok"] is False
    assert "token" in health["agents"]["carol"]["error"].lower()


def test_bobs_login_link_and_cookie_never_open_alices_page(two_agents: tuple) -> None:
    _bots, ports, _health, _proc = two_agents
    alice, bob = (f"http://127.0.0.1:{ports[n]}" for n in ("alice", "bob"))
    bobs_link = login_link("bob")
    assert bobs_link.startswith(f"{bob}/login?token=")
    with httpx.Client() as browser:  # one browser: cookies of 127.0.0.1 go to every port
        refused = browser.get(bobs_link.replace(bob, alice))  # bob's token on alice's page
        assert refused.status_code == 403
        assert browser.get(bobs_link).status_code == 303  # on bob's own page it works, once
        assert "pinch_session_bob" in browser.cookies
        assert "secret-of-bob" in browser.get(f"{bob}/memory/file?path=MEMORY.md").text
        mine = browser.get(f"{alice}/memory/file?path=MEMORY.md")  # bob's cookie sent to alice
        assert mine.status_code == 303 and mine.headers["location"].startswith("/login")
        # Logged in to both at once (one cookie each), each page shows its own memory only.
        assert browser.get(login_link("alice")).status_code == 303
        alices = browser.get(f"{alice}/memory/file?path=MEMORY.md").text
        bobs = browser.get(f"{bob}/memory/file?path=MEMORY.md").text
        assert "secret-of-alice" in alices and "secret-of-bob" not in alices
        assert "secret-of-bob" in bobs and "secret-of-alice" not in bobs
        # The log tail each page shows holds its own agent's lines only.
        bobs_health = browser.get(f"{bob}/health").text
        assert "bob: Web page on" in bobs_health
        assert "alice" not in bobs_health and "carol" not in bobs_health


def test_an_agent_without_a_port_of_its_own_is_told_it_has_no_page(pinch_home: Path) -> None:
    (pinch_home / "agents" / "dave").mkdir(parents=True)
    (pinch_home / "agents" / "dave" / "config.toml").write_text("[agent]\ntimezone = 'UTC'\n")
    done = CliRunner().invoke(main, ["--agent", "dave", "web", "login"])
    assert done.exit_code == 0
    assert "no web page of its own yet" in done.output and "[web] port" in done.output
