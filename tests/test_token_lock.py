""" "one poller per token" held only within one
PINCH_HOME, so two data directories with the same bot token both polled and fought with 409
Conflicts. The lock is now machine-wide (and still per data directory)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from channels.base import ChannelError
from channels.telegram.token_lock import TokenLock
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram_support import Inbox, make_channel

HOLD_LOCK = """
import fcntl, sys
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.truncate(0)
f.write("4242")
f.flush()
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_second_data_directory_cannot_poll_a_token_another_process_polls(
    tmp_path: Path,
) -> None:
    with FakeTelegram() as tg:
        lock = TokenLock(tmp_path / "home-a" / "state", tg.token)
        assert lock.machine_path.parent == Path(os.environ["XDG_RUNTIME_DIR"]) / "pinch"
        assert tg.token not in str(lock.machine_path)
        lock.acquire()  # creates the file and its folder; the other process takes it next
        lock.release()
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(lock.machine_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            with pytest.raises(ChannelError, match=r"pid 4242.*another PINCH_HOME"):
                asyncio.run(make_channel(tg, tmp_path / "home-b").start(Inbox()))
            assert tg.calls_to("getUpdates") == [] and tg.calls_to("getMe") == []
        finally:
            holder.communicate("")


def test_the_token_is_free_again_for_another_data_directory_after_a_stop(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with FakeTelegram() as tg:
            first = make_channel(tg, tmp_path / "home-a")
            await first.start(Inbox())
            with pytest.raises(ChannelError, match="already receiving this Telegram bot"):
                await make_channel(tg, tmp_path / "home-b").start(Inbox())
            await first.stop()
            second = make_channel(tg, tmp_path / "home-b")
            await second.start(Inbox())
            await second.stop()

    asyncio.run(scenario())
