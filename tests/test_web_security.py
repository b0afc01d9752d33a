"""The web page's security rules, each against a real `pinch gateway` serving the page (plain
HTTP requests here; tests/test_web_page.py drives the page in Chromium)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.web.auth import issue_login_url, read_password_hash, verify_password
from app.web.security import LOGIN_CSRF_COOKIE, SESSION_COOKIE
from app.web.web_config import WebConfig
from memory.store.db import open_database
from memory.store.web_store import SqliteWebAuthStore
from tests import web_support
from tests.web_support import ROOT, WebRig, free_port, start_web_gateway

web_rig = web_support.web_rig  # the module's gateway (a pytest fixture)


def client(rig: WebRig) -> httpx.Client:
    return httpx.Client(base_url=rig.base, follow_redirects=False, timeout=10)


@pytest.fixture
def logged_in(web_rig: WebRig) -> Iterator[httpx.Client]:
    with client(web_rig) as http:
        answer = http.get(web_rig.login_url())
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        yield http


def csrf_of(http: httpx.Client, path: str = "/chat") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', http.get(path).text)
    assert found is not None
    return found.group(1)


def token_of(url: str) -> str:
    return url.rsplit("token=", 1)[1]


# -- login links --------------------------------------------------------------------------------


def test_a_login_link_gives_an_httponly_samesite_strict_cookie(web_rig: WebRig) -> None:
    with client(web_rig) as http:
        answer = http.get(web_rig.login_url())
        assert answer.status_code == 303
        cookie = next(
            v for k, v in answer.headers.multi_items() if k == "set-cookie" and SESSION_COOKIE in v
        )
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain http on loopback; Secure when served over https
        assert http.get("/").status_code == 200


def test_a_login_link_works_once(web_rig: WebRig) -> None:
    url = web_rig.login_url()
    with client(web_rig) as first:
        assert first.get(url).status_code == 303
    with client(web_rig) as second:
        answer = second.get(url)
        assert answer.status_code == 403
        assert "expired or was already used" in answer.text
        assert SESSION_COOKIE not in second.cookies
        assert second.get("/").status_code == 303  # still sent to /login


def test_an_expired_login_link_is_refused(web_rig: WebRig) -> None:
    settings = Settings(home=web_rig.home, web=WebConfig(port=web_rig.port))
    db = open_database(settings.database_path, vector_backend="numpy")
    try:  # made 11 minutes ago: 10 minutes is the limit
        url = issue_login_url(settings, SqliteWebAuthStore(db), clock=lambda: time.time() - 660)
    finally:
        db.close()
    with client(web_rig) as http:
        assert http.get(url).status_code == 403
        assert http.get("/").headers["location"] == "/login"


def test_the_login_link_token_never_reaches_the_gateway_log(web_rig: WebRig) -> None:
    url = web_rig.login_url()
    with client(web_rig) as http:
        http.get(url)
        http.get(url)  # the refused second use too
    time.sleep(0.3)
    log = web_rig.log_text()
    assert "Web page on" in log  # the log is the gateway's
    assert token_of(url) not in log
    assert "token=" not in log


def test_pinch_web_login_prints_a_link_while_the_gateway_runs(web_rig: WebRig) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "web", "login"],
        cwd=ROOT,
        env=web_rig.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    assert url.startswith(f"http://127.0.0.1:{web_rig.port}/login?token=")
    with client(web_rig) as http:
        assert http.get(url).status_code == 303
        assert "Overview" in http.get("/").text


def test_logout_ends_the_session_everywhere(web_rig: WebRig, logged_in: httpx.Client) -> None:
    session = logged_in.cookies[SESSION_COOKIE]
    csrf = csrf_of(logged_in, "/")
    answer = logged_in.post("/logout", data={"csrf": csrf}, headers={"Origin": web_rig.base})
    assert answer.status_code == 303 and answer.headers["location"] == "/login"
    with client(web_rig) as replay:  # the old cookie, replayed by someone who kept it
        replay.cookies.set(SESSION_COOKIE, session)
        assert replay.get("/").status_code == 303


# -- nothing before login ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/chat", "/chat/events", "/memory", "/health", "/nowhere"])
def test_nothing_is_served_before_login(web_rig: WebRig, path: str) -> None:
    with client(web_rig) as http:
        answer = http.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/login"
        page = http.get("/login").text
        for secret in (str(web_rig.home), "claude-test", "agent.sqlite", "workspace"):
            assert secret not in page


def test_a_forged_session_cookie_is_refused(web_rig: WebRig) -> None:
    with client(web_rig) as http:
        http.cookies.set(SESSION_COOKIE, "forged-session-id")
        assert http.get("/").status_code == 303


# -- state changes: CSRF and Origin ------------------------------------------------------------


def send(http: httpx.Client, rig: WebRig, **headers: str) -> httpx.Response:
    files = {"text": (None, "hello"), "client_id": (None, f"id{time.time_ns()}")}
    return http.post("/chat/send", files=files, headers=headers)


def test_a_post_without_the_csrf_token_is_refused(web_rig: WebRig, logged_in: httpx.Client) -> None:
    before = len(web_rig.model.requests)
    assert send(logged_in, web_rig, Origin=web_rig.base).status_code == 403
    wrong = send(logged_in, web_rig, Origin=web_rig.base, **{"X-CSRF-Token": "0" * 64})
    assert wrong.status_code == 403
    assert "CSRF" in wrong.text
    time.sleep(0.5)
    assert len(web_rig.model.requests) == before  # nothing was queued


def test_a_post_from_another_origin_is_refused(web_rig: WebRig, logged_in: httpx.Client) -> None:
    csrf = csrf_of(logged_in)
    for origin in ("http://evil.example", "null", f"http://localhost:{web_rig.port + 1}"):
        answer = send(logged_in, web_rig, Origin=origin, **{"X-CSRF-Token": csrf})
        assert answer.status_code == 403, origin
        assert "Origin" in answer.text
    assert send(logged_in, web_rig, **{"X-CSRF-Token": csrf}).status_code == 403  # no Origin


def test_a_post_with_token_and_origin_is_taken(web_rig: WebRig, logged_in: httpx.Client) -> None:
    csrf = csrf_of(logged_in)
    answer = send(logged_in, web_rig, Origin=web_rig.base, **{"X-CSRF-Token": csrf})
    assert answer.status_code == 200 and answer.json()["ok"] is True


# -- the Host header (DNS rebinding) -------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io:{port}"])
def test_a_foreign_host_header_is_refused(web_rig: WebRig, host: str) -> None:
    with client(web_rig) as http:
        answer = http.get(web_rig.login_url(), headers={"Host": host.format(port=web_rig.port)})
        assert answer.status_code == 403
        assert SESSION_COOKIE not in answer.headers.get("set-cookie", "")


def test_loopback_names_are_accepted_as_host(web_rig: WebRig) -> None:
    for host in (f"127.0.0.1:{web_rig.port}", f"localhost:{web_rig.port}"):
        with client(web_rig) as http:
            assert http.get("/login", headers={"Host": host}).status_code == 200


# -- headers on every answer -----------------------------------------------------------------------


def test_every_answer_forbids_inline_script_framing_sniffing_referrers_and_caching(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    for answer in (
        logged_in.get("/"),
        logged_in.get("/chat"),
        logged_in.get("/static/pinch.css"),
        httpx.get(web_rig.url("/login")),
        httpx.get(web_rig.url("/"), headers={"Host": "evil.example"}),
    ):
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cache-control"] == "no-store"
    assert "<script>" not in logged_in.get("/chat").text  # only <script src=…>


# -- exposure: a non-loopback host needs a password ------------------------------------------------


def test_a_non_loopback_host_without_a_password_is_refused_at_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINCH_")}
    env.update(
        PINCH_HOME=str(tmp_path / "home"),
        PINCH_WEB__HOST="0.0.0.0",
        PINCH_WEB__PORT=str(free_port()),
        ANTHROPIC_API_KEY="test-key",
        PINCH_MEMORY__EMBEDDING__PROVIDER="none",
    )
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "gateway"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    advice = " ".join(done.stderr.split())
    assert "no password is set" in advice
    assert "SSH tunnel" in advice and "Tailscale" in advice and "pinch web set-password" in advice
    assert not (tmp_path / "home" / "gateway.heartbeat").exists()  # refused before starting


def test_set_password_stores_a_scrypt_hash_readable_by_the_owner_only(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINCH_")}
    env["PINCH_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "web", "set-password", "--password-stdin"],
        cwd=ROOT,
        env=env,
        input="correct horse battery\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path / "home" / "web-password"
    assert path.stat().st_mode & 0o777 == 0o600
    stored = path.read_text()
    assert "correct horse" not in stored and stored.startswith("scrypt$")
    assert verify_password("correct horse battery", read_password_hash(tmp_path / "home") or "")
    assert not verify_password("correct horse batterY", stored)


def test_password_login_and_the_rate_limit_on_failed_attempts(tmp_path: Path) -> None:
    from app.web.auth import set_password
    from tests.agent_support import responder
    from tests.fakes.model_server import FakeModelServer
    from tests.fakes.telegram_server import FakeTelegram
    from tests.web_support import echo

    home = tmp_path / "pinch-home"
    set_password(home, "correct horse battery")
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(responder(turn=echo))
        rig = start_web_gateway(home, model, tg)
        try:
            with client(rig) as http:
                page = http.get("/login")
                assert 'type="password"' in page.text
                login_csrf = http.cookies[LOGIN_CSRF_COOKIE]
                form = {"csrf": login_csrf, "password": "correct horse battery"}
                assert http.post("/login", data=form).status_code == 403  # no Origin
                good = http.post("/login", data=form, headers={"Origin": rig.base})
                assert good.status_code == 303 and SESSION_COOKIE in http.cookies
            with client(rig) as http:
                http.get("/login")
                csrf = http.cookies[LOGIN_CSRF_COOKIE]
                statuses = [
                    http.post(
                        "/login",
                        data={"csrf": csrf, "password": f"guess {n}"},
                        headers={"Origin": rig.base},
                    ).status_code
                    for n in range(7)
                ]
                assert statuses[:5] == [403] * 5 and statuses[5:] == [429, 429]
                right = {"csrf": csrf, "password": "correct horse battery"}
                limited = http.post("/login", data=right, headers={"Origin": rig.base})
                assert limited.status_code == 429  # even the right one, for a minute
                assert http.get(rig.login_url()).status_code == 429
        finally:
            rig.stop()
