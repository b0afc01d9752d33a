"""Hostile stored text in every place the web page shows text, in Chromium against a real `pinch
gateway`: memory files and their names, search snippets, a stranger's name and message, the
assistant's reply, a job's text, a standing intent, a failed dream's reason and the dream diary.
Every page, and every page of ours they link to, is opened: no script runs, no element or link
of the text's making exists, and the text reads literally."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from app.automations.jobs import Jobs, NewJob, Schedule, Target
from memory.lifecycle.dream_runs import record_failed_run
from memory.lifecycle.intents import IntentStore
from memory.store.db import open_database
from memory.store.intents_store import IntentScope
from memory.store.jobs_store import SqliteJobStore
from memory.store.sessions import SessionKey
from tests import web_support
from tests.agent_support import responder
from tests.fakes.model_server import RecordedRequest, Reply, text_reply
from tests.web_support import WebRig, wait_for

browser, web_rig, web_page = web_support.browser, web_support.web_rig, web_support.web_page

# Each part would run a script, or make an element or a link, if it were not escaped.
HOSTILE = (
    '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    '<svg onload="window.__pwned=3"></svg></textarea></title><a href="javascript:window.__pwned=4">'
    "a</a> [md](javascript:window.__pwned=5) {{7*7}}{% raw %}"
)
SHOWN = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
NAMES = ("q<b>\"'.md", "x&raw=1#top.md")
STRANGER = {"id": 333, "is_bot": False, "first_name": HOSTILE[:60], "username": "mallory"}

NO_SCRIPT_MADE = """() => ({
  pwned: window.__pwned === undefined ? null : window.__pwned,
  handlers: [...document.querySelectorAll("main *")]
    .filter((e) => [...e.attributes].some((a) => a.name.startsWith("on"))).length,
  made: document.querySelectorAll("main script, main svg, main img[src='x']").length,
  js_links: [...document.querySelectorAll("a[href]")]
    .filter((a) => a.href.trim().toLowerCase().startsWith("javascript:")).length,
})"""


def hostile_reply(request: RecordedRequest) -> Reply:
    return text_reply(f"Quoting the page: {HOSTILE}")


def store_hostile_text(rig: WebRig) -> None:
    memory = rig.home / "workspace" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (memory / name).write_text(f"# Fetched\n\nhostile: {HOSTILE}\n", encoding="utf-8")
    (rig.home / "workspace" / "DREAMS.md").write_text(f"# Diary\n\n{HOSTILE}\n", encoding="utf-8")
    db = open_database(rig.home / "agents" / "main" / "agent.sqlite", vector_backend="numpy")
    try:
        now = datetime.now(UTC)
        schedule = Schedule("cron", "30 8 * * *", "Europe/Berlin", now)
        target, key = Target("telegram", "111"), str(SessionKey.owner_main())
        new = NewJob(schedule, "reminder", HOSTILE, target, key, owner_private=True)
        Jobs(SqliteJobStore(db)).create(new, now)
        scope = IntentScope.of(SessionKey.owner_main(), "owner")
        IntentStore.open(db).create(scope, ["Hangzhou"], f"act: {HOSTILE}", now=time.time())
        record_failed_run(db, "deep", f"reason: {HOSTILE}")
    finally:
        db.close()


def test_hostile_text_everywhere_runs_nothing_and_reads_literally(
    web_page: Any, web_rig: WebRig
) -> None:
    web_rig.model.respond_with(responder(turn=hostile_reply))
    store_hostile_text(web_rig)
    web_rig.tg.push(web_rig.tg.private_text(f"hello {HOSTILE}", sender=STRANGER))
    web_rig.tg.push(web_rig.tg.private_text(f"the owner asks {HOSTILE}"))
    wait_for(lambda: bool(web_rig.bot_texts(333)), what="the stranger's pairing code")
    wait_for(lambda: any("Quoting" in t for t in web_rig.bot_texts()), what="the reply")
    indexed = web_rig.home / "workspace" / "memory" / NAMES[0]
    wait_for(lambda: _listed(web_page, web_rig, indexed), what="the memory files listed")
    dialogs: list[str] = []
    web_page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    start = ["/", "/chat", "/memory", "/dreams", "/sessions", "/access", "/automations"]
    start.append("/memory/search?q=hostile&preset=keyword")
    seen: dict[str, str] = {}
    queue = list(start)
    while queue and len(seen) < 60:
        path = queue.pop(0)
        if path in seen:
            continue
        answer = web_page.goto(web_rig.url(path))
        assert answer is not None and answer.status < 500, path
        found = web_page.evaluate(NO_SCRIPT_MADE)
        assert found == {"pwned": None, "handlers": 0, "made": 0, "js_links": 0}, (path, found)
        seen[path] = web_page.inner_text("main")
        for href in web_page.eval_on_selector_all("main a[href]", "els => els.map(e => e.href)"):
            url = urlsplit(urljoin(web_rig.url(path), href))
            if url.netloc == urlsplit(web_rig.base).netloc and "/inbox/" not in url.path:
                queue.append(url.path + (f"?{url.query}" if url.query else ""))
    assert dialogs == []
    for page in ("/chat", "/automations", "/dreams"):
        assert SHOWN in seen[page], page
    assert STRANGER["first_name"] in seen["/access"]
    assert SHOWN in seen["/memory/search?q=hostile&preset=keyword"]
    for name in NAMES:
        opened = [p for p in seen if p.startswith("/memory/file") and SHOWN in seen[p]]
        assert any(name in seen[p] for p in opened), name
    assert any(p.startswith("/sessions/") and SHOWN in seen[p] for p in seen)


def _listed(page: Any, rig: WebRig, path: Path) -> bool:
    page.goto(rig.url("/memory"))
    return path.name in page.inner_text("main")
