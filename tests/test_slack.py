"""The Slack adapter against a fake Slack (Web API + Socket Mode websocket) on 127.0.0.1, driven
by the real slack-bolt / slack_sdk clients."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from channels.base import ChannelError, InboundMessage, OutboundMessage
from channels.config import SlackConfig
from channels.slack import SlackChannel
from tests.fakes.slack_server import BOT_USER_ID, FakeSlack


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (pytest-asyncio is not a dependency)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return wrapper


class Inbox:
    """The gateway's side: records every InboundMessage, lets a test wait for them."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._changed = asyncio.Condition()

    async def __call__(self, message: InboundMessage) -> None:
        async with self._changed:
            self.messages.append(message)
            self._changed.notify_all()

    async def wait(self, count: int = 1, timeout: float = 5.0) -> list[InboundMessage]:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.messages) >= count), timeout
            )
        return self.messages


def slack_config(slack: FakeSlack, **changes: Any) -> SlackConfig:
    values: dict[str, Any] = {
        "bot_token": SecretStr(slack.bot_token),
        "app_token": SecretStr(slack.app_token),
        "api_base_url": slack.api_url,
        "timeout_s": 2.0,
        "ping_interval_s": 0.2,
    }
    values.update(changes)
    return SlackConfig(**values)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, *, handler: Any = None, **changes: Any
) -> AsyncIterator[tuple[FakeSlack, SlackChannel, Inbox]]:
    async with FakeSlack() as slack:
        channel = SlackChannel(
            slack_config(slack, **changes),
            inbox_dir=tmp_path / "workspace" / "inbox",
            state_dir=tmp_path / "state",
        )
        inbox = Inbox()
        await channel.start(handler or inbox)
        await slack.wait_connected()
        try:
            yield slack, channel, inbox
        finally:
            await channel.stop()


async def settle(slack: FakeSlack, envelope_id: str, channel: SlackChannel) -> None:
    """Wait until an envelope is acked and whatever it started in the adapter has finished."""
    await slack.wait_acked(envelope_id)
    for _ in range(3):
        await asyncio.sleep(0)
    while channel._lanes:
        await asyncio.gather(*channel._lanes.values(), return_exceptions=True)


# -- receiving ---------------------------------------------------------------------------------


@run
async def test_a_direct_message_arrives_as_a_direct_mentioned_message(tmp_path: Path) -> None:
    async with running(tmp_path) as (slack, _channel, inbox):
        slack.users["U0OWNER"] = {"id": "U0OWNER", "name": "ann", "profile": {"display_name": "Ann"}}
        event = slack.dm("hello &amp; welcome")
        await slack.push_event(event)
        [message] = await inbox.wait()
    assert message.channel == "slack"
    assert message.chat_type == "direct"
    assert message.chat_id == "D0DM"
    assert message.sender_id == "U0OWNER"
    assert message.sender_name == "Ann"
    assert message.text == "hello & welcome"
    assert message.mentioned is True
    assert message.thread_id is None  # DMs are not threaded
    assert message.dedup_key == f"D0DM:{event['ts']}"
    assert message.message_id == event["ts"]
