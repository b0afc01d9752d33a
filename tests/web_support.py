"""The web page under test: a real `pinch gateway` process (the fake Telegram Bot API and the
scripted model server from tests/fakes) serving the page on a free port, and Playwright's
Chromium (Debian's, `tests.system_tools.need("chromium")`) logged in through a one-time link.

    from tests import web_support
    browser, web_rig, web_page = web_support.browser, web_support.web_rig, web_support.web_page

    def test_something(web_page: Page, web_rig: WebRig) -> None:
        web_rig.model.respond_with(responder(turn=text_reply("hi")))
        web_page.goto(web_rig.url("/chat"))
        screenshot(web_page, "chat")          # test-artifacts/web/chat-desktop.png, -phone.png

`web_rig` is one gateway per test module (its own Pinch home, owner 111 on Telegram, pairing
on); `web_page` a fresh, logged-in browser context per test. `start_web_gateway` starts more
(with other settings); `WebRig.login_url()` is a fresh one-time link, made the way `pinch web
login` makes it (in the agent database the gateway reads).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.system_tools import need

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "web"
OWNER_TG = 111
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 375, "height": 780}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # another process: polling is the only way to watch it
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def echo(request: RecordedRequest) -> Reply:
    return text_reply(f"re: {request.last_user_text()}")


@dataclass
class WebRig:
    """A running `pinch gateway` with the web page on `port`."""

    home: Path
    port: int
    model: FakeModelServer
    tg: FakeTelegram
    proc: subprocess.Popen[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    _log: IO[str] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def login_url(self) -> str:
        """A fresh one-time login link (what `pinch web login` prints)."""
        from app.config import Settings
        from app.web.auth import issue_login_url
        from app.web.web_config import WebConfig
        from memory.store.db import open_database
        from memory.store.web_store import SqliteWebAuthStore

        settings = Settings(home=self.home, web=WebConfig(port=self.port))
        db = open_database(settings.database_path, vector_backend="numpy")
        try:
            return issue_login_url(settings, SqliteWebAuthStore(db))
        finally:
            db.close()

    def log_text(self) -> str:
        """Everything the gateway wrote to stdout and stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def bot_texts(self, chat_id: int = OWNER_TG) -> list[str]:
        return [m.text for m in self.tg.sent if m.chat_id == chat_id]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self._log is not None:
            self._log.close()
        return code


def gateway_env(home: Path, model: FakeModelServer, tg: FakeTelegram, port: int) -> dict[str, str]:
    """The environment of a test gateway: nothing of the developer's PINCH_* settings, and its
    own XDG_RUNTIME_DIR (the machine-wide lock on the fake bot token is then its own)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PINCH_")}
    runtime_dir = home.parent / f"xdg-run-{home.name}"
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {
        **base,
        "XDG_RUNTIME_DIR": str(runtime_dir),
        "PINCH_HOME": str(home),
        "PINCH_TELEGRAM__BOT_TOKEN": tg.token,
        "PINCH_TELEGRAM__API_BASE_URL": tg.url,
        "PINCH_TELEGRAM__POLL_TIMEOUT_S": "1",
        "PINCH_OWNERS__TELEGRAM": f'["{OWNER_TG}"]',
        "PINCH_AGENT__MODEL": "claude-test",
        "PINCH_AGENT__API_BASE": model.url,
        "PINCH_AGENT__MAX_RETRIES": "0",
        "PINCH_AGENT__RECALL_MODE": "triggers",
        "ANTHROPIC_API_KEY": "test-key",
        "PINCH_MEMORY__EMBEDDING__PROVIDER": "none",
        "PINCH_GATEWAY__COLLECT_WINDOW_MS": "0",
        "PINCH_WEB__PORT": str(port),
    }


def start_web_gateway(
    home: Path,
    model: FakeModelServer,
    tg: FakeTelegram,
    *,
    port: int | None = None,
    wait: bool = True,
    telegram: bool = True,
    **env: str,
) -> WebRig:
    """`pinch gateway` (the real command) with the page on `port` (a free one by default) and,
    with `telegram`, the fake Bot API's bot; returns once the page answers (with `wait`) or the
    process ended."""
    port = port or free_port()
    home.mkdir(parents=True, exist_ok=True)
    log_path = home.parent / f"gateway-{port}.log"
    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed by WebRig.stop
    environ = {**gateway_env(home, model, tg, port), **env}
    if not telegram:  # the page alone: only when asked for in so many words
        del environ["PINCH_TELEGRAM__BOT_TOKEN"]
        environ["PINCH_WEB__ENABLED"] = "true"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "gateway"],
        cwd=ROOT,
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    rig = WebRig(home, port, model, tg, proc, log_path, environ, log)
    if wait:
        wait_for(lambda: _answers(rig) or proc.poll() is not None, what="the web page")
        if proc.poll() is not None:
            raise AssertionError(f"the gateway ended: {rig.log_text()}")
    return rig


def _answers(rig: WebRig) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", rig.port)) == 0


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebRig]:
    """One gateway (with the page) per test module, answering with `echo` until a test says
    otherwise (`web_rig.model.respond_with(...)`)."""
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(responder(turn=echo))
        rig = start_web_gateway(tmp_path_factory.mktemp("web") / "pinch-home", model, tg)
        try:
            yield rig
        finally:
            rig.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, once per test module: Playwright's sync API keeps
    an event loop running in this thread while it is open, so a session-wide browser would make
    every later test's `asyncio.run` fail ("cannot be called from a running event loop")."""
    executable = need("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def web_page(browser: Any, web_rig: WebRig) -> Iterator[Any]:
    """A fresh browser context logged in through a one-time link, on the overview. At the end,
    the test fails if the browser reported a Content-Security-Policy violation (an inline
    script or style the page must not have)."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    violations: list[str] = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(web_rig.login_url())
    assert page.url == web_rig.url("/"), page.url
    try:
        yield page
    finally:
        context.close()
    assert not violations, violations


def screenshot(page: Any, name: str, *, full_page: bool = True) -> list[Path]:
    """Save the page at desktop (1280 px) and phone (375 px) width as
    test-artifacts/web/NAME-desktop.png and NAME-phone.png: the full page, or (`full_page`
    False, for a page with a sticky footer like the chat) the window scrolled to the end."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    saved = []
    for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        path = ARTIFACTS / f"{name}-{label}.png"
        if not full_page:
            page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
        page.screenshot(path=str(path), full_page=full_page)
        saved.append(path)
    page.set_viewport_size(DESKTOP)
    return saved
