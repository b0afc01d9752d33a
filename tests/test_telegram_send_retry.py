"""A Telegram send whose connection dropped after the
request went out may have been delivered; the adapter must say so, so the reply stream does not
send the same text again. A server error (the platform answered) is no such doubt."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from channels.base import ChannelError, OutboundMessage
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram_support import running


@pytest.fixture
def tg():
    with FakeTelegram() as server:
        yield server


def send_error(tg: FakeTelegram, tmp_path: Path) -> ChannelError:
    async def scenario() -> ChannelError:
        async with running(tg, tmp_path) as (channel, _):
            with pytest.raises(ChannelError) as caught:
                await channel.send(OutboundMessage("telegram", "111", "hello"))
            return caught.value

    return asyncio.run(scenario())


def test_a_send_cut_off_without_an_answer_may_have_been_delivered(tg, tmp_path):
    tg.disconnect_next("sendMessage", 5)

    assert send_error(tg, tmp_path).maybe_delivered


def test_a_send_refused_with_a_server_error_was_not_delivered(tg, tmp_path):
    tg.fail_next("sendMessage", 502, 5)

    assert not send_error(tg, tmp_path).maybe_delivered
