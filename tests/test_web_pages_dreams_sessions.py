"""/dreams and /sessions: a dry run that writes nothing, dreaming now and undoing it; sessions
listed by channel and person with paging, transcripts shown escaped, forget previewed then done."""

from __future__ import annotations

import asyncio
import html
import time
from datetime import datetime
from pathlib import Path

from memory.store.pairing_store import SqlitePairingStore
from memory.store.sessions import SessionKey
from tests.fakes.model_server import FakeModelServer, text_reply
from tests.pages_support import page_settings, run_async, serve_pages, visible_text

MEMORY = "# MEMORY.md\n\n- The owner lives in Lisbon.\n"
NOTE = "The owner prefers window seats on long flights."
XSS = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def dream_settings(home: Path, server: FakeModelServer):  # type: ignore[no-untyped-def]
    lenient = {"min_score": 0, "min_queries": 1, "min_recalls": 1, "min_days": 1}
    settings = page_settings(home, dreaming=lenient)
    return settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"api_base": server.url})}
    )


def test_a_dry_run_writes_nothing_run_now_promotes_and_undo_restores(
    pinch_home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeModelServer(api_key="test-key") as server:
        settings = dream_settings(pinch_home, server)

        async def scenario() -> dict[str, str]:
            seen = {}
            async with serve_pages(settings, start=False) as page:
                ws = settings.workspace_dir
                (ws / "MEMORY.md").write_text(MEMORY)
                today = datetime.now().date().isoformat()
                (ws / "memory" / f"{today}.md").write_text(f"# {today}\n\n- {NOTE}\n")
                await asyncio.to_thread(page.runtime.index.sync)
                await asyncio.to_thread(page.runtime.index.search, "window seats")
                _, seen["dry"] = await page.post("/dreams/dry-run", {"phase": "deep"})
                seen["memory after dry run"] = (ws / "MEMORY.md").read_text()
                server.script(text_reply('{"action": "added"}'))
                _, seen["run"] = await page.post("/dreams/run", {})
                seen["memory after run"] = (ws / "MEMORY.md").read_text()
                _, seen["undo"] = await page.post("/dreams/undo", {})
                seen["memory after undo"] = (ws / "MEMORY.md").read_text()
            return seen

        seen = run_async(scenario())
    assert "would be added" in seen["dry"] and "dry run: nothing written" in seen["dry"]
    assert seen["memory after dry run"] == MEMORY
    assert "Dreamed: promoted 1 of 1 candidates" in seen["run"]
    assert NOTE in seen["memory after run"]
    assert "dream #1" in seen["run"]  # the diary (DREAMS.md) shows the dream's report
    assert "Undo dream #1" in seen["run"] and NOTE in html.unescape(seen["run"])
    assert "dream #1 undone" in seen["undo"]
    assert seen["memory after undo"] == MEMORY
    assert "There is no dream to undo." in seen["undo"]


def test_dreaming_disabled_runs_nothing_and_says_how_to_enable(pinch_home: Path) -> None:
    settings = page_settings(pinch_home, dreaming={"enabled": False})

    async def scenario() -> tuple[str, str]:
        async with serve_pages(settings, start=False) as page:
            _, run = await page.post("/dreams/run", {})
            _, dry = await page.post("/dreams/dry-run", {"phase": "light"})
            return run, dry

    run, dry = run_async(scenario())
    assert "Dreaming is disabled" in run and "enabled = true" in run
    assert "nothing was done" in dry


def add_session(store, key: SessionKey, *texts: str) -> str:  # type: ignore[no-untyped-def]
    session = store.current(key)
    for i, text in enumerate(texts):
        kind = "user" if i % 2 == 0 else "assistant"
        store.append(session.id, kind, {"text": text})
    return session.id


def test_sessions_are_listed_by_channel_and_person_newest_first_in_pages(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> dict[str, str]:
        async with serve_pages(settings, start=False) as page:
            store = page.runtime.store
            for n in range(60):
                add_session(store, SessionKey("main", "slack", "direct", f"U{n:03d}"), f"hi {n}")
            add_session(store, SessionKey.owner_direct("telegram"), "latest words")
            pairing = SqlitePairingStore(page.runtime.index.db)
            pairing.create_request(
                "slack", "U059", "Nia", "ABCDEFGH", time.time(), ttl_s=60, max_pending=3
            )
            pairing.decide("ABCDEFGH", approve=True, now=time.time())
            return {
                "first": await page.text("/sessions"),
                "second": await page.text("/sessions?page=2"),
                "telegram": await page.text("/sessions?channel=telegram"),
                "past the end": await page.text("/sessions?page=99"),
            }

    seen = run_async(scenario())
    first = visible_text(seen["first"])
    assert "page 1 of 2 · 61 sessions" in first
    assert first.index("owner") < first.index("U059")  # newest activity first
    assert "U059 (Nia)" in first  # the name they gave when they asked to pair
    assert "U000" not in first and "U000" in visible_text(seen["second"])
    assert "1 sessions" in visible_text(seen["telegram"]) and "U001" not in seen["telegram"]
    assert "No sessions" in seen["past the end"]


def test_a_transcript_is_escaped_and_shows_compaction_summaries_as_such(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> tuple[str, int]:
        async with serve_pages(settings, start=False) as page:
            store = page.runtime.store
            sid = add_session(store, SessionKey.owner_main(), XSS, f"**sure** {XSS}")
            store.append(sid, "compaction", {"summary": "They talked about *boats*."})
            missing = await page.client.get("/sessions/0123456789abcdef")
            return await page.text(f"/sessions/{sid}"), missing.status

    body, missing = run_async(scenario())
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in body
    assert "<strong>sure</strong>" in body  # the assistant's Markdown is rendered
    assert "Compaction summary" in body and "<em>boats</em>" in body
    assert missing == 404


def test_forget_previews_what_goes_changes_nothing_then_forgets_on_confirm(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> tuple[str, bool, str, bool]:
        async with serve_pages(settings, start=False) as page:
            store = page.runtime.store
            sid = add_session(store, SessionKey("main", "telegram", "direct", "42"), "a", "b")
            preview = await page.text(f"/sessions/{sid}/forget")
            kept = store.get(sid) is not None and len(store.events(sid)) == 2
            _, done = await page.post(f"/sessions/{sid}/forget", {})
            return preview, kept, done, store.get(sid) is None

    preview, kept, done, gone = run_async(scenario())
    assert "dry run: nothing changed yet" in preview and "remove: 2 transcript events" in preview
    assert 'action="/sessions/' in preview and "Forget it for good" in preview
    assert kept
    assert "removed: 2 transcript events" in done and "Forgotten." in done
    assert gone
