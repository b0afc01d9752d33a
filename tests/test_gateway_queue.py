"""The durable queue in one process: stopping with turns in flight, resuming after a restart,
and the one-gateway lock. (tests/test_gateway_process.py kills a real gateway process.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.requests import AgentRequest
from app.gateway.run import acquire_lock
from app.gateway.server import GatewayError, GatewayOptions
from app.gateway.turns import Runtime, TurnResult
from tests.agent_support import make_kit, responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.gateway_support import DB_NAME, OWNER_TG, FakeChannel, make_rig


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def test_stopping_lets_a_running_turn_finish(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=lambda r: text_reply("finished", delay_s=0.3)))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "long question")
            await until(lambda: bool(server.requests))
            await rig.gateway.stop(grace_s=5)
            assert rig.telegram.texts() == ["finished"]
            assert rig.gateway.store.counts() == {"done": 1}
            await rig.gateway.runtime.aclose()

    asyncio.run(scenario())


def test_messages_left_when_the_grace_period_ends_are_answered_after_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=lambda r: text_reply("slow", delay_s=1.0)))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "one")
            await until(lambda: bool(server.requests))
            await rig.telegram.deliver(OWNER_TG, "two")  # waits behind "one"
            await rig.gateway.stop(grace_s=0.05)
            assert rig.telegram.texts() == []
            await rig.gateway.runtime.aclose()

            server.respond_with(responder(turn=echo))
            kit = make_kit(tmp_path, server, workspace=rig.kit.workspace, db_name=DB_NAME)
            again = make_rig(tmp_path, server, kit=kit)
            again.telegram = again.gateway.channels["telegram"]  # type: ignore[assignment]
            await again.gateway.start()
            await again.gateway.idle()
            await again.close()
            assert again.telegram.texts() == ["re: one", "re: two"]

    asyncio.run(scenario())


def test_messages_arriving_while_stopping_stay_queued_for_the_next_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=lambda r: text_reply("first done", delay_s=0.3)))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "first")
            await until(lambda: bool(server.requests))
            stopping = asyncio.ensure_future(rig.gateway.stop(grace_s=5))
            await asyncio.sleep(0)
            await rig.telegram.deliver("111", "second", dedup_key="x:2")
            await stopping
            assert rig.telegram.texts() == ["first done"]
            assert rig.gateway.store.counts() == {"done": 1, "queued": 1}
            await rig.gateway.runtime.aclose()

    asyncio.run(scenario())


def test_a_turn_interrupted_after_its_reply_began_edits_that_reply_after_a_restart(
    tmp_path: Path,
) -> None:
    async def stuck(
        runtime: Runtime, request: AgentRequest, on_text: Callable[[str], None]
    ) -> TurnResult:
        on_text("Thinking about it")
        await asyncio.sleep(60)
        raise AssertionError("never reached")

    async def answer(
        runtime: Runtime, request: AgentRequest, on_text: Callable[[str], None]
    ) -> TurnResult:
        return TurnResult("The full answer.")

    async def scenario() -> None:
        with FakeModelServer() as server:
            rig = make_rig(tmp_path, server, turn_runner=stuck)
            channel = rig.telegram
            await rig.gateway.start()
            await channel.deliver(OWNER_TG, "question")
            await until(lambda: channel.sends == 1)
            await rig.gateway.stop(grace_s=0.05)  # as if killed mid-turn
            await rig.gateway.runtime.aclose()

            kit = make_kit(tmp_path, server, workspace=rig.kit.workspace, db_name=DB_NAME)
            again = make_rig(tmp_path, server, kit=kit, turn_runner=answer)
            again.gateway.channels["telegram"] = channel
            await again.gateway.start()
            await again.gateway.idle()
            await again.close()
            assert channel.sends == 1
            assert channel.texts() == ["The full answer."]

    asyncio.run(scenario())


def test_a_long_streamed_reply_is_split_and_every_part_kept(tmp_path: Path) -> None:
    long = "\n\n".join(f"Paragraph {i}: " + "word " * 30 for i in range(8))

    async def scenario() -> FakeChannel:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=text_reply(long)))
            rig = make_rig(tmp_path, server)
            rig.telegram.max_message_chars = 400
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "tell me a lot")
            await rig.gateway.idle()
            await rig.close()
            return rig.telegram

    channel = asyncio.run(scenario())
    texts = channel.texts()
    assert len(texts) > 1 and all(len(t) <= 400 for t in texts)
    assert " ".join(" ".join(texts).split()) == " ".join(long.split())


def test_a_second_gateway_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    held = acquire_lock(tmp_path / "gateway.lock")
    try:
        with pytest.raises(GatewayError, match="already running"):
            acquire_lock(tmp_path / "gateway.lock")
    finally:
        held.close()
    acquire_lock(tmp_path / "gateway.lock").close()  # free again once the first one is gone


def test_options_default_to_the_gateway_settings() -> None:
    from app.config import load_settings
    from app.wiring import options_from

    options = options_from(load_settings())
    assert options.collect_window_s == 1.5
    assert options.max_concurrent_turns == 4
    assert isinstance(options, GatewayOptions)


def test_a_reply_finished_while_its_first_send_is_in_flight_is_sent_once() -> None:
    from app.gateway.delivery import ReplyStream
    from channels.base import OutboundMessage, SentMessage

    class SlowChannel(FakeChannel):
        async def send(self, message: OutboundMessage) -> list[SentMessage]:
            sent = await super().send(message)
            await asyncio.sleep(0.05)  # accepted, but the answer is slow to come back
            return sent

    async def scenario() -> SlowChannel:
        channel = SlowChannel("telegram")
        stream = ReplyStream(channel, OutboundMessage("telegram", "1", ""))
        stream.feed("Hello")
        await asyncio.sleep(0.01)  # the first send is on its way
        await stream.finish("Hello there")
        return channel

    channel = asyncio.run(scenario())
    assert channel.sends == 1
    assert channel.texts() == ["Hello there"]


def test_cancelling_turns_while_stopping_ends_the_wait_at_once(tmp_path: Path) -> None:
    async def scenario() -> float:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=lambda r: text_reply("slow", delay_s=3.0)))
            rig = make_rig(tmp_path, server)
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "one")
            await until(lambda: bool(server.requests))
            loop = asyncio.get_running_loop()
            started = loop.time()
            stopping = asyncio.ensure_future(rig.gateway.stop(grace_s=30))
            await asyncio.sleep(0)
            rig.gateway.cancel_turns()  # the second Ctrl-C
            await stopping
            assert rig.gateway.store.counts() == {"running": 1}  # queued again on restart
            await rig.gateway.runtime.aclose()
            return loop.time() - started

    assert asyncio.run(scenario()) < 5


def test_typing_shows_as_soon_as_a_message_is_queued_not_after_the_collect_window(
    tmp_path: Path,
) -> None:
    async def scenario() -> int:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            rig = make_rig(tmp_path, server, options=GatewayOptions(collect_window_s=5.0))
            await rig.gateway.start()
            await rig.telegram.deliver(OWNER_TG, "hello")
            await until(lambda: rig.telegram.typing_calls > 0, timeout=1.0)
            typed, answered = rig.telegram.typing_calls, bool(server.requests)
            rig.gateway.cancel_turns()
            await rig.close()
            assert not answered  # still collecting
            return typed

    assert asyncio.run(scenario()) == 1
