"""What `--agent NAME` and `pinch agents add NAME` make of a name a person mistypes: an empty one
(`--agent "$NAME"` with NAME unset) is refused rather than read as the default agent, a name in
another case points at the agent there is, a new name must fit its PostgreSQL schema, and a new
agent's --workspace must be a folder of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from memory.store.postgres.database import agent_schema


def pinch(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    for args in (["init"], ["agents", "add", "bob"]):
        assert pinch(*args).exit_code == 0
    return pinch_home


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_empty_agent_name_is_refused_not_read_as_the_default_agent(where: str) -> None:
    args = ["--agent", "", "memory", "status"]
    result = pinch(*(args if where == "before" else [*args[2:], *args[:2]]))

    assert result.exit_code == 1
    assert result.output.strip() == (
        "--agent was given an empty name: name an agent (`pinch agents list`)."
    )


def test_an_agent_named_in_another_case_points_at_the_one_there_is(home: Path) -> None:
    result = pinch("--agent", "BOB", "memory", "status")

    assert result.exit_code == 1
    assert "There is no agent 'BOB'" in result.output and "did you mean 'bob'?" in result.output
    assert "pinch agents add BOB" not in result.output  # which would be refused


def test_a_new_agents_name_must_fit_its_postgresql_schema(home: Path) -> None:
    longest, too_long = "a" * 57, "b" * 58  # pinch_ + 57 = PostgreSQL's 63

    refused = pinch("agents", "add", too_long)
    added = pinch("agents", "add", longest)

    assert refused.exit_code == 1 and "at most 57 characters" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert not (home / "agents" / too_long).exists()
    assert added.exit_code == 0, added.output
    assert len(agent_schema(longest)) == 63
    with pytest.raises(ValueError, match="too long for PostgreSQL"):
        agent_schema("c" * 64)  # an older agent of 64: said plainly where PostgreSQL is asked


def test_two_different_agents_in_one_command_are_refused_not_the_last_taken() -> None:
    both = pinch("--agent", "main", "memory", "status", "--agent", "bob")
    same = pinch("--agent", "bob", "memory", "status", "--agent", "bob")

    assert both.exit_code == 1
    assert both.output.strip() == "--agent main and --agent bob in one command: give one agent."
    assert same.exit_code == 0 and "agents/bob/workspace" in same.output


@pytest.mark.parametrize(
    ("workspace", "why"),
    [
        ("agents/bob/workspace", "is agent bob's workspace"),
        ("workspace/memory", "is inside agent main's workspace"),  # indexed as main's notes
        (".", "holds agent main's workspace"),  # the home itself
    ],
)
def test_a_new_agents_workspace_is_never_another_agents(
    home: Path, workspace: str, why: str
) -> None:
    before = sorted(p.relative_to(home) for p in home.rglob("*"))

    result = pinch("agents", "add", "eve", "--workspace", str(home / workspace))

    assert result.exit_code == 1 and why in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before  # nothing written


def test_a_new_agents_own_workspace_elsewhere_is_accepted(home: Path, tmp_path: Path) -> None:
    result = pinch("agents", "add", "eve", "--workspace", str(tmp_path / "eve notes"))

    assert result.exit_code == 0, result.output
    assert (tmp_path / "eve notes" / "MEMORY.md").is_file()


def test_doctor_names_a_workspace_edited_into_another_agents(home: Path) -> None:
    bob_file = home / "agents" / "bob" / "config.toml"
    text = bob_file.read_text(encoding="utf-8")
    bob_file.write_text(f'workspace = "{home / "workspace"}"\n' + text, encoding="utf-8")

    bob = pinch("--agent", "bob", "doctor", "--offline", "--json")
    main = pinch("doctor", "--offline", "--json")

    def workspace_check(result: Result) -> dict[str, object]:
        checks = json.loads(result.output)["checks"]
        return next(c for c in checks if c["name"] == "workspace")

    assert workspace_check(bob)["ok"] is False
    detail = str(workspace_check(bob)["detail"])
    assert "is agent main's workspace: the two agents share memory files" in detail
    assert f"Set `workspace` in {bob_file}" in detail
    assert workspace_check(main)["ok"] is False  # main's side of it too
    bob_file.write_text(text, encoding="utf-8")
    assert workspace_check(pinch("doctor", "--offline", "--json"))["ok"] is True
