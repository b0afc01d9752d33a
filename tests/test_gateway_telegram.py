"""The gateway with the real Telegram adapter (python-telegram-bot) against the fake Bot API
server, the real agent against the scripted model server — in process, and as a real
`pinch gateway` process killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.channel_registry import Owners
from app.cli.main import main
from channels.channel_config import GroupRule
from memory.files.inbox import Inbox as FileInbox
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import GROUP, STRANGER, FakeTelegram
from tests.gateway_support import Rig, make_rig
from tests.telegram_support import make_channel, telegram_config, until

ROOT = Path(__file__).resolve().parents[1]
STRANGER_ID = int(str(STRANGER["id"]))
GROUP_ID = int(str(GROUP["id"]))


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def telegram_rig(
    tmp_path: Path, server: FakeModelServer, tg: FakeTelegram, **config: object
) -> Rig:
    rig = make_rig(tmp_path, server, telegram=telegram_config(tg, **config))
    rig.gateway.channels["telegram"] = make_channel(tg, tmp_path, **config)
    del rig.gateway.channels["slack"]
    return rig


def bot_texts(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m.text for m in tg.sent if m.chat_id == chat_id]


def test_pairing_over_telegram_code_then_approval_then_an_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.private_text("hello", sender=STRANGER))
            await until(lambda: bool(bot_texts(tg, STRANGER_ID)), what="the pairing notice")
            [notice] = bot_texts(tg, STRANGER_ID)
            code = re.search(r"approve ([A-Z0-9]{8})", notice)
            assert code is not None and server.requests == []

            result = await asyncio.to_thread(
                CliRunner().invoke, main, ["pairing", "approve", code.group(1)]
            )
            assert result.exit_code == 0, result.output
            tg.push(tg.private_text("may I ask now?", sender=STRANGER))
            await until(lambda: len(bot_texts(tg, STRANGER_ID)) == 2, what="the answer")
            await rig.close()
            assert bot_texts(tg, STRANGER_ID)[-1].endswith("may I ask now?")
            assert len(server.requests) == 1

    asyncio.run(scenario())


def test_the_owner_is_answered_with_typing_shown_while_the_turn_runs(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=text_reply("**Hello** Olive", delay_s=0.2)))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.private_text("hi"))
            await until(lambda: bool(bot_texts(tg, 111)), what="the reply")
            await rig.gateway.idle()
            await rig.close()
            assert bot_texts(tg, 111) == ["Hello Olive"]
            assert tg.calls_to("sendChatAction")

    asyncio.run(scenario())


def test_a_telegram_group_message_without_a_mention_costs_no_model_call(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            groups = {str(GROUP_ID): GroupRule()}
            rig = telegram_rig(tmp_path, server, tg, groups=groups)
            await rig.gateway.start()
            tg.push(tg.group_text("just chatting", sender=STRANGER))
            tg.push(tg.group_text("@pinch_test_bot what time is it?", sender=STRANGER))
            await until(lambda: bool(bot_texts(tg, GROUP_ID)), what="the group answer")
            await rig.gateway.idle()
            await rig.close()
            assert len(server.requests) == 1
            assert "just chatting" not in server.requests[0].last_user_text()

    asyncio.run(scenario())


# -- a real `pinch gateway` process ---------------------------------------------------------------


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # another process: polling is the only way to watch it
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def pinch_gateway(tg: FakeTelegram, model: FakeModelServer, **env: str) -> subprocess.Popen[str]:
    environ = {
        **os.environ,
        "PINCH_TELEGRAM__BOT_TOKEN": tg.token,
        "PINCH_TELEGRAM__API_BASE_URL": tg.url,
        "PINCH_TELEGRAM__POLL_TIMEOUT_S": "1",
        "PINCH_TELEGRAM__DM_POLICY": "open",
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model.url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
        "PINCH_GATEWAY__MAX_CONCURRENT_TURNS": "1",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "gateway"],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_pinch_gateway_killed_with_messages_queued_answers_each_once_after_restart(
    pinch_home: Path,
) -> None:
    senders = [{"id": 500 + i, "is_bot": False, "first_name": f"P{i}"} for i in range(3)]
    texts = [f"p{i}q{n}" for n in range(3) for i in range(3)]
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(
            responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=0.3))
        )
        proc = pinch_gateway(tg, model)
        for text in texts:
            tg.push(tg.private_text(text, sender=senders[int(text[1])]))
        # One turn at a time, killed while the model thinks: no send is in flight.
        wait_for(lambda: len(model.requests) >= 3, what="the third turn")
        proc.kill()
        proc.wait()
        before = len(tg.sent)
        assert before < len(texts)

        proc = pinch_gateway(tg, model)
        wait_for(
            lambda: all(any(t in m.text for m in tg.sent) for t in texts),
            what="every message answered",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    counts = {t: sum(bool(re.search(rf"\b{t}\b", m.text)) for m in tg.sent) for t in texts}
    assert counts == dict.fromkeys(texts, 1)


def test_the_owner_on_telegram_then_slack_continues_one_conversation(tmp_path: Path) -> None:
    from channels.slack.adapter import SlackChannel
    from tests.fakes.slack_server import FakeSlack
    from tests.test_slack import slack_config

    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            async with FakeSlack() as slack:
                rig = telegram_rig(tmp_path, server, tg)
                access = rig.gateway.access
                access.owners = Owners.of({**access.owners.ids, "slack": ["U0OWNER"]})
                rig.gateway.channels["slack"] = SlackChannel(
                    slack_config(slack),
                    inbox=FileInbox(tmp_path / "workspace"),
                    state_dir=tmp_path / "state",
                )
                await rig.gateway.start()
                await slack.wait_connected()
                tg.push(tg.private_text("my locker code is 4711"))
                await until(lambda: bool(bot_texts(tg, 111)), what="the Telegram answer")
                await slack.push_event(slack.dm("what was my locker code?"))
                await until(lambda: bool(slack.posted), what="the Slack answer")
                await rig.gateway.idle()
                await rig.close()
        assert "4711" in json.dumps(server.requests[-1].body)
        assert server.requests[-1].last_user_text() == "what was my locker code?"

    asyncio.run(scenario())


def test_pinch_doctor_checks_the_telegram_channel_the_gateway_would_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeTelegram() as tg:
        monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", tg.token)
        monkeypatch.setenv("PINCH_TELEGRAM__API_BASE_URL", tg.url)
        result = CliRunner().invoke(main, ["doctor", "--offline", "--json"])

    checks = {c["name"]: c for c in json.loads(result.output)["checks"]}
    assert checks["telegram"]["ok"] is True
    assert "pinch_test_bot" in checks["telegram"]["detail"]
    assert tg.token not in result.output
