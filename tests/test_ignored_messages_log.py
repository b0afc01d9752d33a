"""Messages the gateway ignores (an unlisted group, a
sender not allowed) left nothing in the log at the default level, so an owner could not tell
why the bot did not answer a friend. One INFO line per sender an hour, without the text."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import STRANGER, FakeTelegram
from tests.telegram_support import until
from tests.test_gateway_telegram import telegram_rig

STRANGER_ID = str(STRANGER["id"])


def ignored_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pinch.gateway"
        and r.levelno == logging.INFO
        and "Not answering" in r.getMessage()
    ]


def test_an_unlisted_group_and_a_denied_sender_are_each_logged_once_without_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=text_reply("hi")))
            rig = telegram_rig(tmp_path, server, tg, dm_policy="allowlist")
            await rig.gateway.start()
            for n in range(3):
                tg.push(tg.group_text(f"@pinch_test_bot secret group {n}", sender=STRANGER))
                tg.push(tg.private_text(f"secret direct {n}", sender=STRANGER))
            await until(lambda: tg.pending_update_ids() == [] and len(tg.calls) > 8, 10)
            await until(lambda: len(ignored_lines(caplog)) >= 2, 10, "the log lines")
            await asyncio.sleep(0.3)
            await rig.close()
            assert server.requests == []

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    lines = ignored_lines(caplog)
    assert len(lines) == 2
    assert any("group not listed" in line and "in group" in line for line in lines)
    assert any("not in allow_from" in line for line in lines)
    assert all(f"sender {STRANGER_ID}" in line and "secret" not in line for line in lines)
