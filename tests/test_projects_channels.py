"""`/project` on every channel: the real Telegram adapter against the fake Bot API, the real
Slack adapter against the fake Slack (`!project`, since Slack keeps slash commands), the real
`pinch chat` in a project's folder and in a git repository named like a project; and a chat
mapped by `[projects.NAME] chats` starting in its project. No model call is needed for any."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.projects import ProjectDirectory
from app.channel_registry import Owners
from app.cli.main import main
from channels.channel_config import GroupRule
from memory.files.inbox import Inbox as FileInbox
from tests.agent_support import make_kit
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import GROUP, FakeTelegram
from tests.gateway_support import DB_NAME, Rig, make_rig
from tests.telegram_support import make_channel, telegram_config, until

GROUP_ID = int(str(GROUP["id"]))
PROJECTS = ProjectDirectory.of({"apollo": ([str(GROUP_ID), "C0APOLLO"], []), "wedding": ([], [])})
PINCH = Path(sys.executable).parent / "pinch"


def texts(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m.text for m in tg.sent if m.chat_id == chat_id]


def telegram_rig(tmp_path: Path, server: FakeModelServer, tg: FakeTelegram) -> Rig:
    groups = {str(GROUP_ID): GroupRule(require_mention=False)}
    kit = make_kit(tmp_path, server, db_name=DB_NAME, projects=PROJECTS)
    rig = make_rig(tmp_path, server, telegram=telegram_config(tg, groups=groups), kit=kit)
    rig.gateway.channels["telegram"] = make_channel(tg, tmp_path, groups=groups)
    del rig.gateway.channels["slack"]
    return rig


def test_project_over_telegram_sets_shows_in_status_and_clears(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server, FakeTelegram() as tg:
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            for n, text in enumerate(["/project wedding", "/status", "/project none", "/project"]):
                tg.push(tg.private_text(text))
                await until(lambda n=n: len(texts(tg, 111)) > n, what=f"answer to {text}")
            await rig.gateway.idle()
            await rig.close()
            assert server.requests == []
            return texts(tg, 111)

    set_, status, cleared, shown = asyncio.run(scenario())
    assert set_.startswith("Project for this session: wedding.")
    assert "project wedding" in status
    assert cleared.startswith("No project for this session now")
    assert shown.startswith("Project: none. Known projects: apollo")


def test_a_telegram_group_mapped_by_config_starts_in_its_project(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        with FakeModelServer() as server, FakeTelegram() as tg:
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.group_text("/project"))
            await until(lambda: bool(texts(tg, GROUP_ID)), what="the group's answer")
            await rig.gateway.idle()
            await rig.close()
            return texts(tg, GROUP_ID)

    assert asyncio.run(scenario()) == ["Project: apollo."]


def test_project_over_slack_and_a_mapped_slack_channel(tmp_path: Path) -> None:
    from channels.slack.adapter import SlackChannel
    from tests.test_slack import slack_config

    async def scenario() -> list[str]:
        with FakeModelServer() as server:
            async with FakeSlack() as slack:
                groups = {"C0APOLLO": GroupRule(require_mention=False)}
                kit = make_kit(tmp_path, server, db_name=DB_NAME, projects=PROJECTS)
                rig = make_rig(tmp_path, server, slack=slack_config(slack, groups=groups), kit=kit)
                access = rig.gateway.access
                access.owners = Owners.of({**access.owners.ids, "slack": ["U0OWNER"]})
                rig.gateway.channels["slack"] = SlackChannel(
                    slack_config(slack, groups=groups),
                    inbox=FileInbox(tmp_path / "workspace"),
                    state_dir=tmp_path / "state",
                )
                del rig.gateway.channels["telegram"]
                await rig.gateway.start()
                await slack.wait_connected()
                await slack.push_event(slack.dm("!project Wedding"))
                await until(lambda: len(slack.posted) == 1, what="the DM answer", timeout=30)
                await slack.push_event(slack.dm("!status"))
                await until(lambda: len(slack.posted) == 2, what="the status", timeout=30)
                _message, mention = slack.mention_pair("!project", channel="C0APOLLO")
                await slack.push_event(mention)
                await until(lambda: len(slack.posted) == 3, what="the channel answer", timeout=30)
                await rig.gateway.idle()
                await rig.close()
                assert server.requests == []
                return [str(m.get("text")) for m in slack.posted]

    set_, status, channel = asyncio.run(scenario())
    assert set_.startswith("Project for this session: wedding.")
    assert "project wedding" in status
    assert channel == "Project: apollo."


# ---- the terminal -----------------------------------------------------------------------------


@pytest.fixture
def chat_home(pinch_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("PINCH_AGENT__MODEL", "claude-test")
    monkeypatch.setenv("PINCH_AGENT__API_BASE", "http://127.0.0.1:9")  # never called
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    folder = tmp_path / "code" / "apollo-site"
    (folder / "src").mkdir(parents=True)
    (pinch_home / "config.toml").write_text(
        f'[projects.apollo]\nfolders = ["{folder}"]\n\n[projects.wedding]\n', encoding="utf-8"
    )
    return pinch_home


def pinch_chat(lines: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(PINCH), "chat"], input=lines, capture_output=True, text=True, timeout=30, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_project_in_the_terminal(chat_home: Path, tmp_path: Path) -> None:
    out = pinch_chat("/project wedding\n/status\n/project none\n/project\n", tmp_path)
    assert "Project for this session: wedding." in out
    assert "project wedding" in out
    assert "Project: none. Known projects: apollo (0 entries), wedding (0 entries)" in out


def chat_in(folder: Path, lines: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """`pinch chat` in this process (faster), started in `folder`, `lines` piped in."""
    monkeypatch.chdir(folder)
    done = CliRunner().invoke(main, ["chat"], input=lines)
    assert done.exit_code == 0, done.output
    return done.output


def test_pinch_chat_in_a_projects_folder_starts_in_it(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = chat_in(tmp_path / "code" / "apollo-site" / "src", "/project\n", monkeypatch)
    assert "Project: apollo." in out


def test_pinch_chat_in_a_git_repository_named_like_a_project(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "src" / "Wedding"
    (repo / ".git").mkdir(parents=True)
    (repo / "docs").mkdir()
    assert "Project: wedding." in chat_in(repo / "docs", "/project\n", monkeypatch)
    assert "Project: none." in chat_in(tmp_path, "/project none\n/project\n", monkeypatch)
