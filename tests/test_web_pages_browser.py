"""The six pages in a real browser (Debian's Chromium through Playwright) against a real `pinch
gateway` with the fake Telegram Bot API and the scripted model server: edit MEMORY.md and find
the new line with the page's search; a file changed on disk while open is not overwritten;
approve a pairing code and the stranger is answered on Telegram; pause and resume a job; dry-run,
run and undo a dream; forget a session. Every page is saved at 1280 and 375 px in
test-artifacts/web/."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from memory.store.db import open_database
from memory.store.jobs_store import SqliteJobStore
from memory.store.sessions import SessionKey
from tests import web_support
from tests.fakes.model_server import FakeModelServer, RecordedRequest, Reply, text_reply
from tests.fakes.telegram_server import STRANGER, FakeTelegram
from tests.web_support import DESKTOP, WebRig, echo, screenshot, start_web_gateway, wait_for

browser, web_rig, web_page = web_support.browser, web_support.web_rig, web_support.web_page

XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
NOTE = "The owner prefers window seats on long flights."


def workspace(rig: WebRig) -> Path:
    return rig.home / "workspace"


def database(rig: WebRig) -> Path:
    return rig.home / "agents" / "main" / "agent.sqlite"


def submit(page: Any, selector: str) -> None:
    with page.expect_navigation():
        page.click(selector)


def search_in_page(page: Any, rig: WebRig, query: str) -> str:
    page.goto(rig.url("/memory/search"))
    page.fill("input[name=q]", query)
    page.select_option("select[name=preset]", "keyword")
    submit(page, ".search-form button[type=submit]")
    return "\n".join(page.locator(".hit").all_inner_texts())  # the hits only


def test_edit_memory_in_the_page_then_find_the_new_line_with_its_search(
    web_page: Any, web_rig: WebRig
) -> None:
    web_page.goto(web_rig.url("/memory"))
    screenshot(web_page, "memory")
    web_page.click("a[href='/memory/edit?path=MEMORY.md']")
    web_page.wait_for_selector("textarea#text")
    screenshot(web_page, "memory-edit")
    before = web_page.input_value("textarea#text")
    web_page.fill("textarea#text", before + "\n- The boat is called Quillwort.\n")
    submit(web_page, ".editor button[type=submit]")
    assert "Saved MEMORY.md." in web_page.inner_text("main")
    screenshot(web_page, "memory-file")
    text = (workspace(web_rig) / "MEMORY.md").read_text()
    assert text.endswith("- The boat is called Quillwort.\n") and "\r" not in text
    found = ""
    deadline = time.monotonic() + 10
    while "Quillwort" not in found and time.monotonic() < deadline:
        found = search_in_page(web_page, web_rig, "Quillwort")
    assert "MEMORY.md" in found and "Quillwort" in found and "score" in found
    screenshot(web_page, "memory-search")


def test_a_file_changed_on_disk_while_open_is_not_overwritten(
    web_page: Any, web_rig: WebRig
) -> None:
    user_md = workspace(web_rig) / "USER.md"
    web_page.goto(web_rig.url("/memory/edit?path=USER.md"))
    web_page.wait_for_selector("textarea#text")
    with open(user_md, "a") as fh:  # the agent, Dreaming or an editor changed it meanwhile
        fh.write("- Changed on disk: allergic to hazelnuts.\n")
    on_disk = user_md.read_text()
    web_page.fill("textarea#text", "# USER.md\n\n- my version\n")
    submit(web_page, ".editor button[type=submit]")
    assert user_md.read_text() == on_disk  # nothing overwritten
    assert "nothing was written" in web_page.inner_text(".conflict")
    assert "allergic to hazelnuts" in web_page.inner_text("#on-disk")
    assert "+- my version" in web_page.inner_text("#diff")
    assert web_page.input_value("textarea#text") == "# USER.md\n\n- my version\n"
    screenshot(web_page, "memory-conflict")


def test_approving_a_pairing_code_in_the_page_lets_the_stranger_be_answered(
    web_page: Any, web_rig: WebRig
) -> None:
    tg = web_rig.tg
    tg.push(tg.private_text("hello", sender=STRANGER))
    wait_for(lambda: any("code" in t for t in web_rig.bot_texts(STRANGER["id"])), what="a code")
    web_page.goto(web_rig.url("/access"))
    web_page.wait_for_selector("#pending")
    screenshot(web_page, "access")
    submit(web_page, "#pending button.primary")
    assert "Approved telegram user 222" in web_page.inner_text("main")
    assert "222" in web_page.inner_text("#approved")
    before = len(web_rig.bot_texts(STRANGER["id"]))
    tg.push(tg.private_text(f"may I ask now? {XSS}", sender=STRANGER))

    def answered() -> bool:  # a streamed reply is sent, then edited: wait for the whole of it
        return any("may I ask now?" in t for t in web_rig.bot_texts(STRANGER["id"])[before:])

    wait_for(answered, what="the stranger's answer")
    assert not any("code" in t for t in web_rig.bot_texts(STRANGER["id"])[before:])


def test_a_strangers_html_in_a_transcript_shows_as_text_and_runs_nothing(
    web_page: Any, web_rig: WebRig
) -> None:
    db = sqlite3.connect(database(web_rig))
    try:
        row = db.execute(
            "SELECT id FROM sessions WHERE channel = 'telegram' AND peer_id = '222'"
        ).fetchone()
    finally:
        db.close()
    if row is None:  # the pairing test did not run first: make the session here
        pytest.skip("needs the stranger's session from the pairing test")
    dialogs: list[str] = []
    web_page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    web_page.goto(web_rig.url("/sessions"))
    screenshot(web_page, "sessions")
    web_page.goto(web_rig.url(f"/sessions/{row[0]}"))
    web_page.wait_for_selector("ol.transcript")
    assert XSS in web_page.inner_text("ol.transcript")
    assert web_page.locator("ol.transcript img, ol.transcript script").count() == 0
    assert web_page.evaluate("() => window.__pwned") is None and dialogs == []
    screenshot(web_page, "session")


def test_forgetting_a_session_previews_then_removes_it(web_page: Any, web_rig: WebRig) -> None:
    db = open_database(database(web_rig), vector_backend="numpy")
    try:
        from memory.store.sessions import SqliteSessionStore

        store = SqliteSessionStore(db)
        session = store.current(SessionKey("main", "slack", "direct", "U0FORGET"))
        store.append(session.id, "user", {"text": "forget me please"})
        store.append(session.id, "assistant", {"text": "I will."})
    finally:
        db.close()
    web_page.goto(web_rig.url(f"/sessions/{session.id}"))
    web_page.click("a.btn.danger")
    web_page.wait_for_selector("#forget-items")
    assert "remove: 2 transcript events" in web_page.inner_text("#forget-items")
    screenshot(web_page, "session-forget")
    submit(web_page, "#confirm-forget")
    assert "Forgotten." in web_page.inner_text("main")
    db2 = sqlite3.connect(database(web_rig))
    try:
        assert db2.execute("SELECT 1 FROM sessions WHERE id = ?", (session.id,)).fetchone() is None
    finally:
        db2.close()


def test_pausing_and_resuming_a_job_in_the_page(web_page: Any, web_rig: WebRig) -> None:
    jobs = Jobs(SqliteJobStore(open_database(database(web_rig), vector_backend="numpy")))
    try:
        now = datetime.now(UTC)
        job = jobs.create(
            NewJob(
                Schedule("cron", "30 8 * * 1-5", "Europe/Berlin", now),
                "reminder",
                "Check the train tickets",
                Target("telegram", "111"),
                str(SessionKey.owner_main()),
                owner_private=True,
            ),
            now,
        )
        web_page.goto(web_rig.url("/automations"))
        row = f"#job-{job.id}"
        web_page.wait_for_selector(row)
        screenshot(web_page, "automations")
        submit(web_page, f"{row} button[data-action=pause]")
        assert "paused" in web_page.inner_text("main")
        assert jobs.get(job.id).state == "paused"  # type: ignore[union-attr]
        assert web_page.get_attribute(row, "data-state") == "paused"
        submit(web_page, f"{row} button[data-action=resume]")
        assert jobs.get(job.id).state == "active"  # type: ignore[union-attr]
        assert "next run" in web_page.inner_text("main")
    finally:
        jobs.close()


def test_the_health_page(web_page: Any, web_rig: WebRig) -> None:
    web_page.goto(web_rig.url("/health"))
    submit(web_page, "#run-doctor")
    assert "checks ran" in web_page.inner_text("main")
    channels = web_page.inner_text("#channels")
    assert "telegram" in channels and "connected as" in channels
    assert "Web page on" in web_page.inner_text("#log")  # the gateway's own lines
    assert web_rig.tg.token not in web_page.content()
    screenshot(web_page, "health")


# -- dreams: a gateway of their own, with a gate one recall passes ------------------------------


@pytest.fixture(scope="module")
def dream_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebRig]:
    lenient = {
        f"PINCH_DREAMING__{k}": v
        for k, v in (
            ("MIN_SCORE", "0"),
            ("MIN_QUERIES", "1"),
            ("MIN_RECALLS", "1"),
            ("MIN_DAYS", "1"),
        )
    }
    with FakeModelServer() as model, FakeTelegram() as tg:
        model.respond_with(dream_or_echo)
        home = tmp_path_factory.mktemp("dream") / "pinch-home"
        rig = start_web_gateway(home, model, tg, **lenient)
        try:
            yield rig
        finally:
            rig.stop()


def dream_or_echo(request: RecordedRequest) -> Reply:
    if "window seats" in str(request.body.get("messages")) and "entry" in str(request.body):
        return text_reply('{"action": "added"}')
    return echo(request)


def test_a_dream_dry_run_writes_nothing_then_run_and_undo(browser: Any, dream_rig: WebRig) -> None:
    ws = workspace(dream_rig)
    memory_before = "# MEMORY.md\n\n- The owner lives in Lisbon.\n"
    (ws / "MEMORY.md").write_text(memory_before)
    today = datetime.now().astimezone().date().isoformat()
    (ws / "memory" / f"{today}.md").write_text(f"# {today}\n\n- {NOTE}\n")
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        page.goto(dream_rig.login_url())
        deadline = time.monotonic() + 10
        found = ""
        while f"memory/{today}.md" not in found and time.monotonic() < deadline:
            found = search_in_page(page, dream_rig, "window seats")  # a recall, for the gate
        page.goto(dream_rig.url("/dreams"))
        submit(page, "#dry-run")
        report = page.inner_text("#report")
        assert "would be added" in report and "nothing written" in report
        assert (ws / "MEMORY.md").read_text() == memory_before
        screenshot(page, "dreams-dry-run")
        submit(page, "#run-now")
        assert "Dreamed: promoted 1 of 1" in page.inner_text("main")
        assert NOTE in (ws / "MEMORY.md").read_text()
        screenshot(page, "dreams")
        submit(page, "#undo")
        assert "undone" in page.inner_text("main")
        assert (ws / "MEMORY.md").read_text() == memory_before
    finally:
        context.close()
