"""Two agents' web pages given one port: `pinch gateway` names the one whose page cannot start,
the agent whose port it is, and where that agent's own port is set (its file, its variable)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.agents import agent_names, load_agent_settings
from app.cli.main import main
from app.web.auth import web_port_clashes


@pytest.fixture(autouse=True)
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    for args in (["init"], ["agents", "add", "alice"], ["agents", "add", "bob"]):
        assert CliRunner().invoke(main, args).exit_code == 0
    return pinch_home


def _give_port(home: Path, name: str, port: int) -> None:
    with (home / "agents" / name / "config.toml").open("a", encoding="utf-8") as fh:
        fh.write(f"\n[web]\nport = {port}\n")


def test_a_second_page_on_one_port_is_named_with_where_its_port_is_set(home: Path) -> None:
    _give_port(home, "alice", 18766)
    _give_port(home, "bob", 18766)
    agents = [load_agent_settings(n) for n in agent_names(home)]

    lines = web_port_clashes(agents)

    assert lines == [
        "bob: its web page's port 18766 is agent alice's too, so it cannot start: give it a port "
        f"of its own, [web] port in {home / 'agents' / 'bob' / 'config.toml'} "
        "(PINCH_AGENTS__BOB__WEB__PORT)."
    ]


def test_an_agents_page_on_the_default_agents_port_is_named_too(home: Path) -> None:
    _give_port(home, "alice", 8765)  # the default agent's page's port
    agents = [load_agent_settings(n) for n in agent_names(home)]

    assert [line.split(":")[0] for line in web_port_clashes(agents)] == ["alice"]
    assert "agent main's" in web_port_clashes(agents)[0]


def test_pages_on_ports_of_their_own_clash_with_nothing(home: Path) -> None:
    _give_port(home, "alice", 18766)
    _give_port(home, "bob", 18767)

    assert web_port_clashes([load_agent_settings(n) for n in agent_names(home)]) == []
