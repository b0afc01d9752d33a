"""What a running `pinch gateway` writes to its log: APScheduler's routine INFO lines (each job
added or run, every 30 s) stay out; the scheduler's start and stop are logged once each."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.test_gateway_telegram import pinch_gateway, wait_for


def test_the_gateway_log_has_no_apscheduler_chatter_and_one_start_and_stop(
    pinch_home: Path,
) -> None:
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(responder(turn=text_reply("Hi.")))
        proc = pinch_gateway(tg, model)
        tg.push(tg.private_text("hello"))
        wait_for(lambda: bool(tg.sent), what="the answer")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log = proc.stderr.read() if proc.stderr else ""

    assert "Added job" not in log and "Adding job tentatively" not in log, log
    assert "Scheduler has been shut down" not in log, log
    assert log.count("Scheduler started") == 1, log
    assert log.count("Scheduler shut down") == 1, log
