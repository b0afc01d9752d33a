"""A Telegram call that never left (issue 19, a burst): python-telegram-bot's real HTTPXRequest
against a listener that takes no connection. A connect timeout and a pool timeout are "Timed
out" errors like a lost answer, but the request was not sent: the adapter tries them again and
never takes them for a message that may have been delivered (which the reply stream would then
not send again: a lost reply)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from telegram.error import NetworkError, TimedOut
from telegram.request import HTTPXRequest

from channels.telegram.adapter import _maybe_delivered, _never_sent
from tests.fakes.tcp_gate import full_listener as hanging_port
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
def full_listener() -> Iterator[int]:
    with hanging_port() as port:
        yield port


async def failure(port: int, *, at_once: int) -> list[NetworkError]:
    request = HTTPXRequest(connection_pool_size=1, connect_timeout=0.3, pool_timeout=0.1)
    await request.initialize()
    try:
        url = f"http://127.0.0.1:{port}/botTOKEN/sendMessage"
        calls = [request.post(url, request_data=None) for _ in range(at_once)]
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        await request.shutdown()
    assert all(isinstance(r, NetworkError) for r in results), results
    return [r for r in results if isinstance(r, NetworkError)]


def test_a_connect_timeout_was_never_sent(full_listener: int) -> None:
    (error,) = asyncio.run(failure(full_listener, at_once=1))
    assert isinstance(error, TimedOut) and type(error.__cause__).__name__ == "ConnectTimeout"
    assert _never_sent(error)
    assert not _maybe_delivered(error)


def test_a_pool_timeout_was_never_sent(full_listener: int) -> None:
    errors = asyncio.run(failure(full_listener, at_once=2))  # one connects, one waits for it
    pool = [e for e in errors if "Pool timeout" in e.message]
    assert pool and all(_never_sent(e) and not _maybe_delivered(e) for e in pool)


def test_a_timed_out_answer_may_have_been_delivered() -> None:
    with FakeTelegram() as tg:
        tg.disconnect_next("sendMessage", 1)

        async def call() -> NetworkError:
            request = HTTPXRequest(read_timeout=5)
            await request.initialize()
            try:
                await request.post(f"{tg.url}/bot{tg.token}/sendMessage", request_data=None)
            except NetworkError as error:
                return error
            finally:
                await request.shutdown()
            raise AssertionError("the call succeeded")

        error = asyncio.run(call())
    assert not _never_sent(error)
    assert _maybe_delivered(error)
