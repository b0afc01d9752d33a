"""Where each agent's settings come from (app/config_layers.py): the installation's file and
environment are shared defaults; an agent's own file and PINCH_AGENTS__NAME__* variables win;
a second agent never inherits the default agent's workspace, owners or channel accounts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.agents import agent_names, load_agent_settings
from app.cli.main import main
from app.config import ConfigError


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def two_agents(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(
        pinch_home / "config.toml",
        '[agent]\nmodel = "model-main"\n[owners]\ntelegram = ["111"]\n'
        '[memory]\npreset = "keyword"\n[telegram]\ndm_policy = "allowlist"\n',
    )
    write(pinch_home / "agents" / "bob" / "config.toml", '[agent]\nmodel = "model-bob"\n')
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "111:main-token")
    monkeypatch.setenv("PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN", "222:bob-token")
    return pinch_home


def test_the_default_agent_reads_as_a_one_agent_installation(two_agents: Path) -> None:
    main_settings = load_agent_settings()

    assert main_settings.agent_id == "main"
    assert main_settings.workspace_dir == two_agents / "workspace"
    assert main_settings.owners.telegram == ["111"]
    assert main_settings.telegram.bot_token is not None
    assert main_settings.telegram.bot_token.get_secret_value() == "111:main-token"


def test_another_agent_shares_defaults_but_never_the_default_agents_own_tables(
    two_agents: Path,
) -> None:
    bob = load_agent_settings("bob")

    assert bob.agent_id == "bob"
    assert bob.agent.model == "model-bob"  # its own file wins
    assert bob.memory.preset == "keyword"  # shared from the installation's file
    assert bob.workspace_dir == two_agents / "agents" / "bob" / "workspace"
    assert bob.database_path == two_agents / "agents" / "bob" / "agent.sqlite"
    assert bob.owners.telegram == []  # the default agent's owner is not bob's
    assert bob.telegram.dm_policy != "allowlist" or bob.telegram.allow_from == []
    assert bob.telegram.bot_token is not None
    assert bob.telegram.bot_token.get_secret_value() == "222:bob-token"  # never main's bot


def test_the_agents_environment_beats_its_file_which_beats_the_installations(
    two_agents: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_AGENT__MODEL", "model-from-env")
    assert load_agent_settings("bob").agent.model == "model-bob"
    assert load_agent_settings("main").agent.model == "model-from-env"

    monkeypatch.setenv("PINCH_AGENTS__BOB__AGENT__MODEL", "model-bob-env")
    assert load_agent_settings("bob").agent.model == "model-bob-env"
    monkeypatch.setenv("PINCH_AGENTS__BOB__WORKSPACE", str(two_agents / "bobs-notes"))
    assert load_agent_settings("bob").workspace_dir == two_agents / "bobs-notes"


def test_agent_names_and_an_unknown_agent(two_agents: Path) -> None:
    write(two_agents / "agents" / "alice" / "config.toml", "")
    (two_agents / "agents" / "not an agent").mkdir()
    (two_agents / "agents" / "empty").mkdir()  # no config.toml, no database: not an agent

    assert agent_names(two_agents) == ["main", "alice", "bob"]
    with pytest.raises(ConfigError, match=r"no agent 'carol'.*main, alice, bob.*agents add carol"):
        load_agent_settings("carol")


def test_a_secret_in_an_agents_file_is_refused(two_agents: Path) -> None:
    write(two_agents / "agents" / "bob" / "config.toml", '[telegram]\nbot_token = "222:x"\n')

    with pytest.raises(ConfigError, match=r"agents/bob/config.toml sets \[telegram\] bot_token"):
        load_agent_settings("bob")


def test_every_command_takes_agent(two_agents: Path) -> None:
    runner = CliRunner()
    for args in (
        ["--agent", "carol", "memory", "status"],
        ["memory", "status", "--agent", "carol"],
        ["jobs", "list", "--agent", "carol"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code != 0, args
        assert "There is no agent 'carol'" in result.output, (args, result.output)


def test_the_choice_of_agent_holds_for_one_run_only(two_agents: Path) -> None:
    runner = CliRunner()
    runner.invoke(main, ["--agent", "bob", "memory", "status"])
    from app.agents import selected_agent

    assert selected_agent() is None
