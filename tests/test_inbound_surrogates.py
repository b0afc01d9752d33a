"""A message carrying a lone surrogate (JSON "\\udcff")
could not be queued and was lost, and the failure logged the whole message."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import make_rig
from tests.telegram_support import until
from tests.test_gateway_telegram import bot_texts, telegram_rig


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


def test_a_telegram_message_with_a_lone_surrogate_is_answered_with_a_replacement_character(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=echo))
            rig = telegram_rig(tmp_path, server, tg)
            await rig.gateway.start()
            tg.push(tg.private_text("broken \udcff text"))  # the fake sends it as "\udcff"
            await until(lambda: bool(bot_texts(tg, 111)), 30, "the answer")
            await rig.gateway.idle()
            await rig.close()
            assert bot_texts(tg, 111) == ["re: broken \ufffd text"]
            assert tg.pending_update_ids() == []

    asyncio.run(scenario())


def test_a_message_the_gateway_cannot_handle_is_logged_without_its_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            # An empty thread id is no valid session key: the message can't be handled.
            await rig.telegram.deliver("111", "my secret plan " * 1000, thread_id="")
            await rig.close()

    with caplog.at_level(logging.INFO, logger="pinch.gateway"):
        asyncio.run(scenario())
    [line] = [r.getMessage() for r in caplog.records if "Skipped an inbound" in r.getMessage()]
    assert "secret" not in line
    assert "telegram from 111, 15000 characters" in line and line.endswith("ValueError")
