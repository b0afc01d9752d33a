"""A streamed send that fails while the reply is being
finished must be logged in one line, not dumped as an asyncio traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from app.gateway.delivery import ReplyStream
from channels.base import ChannelError, OutboundMessage, SentMessage
from tests.gateway_support import FakeChannel


class FlakyChannel(FakeChannel):
    """The first send is slow to answer and then fails (a 502 from the platform)."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self.in_flight = asyncio.Event()
        self.failed = False

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        if not self.failed:
            self.failed = True
            self.in_flight.set()
            await asyncio.sleep(0.05)
            raise ChannelError("Telegram unreachable (Bad Gateway); check the network")
        return await super().send(message)


def test_a_streamed_send_failing_during_finish_is_one_log_line_and_the_reply_still_arrives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unhandled: list[dict[str, Any]] = []

    def on_unhandled(_loop: object, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), ChannelError):  # not other tests' leftovers
            unhandled.append(context)

    async def scenario() -> FlakyChannel:
        gc.collect()  # leftovers of earlier tests are reported now, not during this one
        asyncio.get_running_loop().set_exception_handler(on_unhandled)
        channel = FlakyChannel()
        stream = ReplyStream(channel, OutboundMessage("telegram", "1", ""))
        stream.feed("Hello")
        await channel.in_flight.wait()  # the first streamed send is on its way
        await stream.finish("Hello there")
        await asyncio.sleep(0.1)  # the failed send has ended
        gc.collect()  # an unretrieved task exception is reported when the task is collected
        return channel

    with caplog.at_level(logging.WARNING, logger="app.gateway.delivery"):
        channel = asyncio.run(scenario())
    assert unhandled == []
    assert channel.texts() == ["Hello there"]
    failures = [r for r in caplog.records if "Bad Gateway" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is None


class CutChannel(FakeChannel):
    """The platform posts the first message, then the connection drops before the answer (what
    Slack's adapter reports as a failure that may have been delivered)."""

    def __init__(self) -> None:
        super().__init__("slack")
        self.cut = True

    async def send(self, message: OutboundMessage) -> list[SentMessage]:
        sent = await super().send(message)
        if self.cut:
            self.cut = False
            raise ChannelError("Slack did not answer chat.postMessage", maybe_delivered=True)
        return sent


def test_a_send_that_may_have_been_delivered_is_not_sent_again_with_the_same_text() -> None:
    async def scenario() -> CutChannel:
        channel = CutChannel()
        stream = ReplyStream(channel, OutboundMessage("slack", "D1", ""))
        stream.feed("Hello there")
        with_retry = 0
        while True:  # the gateway retries a failed finish
            try:
                await stream.finish("Hello there")
                break
            except ChannelError:
                with_retry += 1
                assert with_retry < 3
        return channel

    channel = asyncio.run(scenario())
    assert channel.texts() == ["Hello there"]
