"""A model failure reached the chat as one line but
never the gateway's log. Each is now one WARNING line, without the message text or a key."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, Reply, error_reply, fault_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram_support import until
from tests.test_gateway_telegram import bot_texts, telegram_rig


def failed_turns(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if "A turn of" in r.getMessage() and "failed" in r.getMessage()
    ]


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (error_reply(500, "internal error"), "ServerError"),
        (fault_reply("echo_key"), "RequestRefusedError"),
    ],
)
def test_a_model_failure_is_one_warning_line_without_the_text_or_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reply: Reply, kind: str
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=reply))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.private_text("my private question"))
            await until(lambda: bool(bot_texts(tg, 111)), 30, "the failure in the chat")
            await rig.gateway.idle()
            await rig.close()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    [record] = failed_turns(caplog)
    line = record.getMessage()
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert kind in line and "model claude-test" in line
    assert "private question" not in line and "test-key" not in line
