"""Helpers for the Telegram adapter tests: a channel wired to the fake Bot API server, and an
inbox that collects what the adapter hands to the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from channels.base import InboundMessage
from channels.channel_config import TelegramConfig
from channels.telegram.adapter import TelegramChannel
from memory.files.inbox import Inbox as FileInbox
from tests.fakes.telegram_server import FakeTelegram


def telegram_config(tg: FakeTelegram, **changes: Any) -> TelegramConfig:
    values: dict[str, Any] = {
        "bot_token": SecretStr(tg.token),
        "api_base_url": tg.url,
        "poll_timeout_s": 1,
        "poll_stall_s": 10.0,
        "media_group_wait_s": 0.2,
    }
    values.update(changes)
    return TelegramConfig(**values)


class Inbox:
    """The gateway's side: records each InboundMessage; `fail_next` makes it raise once."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.calls = 0
        self.fail_next = 0
        self.hold: asyncio.Event | None = None

    async def __call__(self, message: InboundMessage) -> None:
        self.calls += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("database is locked")
        self.messages.append(message)

    async def wait_for(self, count: int, timeout: float = 5.0) -> list[InboundMessage]:
        await until(lambda: len(self.messages) >= count, timeout, f"{count} messages")
        return self.messages


async def until(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait for something the fake server (another thread) or the adapter does."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def make_channel(tg: FakeTelegram, tmp_path: Path, **changes: Any) -> TelegramChannel:
    return TelegramChannel(
        telegram_config(tg, **changes),
        inbox=FileInbox(tmp_path / "workspace"),
        state_dir=tmp_path / "state",
        retry_base_s=0.05,
    )


@contextlib.asynccontextmanager
async def running(
    tg: FakeTelegram, tmp_path: Path, inbox: Inbox | None = None, **changes: Any
) -> AsyncIterator[tuple[TelegramChannel, Inbox]]:
    inbox = inbox or Inbox()
    channel = make_channel(tg, tmp_path, **changes)
    await channel.start(inbox)
    try:
        yield channel, inbox
    finally:
        await channel.stop()
