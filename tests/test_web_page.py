"""The web page in a real browser (Debian's Chromium through Playwright) against a real
`pinch gateway` with the fake Telegram Bot API and the scripted model server: logging in, the
chat with its streamed reply, one conversation with Telegram, escaping, stop, /new, uploads.
Screenshots of each page at 1280 and 375 px go to test-artifacts/web/."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from tests import web_support
from tests.agent_support import responder
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import FakeTelegram
from tests.web_support import WebRig, echo, screenshot, start_web_gateway, wait_for

browser, web_rig, web_page = web_support.browser, web_support.web_rig, web_support.web_page

XSS_IMG = "<img src=x onerror=\"window.__pwned=1;console.log('PWNED')\">"
SHOWCASE = """Here is the weekend, from your notes:

**Saturday**
- 10:00 farmers' market (bring the *blue* bags)
- buy `sourdough` starter

**Sunday**

| time | what |
|---|---|
| 12:30 | lunch at Rosa's |
| 16:00 | call Mum |

> You said the boat needs a coat of varnish before spring."""
XSS_SCRIPT = "<script>window.__pwned=2;console.log('PWNED')</script>"


def chat(page: Any, rig: WebRig) -> None:
    page.goto(rig.url("/chat"))
    page.wait_for_selector("#chat-form")


def say(page: Any, text: str) -> None:
    page.fill("textarea[name=text]", text)
    page.click("#send")


def replies(page: Any) -> list[str]:
    return [t.strip() for t in page.locator(".msg.assistant .body").all_inner_texts()]


def everything_sent(rig: WebRig) -> str:
    return "\n".join(json.dumps(r.body) for r in rig.model.requests)


def test_the_login_page_and_the_overview(browser: Any, web_rig: WebRig) -> None:
    context = browser.new_context(viewport=web_support.DESKTOP)
    page = context.new_page()
    try:
        page.goto(web_rig.url("/"))
        assert page.url == web_rig.url("/login")  # nothing before login
        assert "pinch web login" in page.inner_text("main")
        screenshot(page, "login")
        page.goto(web_rig.login_url())
        assert page.url == web_rig.url("/")
        text = page.inner_text("main")
        assert "claude-test" in text and "telegram" in text and "web" in text
        assert page.locator("nav a").count() == 8
        screenshot(page, "overview")
        page.goto(web_rig.url("/logout"))
        screenshot(page, "logout")
        page.click("main button[type=submit]")
        page.wait_for_url(web_rig.url("/login"))
        page.goto(web_rig.url("/"))
        assert page.url == web_rig.url("/login")  # logged out
    finally:
        context.close()


def test_a_message_typed_in_the_page_is_answered_with_a_streamed_reply(
    web_page: Any, web_rig: WebRig
) -> None:
    words = " ".join(f"word{n}" for n in range(12))
    web_rig.model.respond_with(
        responder(turn=text_reply(f"**Streaming** {words} done.", chunk_delay_s=0.12))
    )
    chat(web_page, web_rig)
    say(web_page, "tell me something long")
    web_page.wait_for_selector(".msg.user >> text=tell me something long")
    # Part of the reply shows before the rest is written: it streams.
    web_page.wait_for_function(
        "() => [...document.querySelectorAll('.msg.assistant .body')]"
        ".some(b => b.innerText.includes('word2') && !b.innerText.includes('done.'))"
    )
    web_page.wait_for_selector(".msg.assistant >> text=done.")
    assert web_page.locator(".msg.assistant strong", has_text="Streaming").count() == 1
    web_page.wait_for_selector("#stop", state="hidden")  # the turn ended (and was stored)
    web_page.reload()  # and it is in the scrollback, from the transcript
    assert any("word11 done." in r for r in replies(web_page))
    web_rig.model.respond_with(responder(turn=echo))


def test_the_owners_next_telegram_message_continues_the_web_conversation(
    web_page: Any, web_rig: WebRig
) -> None:
    web_rig.model.respond_with(responder(turn=echo))
    chat(web_page, web_rig)
    say(web_page, "my locker code is 4711")
    web_page.wait_for_selector(".msg.assistant >> text=re: my locker code is 4711")
    sent_before = len(web_rig.model.requests)
    web_rig.tg.push(web_rig.tg.private_text("what is my locker code?"))
    wait_for(lambda: any("locker code?" in t for t in web_rig.bot_texts()), what="the answer")
    telegram_turn = web_rig.model.requests[sent_before:]
    assert any("my locker code is 4711" in json.dumps(r.body) for r in telegram_turn)
    chat(web_page, web_rig)  # the Telegram turn shows in the page's scrollback too
    assert web_page.locator(".msg.user", has_text="what is my locker code?").count() == 1


def test_html_in_the_transcript_shows_as_text_and_runs_nothing(
    web_page: Any, web_rig: WebRig
) -> None:
    console: list[str] = []
    dialogs: list[str] = []
    web_page.on("console", lambda message: console.append(message.text))
    web_page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    def hostile(request: RecordedRequest) -> Reply:
        return text_reply(f"Here: {XSS_IMG} and {XSS_SCRIPT} and [x](javascript:alert(1))")

    web_rig.model.respond_with(responder(turn=hostile))
    chat(web_page, web_rig)
    say(web_page, f"look {XSS_IMG} {XSS_SCRIPT}")
    web_page.wait_for_selector(".msg.assistant >> text=Here:")
    time.sleep(0.3)
    web_page.reload()  # the scrollback, rendered by the server from the transcript
    web_page.wait_for_selector(".msg.assistant >> text=Here:")
    time.sleep(0.3)
    body = web_page.inner_text("#messages")
    assert XSS_IMG in body and XSS_SCRIPT in body  # shown as text, whole
    assert web_page.evaluate("() => window.__pwned") is None
    assert web_page.locator("#messages img, #messages script").count() == 0
    assert web_page.locator("#messages a[href^='javascript']").count() == 0
    assert "PWNED" not in " ".join(console) and dialogs == []
    web_rig.model.respond_with(responder(turn=echo))


def test_the_stop_button_ends_a_reply_being_written(web_page: Any, web_rig: WebRig) -> None:
    long = " ".join(f"w{n}" for n in range(200))
    web_rig.model.respond_with(responder(turn=text_reply(long, chunk_delay_s=0.05)))
    chat(web_page, web_rig)
    say(web_page, "write a lot")
    web_page.wait_for_selector(".msg.assistant >> text=w3")
    web_page.click("#stop")
    web_page.wait_for_selector(".msg.assistant >> text=(cancelled)")
    assert not any("w199" in r for r in replies(web_page))
    web_page.wait_for_selector("#stop", state="hidden")
    web_rig.model.respond_with(responder(turn=echo))


def test_new_starts_a_fresh_conversation(web_page: Any, web_rig: WebRig) -> None:
    web_rig.model.respond_with(responder(turn=echo))
    chat(web_page, web_rig)
    say(web_page, "something before the reset")
    web_page.wait_for_selector(".msg.assistant >> text=re: something before the reset")
    web_page.click("#new-session")
    wait_for(lambda: "/new" in "".join(web_page.locator(".msg.user").all_inner_texts()))
    web_page.wait_for_timeout(1500)
    chat(web_page, web_rig)
    assert "something before the reset" not in web_page.inner_text("#messages")


def test_a_photo_and_a_document_go_to_the_inbox_as_on_telegram(
    web_page: Any, web_rig: WebRig
) -> None:
    web_rig.model.respond_with(responder(turn=echo))
    chat(web_page, web_rig)
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360f8cfc0f01f0005000201e2b1ec2f0000000049454e44ae426082"
    )
    web_page.set_input_files(
        "input[type=file]",
        [
            {"name": "dot.png", "mimeType": "image/png", "buffer": png},
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"the boat is blue\n"},
        ],
    )
    say(web_page, "here are two files")
    web_page.wait_for_selector(".msg.assistant >> text=here are two files")
    inbox = web_rig.home / "workspace" / "inbox"
    saved = sorted(p.name for p in inbox.rglob("*") if p.is_file())
    assert saved == ["dot.png", "notes.txt"]
    sent = everything_sent(web_rig)
    for name in ("notes.txt", "dot.png"):  # the turn is told where each file was saved
        assert re.search(rf"inbox/\d{{4}}-\d{{2}}-\d{{2}}/{re.escape(name)}", sent), name
    web_rig.model.respond_with(responder(turn=text_reply(SHOWCASE)))
    say(web_page, "What is on my list for the weekend?")
    web_page.wait_for_selector(".msg.assistant >> text=Saturday")
    web_page.wait_for_selector("#stop", state="hidden")
    web_page.wait_for_timeout(5200)  # the "writing…" line fades after the last typing
    screenshot(web_page, "chat", full_page=False)
    web_rig.model.respond_with(responder(turn=echo))


def test_the_chat_page_at_phone_width_keeps_the_composer_in_view(
    web_page: Any, web_rig: WebRig
) -> None:
    chat(web_page, web_rig)
    web_page.set_viewport_size(web_support.PHONE)
    box = web_page.locator("#send").bounding_box()
    assert box is not None and box["x"] + box["width"] <= web_support.PHONE["width"]
    width = web_page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= web_support.PHONE["width"]  # nothing overflows sideways


def test_a_message_sent_from_the_page_survives_a_gateway_killed_mid_turn(
    browser: Any, tmp_path: Path
) -> None:
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(responder(turn=text_reply("too late", delay_s=30)))
        rig = start_web_gateway(tmp_path / "pinch-home", model, tg)
        context = browser.new_context(viewport=web_support.DESKTOP)
        try:
            page = context.new_page()
            page.goto(rig.login_url())
            chat(page, rig)
            say(page, "remember the milk")
            wait_for(lambda: bool(model.requests), what="the turn to start")
            rig.proc.kill()  # SIGKILL while the model thinks: nothing was answered
            rig.stop()
            model.respond_with(responder(turn=echo))
            rig = start_web_gateway(rig.home, model, tg, port=rig.port)
            # The open page reconnects by itself and shows the answer of the resumed turn.
            page.wait_for_selector(".msg.assistant >> text=re: remember the milk", timeout=30000)
            assert replies(page).count("re: remember the milk") == 1
        finally:
            context.close()
            rig.stop()


def test_a_page_message_waits_for_the_telegram_reply_being_written(
    web_page: Any, web_rig: WebRig
) -> None:
    def slow_for_telegram(request: RecordedRequest) -> Reply:
        text = request.last_user_text()
        delay = 2.0 if "from telegram" in text else 0.0
        return text_reply(f"re: {text}", delay_s=delay)

    web_rig.model.respond_with(responder(turn=slow_for_telegram))
    chat(web_page, web_rig)
    asked = len(web_rig.model.requests)
    web_rig.tg.push(web_rig.tg.private_text("first, from telegram"))
    wait_for(lambda: len(web_rig.model.requests) > asked, what="the Telegram turn")
    say(web_page, "then from the page")
    web_page.wait_for_selector(".msg.assistant >> text=re: then from the page", timeout=30000)
    # One session, one turn at a time: the page's turn started after Telegram's was answered,
    # and saw it.
    assert any("from telegram" in t for t in web_rig.bot_texts())
    page_turn = next(
        r for r in web_rig.model.requests[asked:] if "then from the page" in r.last_user_text()
    )
    assert "re: first, from telegram" in json.dumps(page_turn.body)
    web_rig.model.respond_with(responder(turn=echo))
