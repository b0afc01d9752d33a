"""`pinch agents list | add | remove`, and `--agent NAME` reaching only that agent's files: the
real command (click's CliRunner) over a real home in tmp_path."""

from __future__ import annotations

import fcntl
import json
import os
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import main
from app.config import load_settings

TOKEN = "123456:bob-secret-token-value"


def pinch(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def ok(*args: str) -> str:
    result = pinch(*args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(autouse=True)
def home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    ok("init")
    return pinch_home


def test_add_creates_the_agents_config_workspace_and_database(home: Path) -> None:
    out = ok("agents", "add", "bob")

    folder = home / "agents" / "bob"
    text = (folder / "config.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text) == {"agent": {}}  # a template: everything commented out
    for name in ("PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN", "PINCH_AGENTS__BOB__SLACK__APP_TOKEN"):
        assert name in text and name in out
    assert (folder / "workspace" / "MEMORY.md").is_file()
    assert (folder / "workspace" / "memory").is_dir()
    assert (folder / "agent.sqlite").is_file()
    assert oct((folder / "config.toml").stat().st_mode & 0o777) == "0o600"
    settings = load_settings(agent_id="bob")
    assert settings.workspace_dir == folder / "workspace"
    assert settings.database_path == folder / "agent.sqlite"


def test_add_with_a_workspace_elsewhere_writes_it_into_the_agents_file(
    home: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "bob notes"
    ok("agents", "add", "bob", "--workspace", str(notes))

    assert (notes / "MEMORY.md").is_file()
    assert load_settings(agent_id="bob").workspace_dir == notes


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("main", "already an agent 'main'"),
        ("../etc", "not an agent name"),
        ("a b", "not an agent name"),
        ("-x", "not an agent name"),
        ("BOB", "too close to the agent 'bob'"),
        ("bob_", None),  # a different name: allowed
    ],
)
def test_add_refuses_an_existing_or_unsafe_name_in_one_line(
    home: Path, name: str, why: str | None
) -> None:
    ok("agents", "add", "bob")

    result = pinch("agents", "add", "--", name)

    if why is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 1
    assert why in result.output and len(result.output.strip().splitlines()) == 1
    assert not (home / "agents" / name / "config.toml").exists() or name == "main"


def test_add_refuses_a_name_whose_environment_variables_another_agent_uses(home: Path) -> None:
    ok("agents", "add", "bob-smith")

    result = pinch("agents", "add", "bob_smith")

    assert result.exit_code == 1 and "PINCH_AGENTS__BOB_SMITH__" in result.output


def test_list_shows_each_agent_its_files_and_accounts_but_never_a_token(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok("agents", "add", "bob")
    monkeypatch.setenv("PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN", TOKEN)
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "999:main-token")  # the default agent's

    text = ok("agents", "list")
    data = json.loads(ok("agents", "list", "--json"))

    assert TOKEN not in text and "main-token" not in text
    assert [a["name"] for a in data["agents"]] == ["main", "bob"]
    main_agent, bob = data["agents"]
    assert main_agent["default"] and not bob["default"]
    assert main_agent["accounts"] == {"telegram": True, "slack": False}
    assert bob["accounts"] == {"telegram": True, "slack": False}
    assert bob["workspace"] == str(home / "agents" / "bob" / "workspace")
    assert bob["database_bytes"] > 0
    assert "main (default)" in text and "telegram yes" in text


def test_a_new_agent_inherits_no_token_of_the_installation(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "999:main-token")
    ok("agents", "add", "bob")

    bob = json.loads(ok("agents", "list", "--json"))["agents"][1]

    assert bob["accounts"]["telegram"] is False


def test_remove_moves_the_agent_aside_and_says_how_to_bring_it_back(home: Path) -> None:
    ok("agents", "add", "bob")
    note = home / "agents" / "bob" / "workspace" / "memory" / "2026-11-30.md"
    note.write_text("Bob's bicycle is green.\n", encoding="utf-8")

    out = ok("agents", "remove", "bob", "--yes")

    assert not (home / "agents" / "bob").exists()
    [moved] = list((home / "removed").iterdir())
    assert moved.name.startswith("bob-") and moved.name.endswith("Z")
    moved_note = moved / "workspace" / "memory" / "2026-11-30.md"
    assert moved_note.read_text(encoding="utf-8") == "Bob's bicycle is green.\n"
    assert (moved / "agent.sqlite").is_file() and (moved / "config.toml").is_file()
    assert f"mv {moved} {home / 'agents' / 'bob'}" in out
    assert json.loads(ok("agents", "list", "--json"))["agents"][-1]["name"] == "main"
    os.rename(moved, home / "agents" / "bob")  # the advice works
    assert "bob" in ok("agents", "list")


def test_remove_asks_first_and_a_no_changes_nothing(home: Path) -> None:
    ok("agents", "add", "bob")

    result = pinch("agents", "remove", "bob", input="n\n")

    assert result.exit_code == 1 and "Move agent 'bob'" in result.output
    assert (home / "agents" / "bob" / "config.toml").is_file()
    assert pinch("agents", "remove", "bob", input="y\n").exit_code == 0
    assert not (home / "agents" / "bob").exists()


def test_remove_moves_a_workspace_elsewhere_in_the_home_but_not_one_outside(
    home: Path, tmp_path: Path
) -> None:
    ok("agents", "add", "bob", "--workspace", str(home / "bob-notes"))
    ok("agents", "add", "carol", "--workspace", str(tmp_path / "carol-notes"))

    bob = ok("agents", "remove", "bob", "--yes")
    carol = ok("agents", "remove", "carol", "--yes")

    assert not (home / "bob-notes").exists() and "workspace-moved" in bob
    [moved] = (home / "removed").glob("bob-*")
    assert (moved / "workspace-moved" / "MEMORY.md").is_file()
    assert f"mv {moved / 'workspace-moved'} {home / 'bob-notes'}" in bob
    assert (tmp_path / "carol-notes" / "MEMORY.md").is_file() and "left where it is" in carol


def test_the_default_agent_and_an_unknown_one_are_not_removed(home: Path) -> None:
    default = pinch("agents", "remove", "main", "--yes")
    unknown = pinch("agents", "remove", "zed", "--yes")

    assert default.exit_code == 1 and "default agent" in default.output
    assert unknown.exit_code == 1 and "no agent 'zed'" in unknown.output
    assert (home / "workspace" / "MEMORY.md").is_file()


def test_remove_is_refused_while_a_gateway_serves_the_agent(home: Path) -> None:
    ok("agents", "add", "bob")
    lock = home / "agents" / "bob" / "gateway.lock"
    with lock.open("w") as held:  # what a running `pinch gateway --agent bob` holds
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = pinch("agents", "remove", "bob", "--yes")
    assert refused.exit_code == 1 and "pid 4242" in refused.output
    assert (home / "agents" / "bob" / "config.toml").is_file()
    assert pinch("agents", "remove", "bob", "--yes").exit_code == 0  # released: it goes


def test_an_unknown_agent_is_one_line_of_advice_on_any_command(home: Path) -> None:
    for args in (["memory", "status"], ["jobs", "list"], ["pairing", "list"], ["init"]):
        result = pinch(*args, "--agent", "zed")
        assert result.exit_code == 1, args
        assert "There is no agent 'zed'" in result.output and "pinch agents add zed" in (
            result.output
        )
    assert not (home / "agents" / "zed").exists()


def test_the_agent_chosen_in_one_run_is_not_kept_for_the_next(home: Path) -> None:
    ok("agents", "add", "bob")

    bob = ok("--agent", "bob", "memory", "status")
    default = ok("memory", "status")

    assert str(home / "agents" / "bob" / "workspace") in bob
    assert str(home / "workspace") in default and "agents/bob" not in default


def test_each_agents_backups_go_to_its_own_folder_and_prune_only_its_own(home: Path) -> None:
    from app.backup.archive import make_backup
    from app.backup.manifest import SCHEDULED_PREFIX
    from app.backup.schedule import prune

    ok("agents", "add", "bob")
    main_settings, bob_settings = load_settings(), load_settings(agent_id="bob")
    for _ in range(2):
        make_backup(main_settings, prefix=SCHEDULED_PREFIX)
        make_backup(bob_settings, prefix=SCHEDULED_PREFIX)
    assert bob_settings.backup_dir == main_settings.backup_dir / "bob"

    pruned = prune(bob_settings.backup_dir, keep=1, agent="bob")

    assert len(pruned) == 1 and all(p.parent == bob_settings.backup_dir for p in pruned)
    assert len(list(main_settings.backup_dir.glob(f"{SCHEDULED_PREFIX}*"))) == 2
    [kept] = bob_settings.backup_dir.iterdir()
    assert kept.name.startswith(f"{SCHEDULED_PREFIX}bob-")


def test_an_agents_archive_holds_only_it_and_restores_beside_the_others(home: Path) -> None:
    import tarfile

    ok("agents", "add", "bob")
    ok("agents", "add", "alice")
    (home / "agents" / "bob" / "workspace" / "memory" / "2026-11-30.md").write_text(
        "Bob's bicycle is green.\n", encoding="utf-8"
    )
    ok("memory", "index", "--agent", "bob")
    out = ok("backup", "--agent", "bob")
    archive = Path(out.split()[0])
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "agents/bob/agent.sqlite" in names and "agents/bob/config.toml" in names
    assert not [n for n in names if "alice" in n or n.startswith("agents/main")]
    assert "config.toml" not in names  # the installation's file stays the installation's

    refused = pinch("restore", str(archive))  # bob is still there
    assert refused.exit_code == 1 and "not empty" in refused.output
    ok("agents", "remove", "bob", "--yes")
    wrong = pinch("restore", str(archive), "--agent", "alice")
    assert wrong.exit_code == 1 and "holds agent 'bob'" in wrong.output

    restored = ok("restore", str(archive))

    assert "Counts checked against the manifest: equal." in restored
    assert "bicycle is green" in ok("memory", "search", "--agent", "bob", "bicycle")
    assert "bicycle" not in pinch("memory", "search", "--agent", "alice", "bicycle").output


def test_doctor_for_an_agent_names_its_own_file_and_secret_variables(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok("agents", "add", "bob")
    monkeypatch.setenv("PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN", TOKEN)

    result = pinch("doctor", "--agent", "bob", "--offline", "--json")

    checks = {c["name"]: c["detail"] for c in json.loads(result.output)["checks"]}
    assert str(home / "agents" / "bob" / "config.toml") in checks["config"]
    assert "PINCH_AGENTS__BOB__TELEGRAM__BOT_TOKEN set" in checks["secrets"]
    assert str(home / "agents" / "bob" / "agent.sqlite") in checks["database"]
    assert TOKEN not in result.output


def test_an_invalid_setting_of_an_agent_names_its_file_or_variable(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok("agents", "add", "bob")
    own = home / "agents" / "bob" / "config.toml"
    own.write_text(own.read_text(encoding="utf-8") + '\n[memory]\npreset = "bogus"\n')
    monkeypatch.setenv("PINCH_AGENTS__BOB__AGENT__MAX_RETRIES", "99")

    result = pinch("memory", "status", "--agent", "bob")
    listed = ok("agents", "list")

    assert result.exit_code == 1
    assert f"(set in {own})" in result.output
    assert "PINCH_AGENTS__BOB__AGENT__MAX_RETRIES" in result.output
    assert "bob\n  settings   Invalid settings:" in listed  # the others are still listed
    assert ok("memory", "status").startswith("workspace")  # the default agent is unharmed


def test_another_agent_does_not_index_the_installations_extra_notes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "main-owner-notes"
    notes.mkdir()
    (notes / "diary.md").write_text("The safe combination is 31-41-59.\n", encoding="utf-8")
    config = home / "config.toml"
    config.write_text(f"[memory]\nextra_paths = [{json.dumps(str(notes))}]\n", encoding="utf-8")
    ok("agents", "add", "bob")
    for agent in ("main", "bob"):
        ok("memory", "index", "--agent", agent)

    assert "31-41-59" in ok("memory", "search", "safe combination")
    assert "31-41-59" not in pinch("memory", "search", "--agent", "bob", "safe combination").output
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", json.dumps([str(notes)]))
    assert load_settings(agent_id="bob").memory.extra_paths == []
    assert load_settings().memory.extra_paths == [str(notes)]


AGENT_COMMANDS = [
    ["init"],
    ["memory", "index"],
    ["memory", "status"],
    ["memory", "search", "bicycle"],
    ["memory", "get", "memory/2026-11-30.md"],
    ["memory", "compact"],
    ["memory", "dream", "--dry-run"],
    ["memory", "forget", "--session", "cli:direct:owner", "--dry-run"],
    ["jobs", "list", "--all"],
    ["intents", "list", "--all"],
    ["pairing", "list"],
    ["web", "login"],
    ["mcp", "list"],
    ["skills", "list"],
    ["doctor", "--offline"],
    ["backup"],
]


@pytest.mark.parametrize("args", AGENT_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_command_with_agent_reaches_only_that_agents_files(
    home: Path, args: list[str]
) -> None:
    ok("agents", "add", "bob")
    note = home / "agents" / "bob" / "workspace" / "memory" / "2026-11-30.md"
    note.write_text("Bob's bicycle is green.\n", encoding="utf-8")
    ok("memory", "index", "--agent", "bob")
    # Take the default agent's files away: a command that reaches them would fail, or create
    # them again.
    (home / "workspace").rename(home / "main-workspace.away")
    (home / "agents" / "main").rename(home / "main-agent.away")

    result = pinch(*args, "--agent", "bob")

    if args[0] == "doctor":  # no model key here: only that check may fail
        checks = json.loads(pinch(*args, "--json", "--agent", "bob").output)["checks"]
        assert [c["name"] for c in checks if not c["ok"]] == ["secrets"], result.output
    elif args[:2] == ["memory", "forget"]:  # bob has no such session: advice, not a traceback
        assert isinstance(result.exception, SystemExit | None), result.output
    else:
        assert result.exit_code == 0, result.output
    assert not (home / "workspace").exists(), "the default agent's workspace came back"
    assert not (home / "agents" / "main").exists(), "the default agent's database came back"
    if args[:2] == ["memory", "search"] or args[:2] == ["memory", "get"]:
        assert "bicycle is green" in result.output


def test_remove_is_refused_while_a_gateway_beats_for_the_agent(home: Path) -> None:
    import time

    ok("agents", "add", "bob")
    beat = home / "agents" / "bob" / "gateway.heartbeat"
    # A gateway serving several agents beats in each one's folder; this process is alive.
    beat.write_text(json.dumps({"pid": os.getpid(), "at": time.time(), "channels": {}}))

    refused = pinch("agents", "remove", "bob", "--yes")
    beat.write_text(json.dumps({"pid": os.getpid(), "at": time.time() - 3600, "channels": {}}))
    stale = pinch("agents", "remove", "bob", "--yes")

    assert refused.exit_code == 1 and f"pid {os.getpid()}" in refused.output
    assert stale.exit_code == 0, stale.output  # an old beat is a gateway long gone


def test_an_agents_archive_is_format_2_and_its_outside_workspace_comes_back_there(
    home: Path, tmp_path: Path
) -> None:
    import tarfile

    notes = tmp_path / "bob-notes"
    ok("agents", "add", "bob", "--workspace", str(notes))
    (notes / "memory" / "2026-11-30.md").write_text("Bob's kayak is red.\n", encoding="utf-8")
    archive = Path(ok("backup", "--agent", "bob").split()[0])
    default_archive = Path(ok("backup").split()[0])
    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    with tarfile.open(default_archive) as tar:
        default_manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    # A Pinch older than agents reads format 1 only: it refuses an agent's archive.
    assert (manifest["format"], manifest["scope"], manifest["agent_id"]) == (2, "agent", "bob")
    assert (default_manifest["format"], default_manifest["scope"]) == (1, "home")

    ok("agents", "remove", "bob", "--yes")  # the outside workspace stays where it is
    refused = pinch("restore", str(archive))
    assert refused.exit_code == 1 and f"{notes} is not empty" in refused.output
    notes.rename(tmp_path / "bob-notes.old")
    restored = ok("restore", str(archive))

    assert f"workspace {notes}" in restored
    assert (notes / "memory" / "2026-11-30.md").read_text(encoding="utf-8") == (
        "Bob's kayak is red.\n"
    )
    assert load_settings(agent_id="bob").workspace_dir == notes


def test_each_agent_has_its_own_web_password(home: Path) -> None:
    from app.web.auth import read_password_hash, verify_password
    from app.wiring import web_exposure_problem

    ok("agents", "add", "bob")
    done = pinch(
        "web", "set-password", "--agent", "bob", "--password-stdin", input="bob's phrase x\n"
    )
    assert done.exit_code == 0, done.output
    bob, main_settings = load_settings(agent_id="bob"), load_settings()
    assert str(bob.own_dir / "web-password") in " ".join(done.output.split())
    assert read_password_hash(main_settings.own_dir) is None  # the default agent's page: none
    assert verify_password("bob's phrase x", read_password_hash(bob.own_dir) or "")
    mine = pinch("web", "set-password", "--password-stdin", input="main's own phrase\n")
    assert mine.exit_code == 0, mine.output
    assert not verify_password("bob's phrase x", read_password_hash(main_settings.own_dir) or "")
    exposed = main_settings.model_copy(
        update={"web": main_settings.web.model_copy(update={"host": "0.0.0.0"})}
    )
    assert web_exposure_problem(exposed) is None  # main has a password now
