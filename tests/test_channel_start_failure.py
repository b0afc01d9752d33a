"""A channel that failed to start was logged as
"could not start" and then "Gateway running with telegram". Now: no channel started → exit 1
with each reason; some did → one line naming what runs and what failed, and `pinch doctor
--health` reports the failed one."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from app.gateway.heartbeat import health_problem, read_heartbeat
from app.gateway.server import GatewayError, GatewayOptions
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway_support import make_rig
from tests.telegram_support import make_channel
from tests.test_gateway_telegram import pinch_gateway


def test_pinch_gateway_whose_only_channel_cannot_start_exits_1_saying_why(
    tmp_path: Path,
) -> None:
    with FakeModelServer() as model, FakeTelegram() as tg:
        gateway = pinch_gateway(tg, model, PINCH_TELEGRAM__MODE="webhook")
        _, err = gateway.communicate(timeout=60)
    assert gateway.returncode == 1
    assert "No channel could start — telegram: Telegram webhook mode needs" in err
    assert "Gateway running" not in err


def test_a_gateway_with_one_channel_failing_says_which_run_and_the_health_check_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir()

    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            server.respond_with(responder(turn=text_reply("hi")))
            options = GatewayOptions(
                collect_window_s=0.0, heartbeat_path=home / "gateway.heartbeat"
            )
            rig = make_rig(tmp_path, server, options=options)
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path, mode="webhook")
            await rig.gateway.start()  # slack (a FakeChannel) starts, telegram cannot
            await rig.gateway.write_heartbeat()
            problem = health_problem(read_heartbeat(home))
            await rig.close()
            assert problem is not None
            assert problem.startswith("channel down: telegram: could not start: Telegram webhook")

    with caplog.at_level(logging.INFO, logger="pinch.gateway"):
        asyncio.run(scenario())
    [summary] = [r for r in caplog.records if "Gateway running" in r.getMessage()]
    assert summary.levelno == logging.WARNING
    assert summary.getMessage().startswith(
        "Gateway running with slack only; not running: telegram: Telegram webhook mode needs"
    )


def test_a_gateway_whose_every_channel_fails_raises_with_each_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server, FakeTelegram() as tg:
            rig = make_rig(tmp_path, server)
            del rig.gateway.channels["slack"]
            rig.gateway.channels["telegram"] = make_channel(tg, tmp_path, mode="webhook")
            with pytest.raises(GatewayError, match="No channel could start — telegram: "):
                await rig.gateway.start()
            await rig.gateway.runtime.aclose()

    asyncio.run(scenario())


def test_with_no_platform_token_the_gateway_runs_the_page_alone_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.config import load_settings
    from app.gateway.run import run_gateway

    with pytest.raises(GatewayError, match="No channel to run: set PINCH_TELEGRAM__BOT_TOKEN"):
        asyncio.run(run_gateway(load_settings(), note=lambda _line: None))  # [web] by default


def test_a_web_page_that_cannot_be_served_does_not_make_the_gateway_unhealthy() -> None:
    import os
    import time

    from app.gateway.heartbeat import Heartbeat
    from channels.base import ChannelHealth

    web_down = ChannelHealth(False, "could not start: port 8765 is taken")
    beat = Heartbeat(
        at=time.time(),
        pid=os.getpid(),
        channels={"telegram": ChannelHealth(True, "polling"), "web": web_down},
    )
    assert health_problem(beat) is None  # the page's trouble is doctor's and the log's
    beat = Heartbeat(
        at=time.time(),
        pid=os.getpid(),
        channels={"telegram": ChannelHealth(False, "could not start: 401"), "web": web_down},
    )
    assert health_problem(beat) == "channel down: telegram: could not start: 401"
