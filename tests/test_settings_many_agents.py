"""Many agents' variables in one environment (bench/scale.py runs 1,000): each agent still reads
exactly its own and the installation's, and the default agent none of theirs — now that each
environment source keeps only the variables under its own prefix (app/config_layers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.agents import agent_names, load_agent_settings


def _agents(home: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> list[str]:
    names = []
    for i in range(count):
        name = f"a{i:03d}" if i % 2 else f"a-{i:03d}"  # '-' reads as '_' in the variables
        folder = home / "agents" / name
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text("[telegram]\ndm_policy = 'open'\n")
        variable = name.upper().replace("-", "_")
        monkeypatch.setenv(f"PINCH_AGENTS__{variable}__TELEGRAM__BOT_TOKEN", f"{1000 + i}:AA{i}")
        monkeypatch.setenv(f"PINCH_AGENTS__{variable}__AGENT__MODEL", f"model-{i}")
        names.append(name)
    return names


def test_each_of_many_agents_reads_its_own_variables_only(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _agents(pinch_home, monkeypatch, 60)
    monkeypatch.setenv("PINCH_AGENT__TIMEZONE", "Europe/Paris")  # the installation's, shared
    listed = agent_names(pinch_home)
    for i, name in enumerate(names):
        settings = load_agent_settings(name, listed=listed)
        token = settings.telegram.bot_token
        assert token is not None and token.get_secret_value() == f"{1000 + i}:AA{i}"
        assert settings.agent.model == f"model-{i}"
        assert settings.agent.timezone == "Europe/Paris"
    main = load_agent_settings("main", listed=listed)
    assert main.telegram.bot_token is None  # no agent's token reaches the default agent
