"""The web page served by a real `pinch gateway` whose agent lives in PostgreSQL: a one-time
login link made in the agent's schema logs in (once), and every page reads the schema — the
overview, memory (listing and search), sessions, access, automations, dreams and health — with
the owner's Telegram conversation in it; the SQLite file is never made."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.config import Settings
from app.store_factory import open_postgres_store
from app.web.auth import digest, issue_login_url
from app.web.web_config import WebConfig
from memory.store.backends import store_for
from memory.store.store_config import StoreConfig
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer
from tests.fakes.telegram_server import OWNER, FakeTelegram
from tests.web_support import echo, start_web_gateway, wait_for


def test_the_web_page_on_postgres_logs_in_once_and_shows_the_agents_data(
    tmp_path: Path, pg_dsn: str
) -> None:
    home = tmp_path / "pinch-home"
    pg = {"PINCH_STORE__BACKEND": "postgres", "PINCH_STORE__DSN": pg_dsn}
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(responder(turn=echo))
        rig = start_web_gateway(home, model, tg, **pg)
        try:
            (home / "workspace" / "MEMORY.md").write_text("# Memory\n\nThe kettle is green.\n")
            tg.push(
                tg.private_text(
                    "hello from telegram",
                    sender=OWNER,
                )
            )
            wait_for(lambda: bool(rig.bot_texts()), what="the Telegram answer")
            settings = Settings(home=home, web=WebConfig(port=rig.port), store=_store(pg_dsn))
            db = open_postgres_store(settings)  # what `pinch web login` does on PostgreSQL
            try:
                link = issue_login_url(settings, store_for("WebAuthStore", db))
            finally:
                db.close()
            with httpx.Client(base_url=rig.base, follow_redirects=True, timeout=30) as web:
                assert web.get(link).status_code == 200 and web.cookies
                pages = {p: web.get(p) for p in ("/", "/sessions", "/access", "/automations")}
                pages["/dreams"] = web.get("/dreams")
                pages["/health"] = web.get("/health")
                pages["/memory/search"] = web.get("/memory/search", params={"q": "kettle"})
                pages["/memory"] = web.get("/memory")
            db = open_postgres_store(settings)
            try:  # the link was used: it never logs in again
                token = link.split("token=", 1)[1]
                used = not store_for("WebAuthStore", db).redeem_token(digest(token), time.time())
            finally:
                db.close()
        finally:
            assert rig.stop() == 0, rig.log_text()
    assert {p: r.status_code for p, r in pages.items()} == dict.fromkeys(pages, 200)
    assert "MEMORY.md" in pages["/memory"].text
    assert "1 sessions" in pages["/sessions"].text  # the owner's conversation, from Telegram
    assert used
    assert not (home / "agents" / "main" / "agent.sqlite").exists()


def _store(dsn: str) -> StoreConfig:
    return StoreConfig(backend="postgres", dsn=dsn)  # type: ignore[arg-type]
