"""`pinch gateway` on PostgreSQL: the real command with the real Telegram adapter against the
fake Bot API server, its queue, leases, de-duplication and deliveries in the agent's schema;
killed with SIGKILL mid-turn and started again, every message is answered exactly once. (Two
gateways sharing agents by lease, one killed: tests/test_gateway_fleet.py; a live process's claim
never taken, a killed one's taken over: tests/test_store_processes.py.)"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from app.config import load_settings
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.test_gateway_telegram import pinch_gateway, wait_for


def test_pinch_gateway_on_postgres_killed_mid_turn_answers_each_message_once(
    pinch_home: Path, pg_dsn: str
) -> None:
    pg = {"PINCH_STORE__BACKEND": "postgres", "PINCH_STORE__DSN": pg_dsn}
    senders = [{"id": 500 + i, "is_bot": False, "first_name": f"P{i}"} for i in range(3)]
    texts = [f"p{i}q{n}" for n in range(3) for i in range(3)]
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(
            responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=0.3))
        )
        proc = pinch_gateway(tg, model, **pg)
        for text in texts:
            tg.push(tg.private_text(text, sender=senders[int(text[1])]))
        wait_for(lambda: len(model.requests) >= 3, what="the third turn")
        proc.kill()
        proc.wait()
        assert len(tg.sent) < len(texts)

        proc = pinch_gateway(tg, model, **pg)
        wait_for(
            lambda: all(any(t in m.text for m in tg.sent) for t in texts),
            what="every message answered",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    counts = {t: sum(bool(re.search(rf"\b{t}\b", m.text)) for m in tg.sent) for t in texts}
    assert counts == dict.fromkeys(texts, 1)
    settings = load_settings()
    assert not settings.database_path.exists()  # the SQLite file was never made
