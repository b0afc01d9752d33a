"""The web page's security rules, each against a real `pinch gateway` serving the page (plain
HTTP requests here; tests/test_web_page.py drives the page in Chromium)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli.main import main
from app.config import Settings
from app.web.auth import issue_login_url, read_password_hash, verify_password
from app.web.security import LOGIN_CSRF_COOKIE, SESSION_COOKIE
from app.web.web_config import WebConfig
from memory.store.db import open_database
from memory.store.web_store import SqliteWebAuthStore
from tests import web_support
from tests.web_support import WebRig, free_port, start_web_gateway

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
    env = {"PINCH_HOME": str(web_rig.home), "PINCH_WEB__PORT": str(web_rig.port)}
    done = CliRunner().invoke(main, ["web", "login"], env=env)
    assert done.exit_code == 0, done.output
    url = done.stdout.strip().splitlines()[0]
    assert url.startswith(f"http://127.0.0.1:{web_rig.port}/login?token=")
    with client(web_rig) as http:  # the gateway (another process) takes it
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
    for origin in (
        "http://evil.example",
        "null",
        f"http://localhost:{web_rig.port + 1}",
        f"http://127.0.0.1:{web_rig.port}.evil.example",
        f"ftp://127.0.0.1:{web_rig.port}",
    ):
        answer = send(logged_in, web_rig, Origin=origin, **{"X-CSRF-Token": csrf})
        assert answer.status_code == 403, origin
        assert "Origin" in answer.text
    assert send(logged_in, web_rig, **{"X-CSRF-Token": csrf}).status_code == 403  # no Origin
    for site in ("cross-site", "same-site", "none"):  # "null" from a sandboxed frame, say
        fetch = {"Origin": "null", "Sec-Fetch-Site": site, "X-CSRF-Token": csrf}
        assert send(logged_in, web_rig, **fetch).status_code == 403, site
    assert send(logged_in, web_rig, Origin="null", **{"X-CSRF-Token": csrf}).status_code == 403


def test_a_post_with_token_and_origin_is_taken(web_rig: WebRig, logged_in: httpx.Client) -> None:
    csrf = csrf_of(logged_in)
    answer = send(logged_in, web_rig, Origin=web_rig.base, **{"X-CSRF-Token": csrf})
    assert answer.status_code == 200 and answer.json()["ok"] is True
    # Through an HTTPS proxy (Tailscale serve) the browser's origin is https, the hop is http.
    proxied = web_rig.base.replace("http://", "https://")
    assert send(logged_in, web_rig, Origin=proxied, **{"X-CSRF-Token": csrf}).status_code == 200


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
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
    assert "<script>" not in logged_in.get("/chat").text  # only <script src=…>


# -- exposure: a non-loopback host needs a password ------------------------------------------------


def test_a_non_loopback_host_without_a_password_is_refused_at_start(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from app.config import load_settings
    from app.gateway.run import GatewayError, run_gateway

    monkeypatch.setenv("PINCH_WEB__HOST", "0.0.0.0")
    monkeypatch.setenv("PINCH_TELEGRAM__BOT_TOKEN", "123:not-used")
    with pytest.raises(GatewayError) as refused:
        asyncio.run(run_gateway(load_settings(), note=lambda _line: None))
    advice = " ".join(str(refused.value).split())
    assert "no password is set" in advice
    assert "SSH tunnel" in advice and "Tailscale" in advice and "pinch web set-password" in advice
    assert not (pinch_home / "agents").exists()  # refused before anything started


def test_set_password_stores_a_scrypt_hash_readable_by_the_owner_only(pinch_home: Path) -> None:
    args = ["web", "set-password", "--password-stdin"]
    done = CliRunner().invoke(main, args, input="correct horse battery\n")
    assert done.exit_code == 0, done.output
    path = pinch_home / "web-password"
    assert path.stat().st_mode & 0o777 == 0o600
    stored = path.read_text()
    assert "correct horse" not in stored and stored.startswith("scrypt$")
    assert verify_password("correct horse battery", read_password_hash(pinch_home) or "")
    assert not verify_password("correct horse batterY", stored)
    short = CliRunner().invoke(main, args, input="short\n")
    assert short.exit_code == 1 and "too short" in short.output


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
        rig = start_web_gateway(home, model, tg, telegram=False)  # the page alone
        try:
            assert "Gateway running with web" in rig.log_text()
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
                assert http.get(f"{rig.base}/login?token=guessed").status_code == 429
                # A fresh link from `pinch web login` still works: no lock-out of the owner.
                assert http.get(rig.login_url()).status_code == 303
        finally:
            rig.stop()


def test_a_session_past_its_lifetime_is_refused(web_rig: WebRig) -> None:
    from app.web.auth import Logins

    settings = Settings(home=web_rig.home, web=WebConfig(port=web_rig.port))
    db = open_database(settings.database_path, vector_backend="numpy")
    try:  # logged in 25 hours ago; a session lasts 24
        then = time.time() - 25 * 3600
        store = SqliteWebAuthStore(db)
        url = issue_login_url(settings, store, clock=lambda: then)
        session_id = Logins(store, settings.web, web_rig.home, clock=lambda: then).redeem(
            token_of(url)
        )
    finally:
        db.close()
    assert session_id is not None
    with client(web_rig) as http:
        http.cookies.set(SESSION_COOKIE, session_id)
        assert http.get("/").status_code == 303


def test_the_same_message_sent_twice_is_answered_once(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    csrf = csrf_of(logged_in)
    before = len(web_rig.model.requests)
    files = {"text": (None, "only once please"), "client_id": (None, "double-click-0001")}
    headers = {"Origin": web_rig.base, "X-CSRF-Token": csrf}
    for _ in range(2):  # a double click, or a retry after a dropped connection
        assert logged_in.post("/chat/send", files=files, headers=headers).status_code == 200
    web_support.wait_for(lambda: len(web_rig.model.requests) > before, what="the turn")
    time.sleep(1.0)
    asked = [r.last_user_text() for r in web_rig.model.requests[before:]]
    assert sum("only once please" in text for text in asked) == 1


def test_the_scrollback_shows_a_compaction_summary_as_such_and_escaped(
    web_rig: WebRig, logged_in: httpx.Client
) -> None:
    from memory.store.sessions import SessionKey, SqliteSessionStore

    db = open_database(web_rig.home / "agents" / "main" / "agent.sqlite", vector_backend="numpy")
    try:
        store = SqliteSessionStore(db)
        session = store.current(SessionKey.owner_main("main"))
        store.append(session.id, "compaction", {"summary": "## Decisions\n- <b>blue</b> boat"})
    finally:
        db.close()
    page = logged_in.get("/chat").text
    assert "Summary of the earlier conversation" in page
    assert "&lt;b&gt;blue&lt;/b&gt; boat" in page and "<b>blue</b>" not in page


def test_the_access_log_never_writes_a_query_string(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio
    import logging

    from aiohttp import web

    from app.web.server import QuietAccessLogger

    async def scenario() -> None:
        async def ok(_request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/login", ok)
        runner = web.AppRunner(
            app, access_log_class=QuietAccessLogger, access_log=logging.getLogger("pinch.web.a")
        )
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{port}/login?token=SECRET-TOKEN-123")
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.DEBUG, logger="pinch.web.a"):
        asyncio.run(scenario())
    # The server's access log only: the test's own HTTP client logs the URL it asked for at
    # INFO when an earlier test has set the root logger's level so.
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "pinch.web.a")
    assert "GET /login 200" in logged
    assert "SECRET-TOKEN-123" not in logged and "token=" not in logged


def test_a_taken_port_leaves_the_gateway_running_its_other_channels(tmp_path: Path) -> None:
    import socket

    from tests.agent_support import responder
    from tests.fakes.model_server import FakeModelServer
    from tests.fakes.telegram_server import FakeTelegram
    from tests.web_support import echo

    with socket.socket() as taken, FakeModelServer() as model, FakeTelegram() as tg:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        model.respond_with(responder(turn=echo))
        rig = start_web_gateway(tmp_path / "pinch-home", model, tg, port=port, wait=False)
        try:
            web_support.wait_for(lambda: "could not listen" in rig.log_text(), what="the advice")
            assert "PINCH_WEB__PORT" in rig.log_text()
            beat = rig.home / "gateway.heartbeat"

            def web_reported() -> bool:  # the first beat may come before the page's failure
                if not beat.exists():
                    return False
                return "web" in json.loads(beat.read_text()).get("channels", {})

            web_support.wait_for(
                lambda: (
                    web_reported() and not json.loads(beat.read_text())["channels"]["web"]["ok"]
                ),
                timeout=45.0,
                what="the heartbeat naming the page down",
            )
            channels = json.loads(beat.read_text())["channels"]
            assert channels["telegram"]["ok"] and not channels["web"]["ok"]
            assert rig.proc.poll() is None  # the gateway runs on without the page
        finally:
            rig.stop()


def test_set_password_reads_one_line_from_a_pipe(pinch_home: Path) -> None:
    done = CliRunner().invoke(main, ["web", "set-password"], input="a pass phrase from a pipe\n")
    assert done.exit_code == 0, done.output
    assert verify_password("a pass phrase from a pipe", read_password_hash(pinch_home) or "")


def test_an_unknown_address_after_login_is_a_page_not_a_stack_trace(
    logged_in: httpx.Client,
) -> None:
    answer = logged_in.get("/no/such/page")
    assert answer.status_code == 404
    assert "There is no page at this address." in answer.text and 'href="/chat"' in answer.text
