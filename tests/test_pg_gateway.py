"""`pinch gateway` on PostgreSQL: the real command with the real Telegram adapter against the
fake Bot API server, its queue, leases, de-duplication and deliveries in the agent's schema;
killed with SIGKILL mid-turn and started again, every message is answered exactly once; and two
gateways on one agent schema, one killed mid-turn: the other takes the turn over."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from app.config import load_settings
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.fakes.relay_server import RelayServer
from tests.fakes.telegram_server import FakeTelegram
from tests.test_gateway_process import start_gateway
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


def test_a_gateway_killed_mid_turn_is_taken_over_by_another_on_the_same_database(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Two `pinch gateway` processes (two homes, one agent schema): the first is killed with
    SIGKILL while it runs a turn; the second, already running, takes that turn over (the dead
    process's claim) and answers it once — and never took it while the first was alive."""
    pg = {"PINCH_STORE__BACKEND": "postgres", "PINCH_STORE__DSN": pg_dsn}
    with FakeModelServer() as model, RelayServer() as relay_a, RelayServer() as relay_b:
        model.respond_with(
            responder(turn=lambda r: text_reply(f"re: {r.last_user_text()}", delay_s=2.0))
        )
        home_a, home_b = tmp_path / "a", tmp_path / "b"
        a = start_gateway(model, relay_a, home_a, PINCH_HOME=str(home_a), **pg)
        b = start_gateway(model, relay_b, home_b, PINCH_HOME=str(home_b), **pg)
        try:
            relay_a.post(chat_id="501", text="question")
            wait_for(lambda: len(model.requests) == 1, what="the first gateway's turn")
            a.kill()
            a.wait()
            assert relay_a.reply_texts() == [] and relay_b.reply_texts() == []
            wait_for(lambda: bool(relay_b.reply_texts()), timeout=40, what="the takeover")
        finally:
            for proc in (a, b):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
    assert [t for t in relay_b.reply_texts() if "question" in t] == [
        relay_b.reply_texts()[0]
    ]  # answered once, by the gateway that took it over
    assert len(model.requests) == 2  # the killed turn, then the taken-over one
