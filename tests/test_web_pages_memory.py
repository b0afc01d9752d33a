"""/memory: files listed and shown escaped, edited with compare-and-swap (a file changed on disk
meanwhile is never overwritten), confined like `memory get`, searchable within seconds of a save,
search with every preset, and the index's status."""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from pathlib import Path

import pytest

from memory.search.presets import PRESETS
from tests.pages_support import ServedPages, page_settings, run_async, serve_pages

UNTRUSTED_LINE = "- the stranger said zebrafinch <!-- origin: untrusted · session: s1 -->\n"


def run(scenario):  # type: ignore[no-untyped-def]
    return run_async(scenario)


def hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no hidden field {name}"
    return html.unescape(found.group(1))


def textarea(page: str) -> str:
    found = re.search(r"<textarea[^>]*>\n(.*?)</textarea>", page, re.S)
    assert found
    return html.unescape(found.group(1))


async def search(page: ServedPages, q: str, preset: str = "keyword") -> str:
    return await page.text(f"/memory/search?q={q}&preset={preset}")


async def wait_for_hit(page: ServedPages, q: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        body = await search(page, q)
        if "No matching memory found" not in body:
            return body
        assert time.monotonic() < deadline, f"{q!r} not searchable after {timeout_s} s"
        await asyncio.sleep(0.2)


def test_the_files_are_listed_by_kind_with_their_inbox(pinch_home: Path) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> str:
        async with serve_pages(settings) as page:
            ws = settings.workspace_dir
            (ws / "memory" / "2026-01-10.md").write_text("# 2026-01-10\n\n- log\n")
            (ws / "memory" / "2026-01-10-trip.md").write_text("# Trip\n")
            (ws / "inbox" / "2026-01-10").mkdir(parents=True)
            (ws / "inbox" / "2026-01-10" / "7-photo.jpg").write_bytes(b"\xff\xd8jpeg")
            await asyncio.to_thread(page.runtime.index.sync)  # the list is the index's
            body = await page.text("/memory")
            download = await page.client.get("/memory/inbox/file?path=inbox/2026-01-10/7-photo.jpg")
            assert download.status == 200 and await download.read() == b"\xff\xd8jpeg"
            assert download.headers["Content-Disposition"].startswith("attachment")
            assert download.headers["X-Content-Type-Options"] == "nosniff"
            outside = await page.client.get("/memory/inbox/file?path=MEMORY.md")
            assert outside.status == 404
            return body

    body = run(scenario())
    for label in ("Curated", "Daily logs", "Session notes", "Inbox"):
        assert label in body
    assert "memory/2026-01-10.md" in body and "memory/2026-01-10-trip.md" in body
    assert "inbox/2026-01-10/7-photo.jpg" in body
    assert "Embeddings" in body and "keyword-only" in body  # the index's status and why degraded


def test_an_edit_is_saved_atomically_and_found_by_the_pages_search_within_seconds(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> tuple[str, str, str]:
        async with serve_pages(settings) as page:
            editor = await page.text("/memory/edit?path=MEMORY.md")
            before = textarea(editor)
            assert before == (settings.workspace_dir / "MEMORY.md").read_text()
            new = before + "\r\n- The boat is called Quillwort.\r\n"
            where, shown = await page.post(
                "/memory/edit",
                {
                    "path": "MEMORY.md",
                    "text": new,
                    "hash": hidden(editor, "hash"),
                    "csrf_token": "",
                },
            )
            hits = await wait_for_hit(page, "Quillwort")
            return where, shown, hits

    where, shown, hits = run(scenario())
    assert where.startswith("/memory/file?path=MEMORY.md")
    assert "Saved MEMORY.md." in shown
    text = (settings.workspace_dir / "MEMORY.md").read_text()
    assert text.endswith("\n- The boat is called Quillwort.\n") and "\r" not in text
    assert "MEMORY.md" in hits and "score" in hits and "lines" in hits


def test_a_file_changed_by_another_program_is_searchable_within_seconds(pinch_home: Path) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> str:
        async with serve_pages(settings) as page:
            await asyncio.sleep(0.3)  # the watcher is watching
            with open(settings.workspace_dir / "USER.md", "a") as fh:
                fh.write("\n- Plays the bassoon on Sundays.\n")
            return await wait_for_hit(page, "bassoon")

    assert "USER.md" in run(scenario())


def test_a_file_changed_on_disk_while_open_is_not_overwritten_and_both_versions_are_shown(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)
    memory_md = settings.workspace_dir / "MEMORY.md"

    async def scenario() -> tuple[int, str]:
        async with serve_pages(settings) as page:
            editor = await page.text("/memory/edit?path=MEMORY.md")
            opened = hidden(editor, "hash")
            with open(memory_md, "a") as fh:  # the agent appended meanwhile
                fh.write("- Appended by the agent: dentist on Tuesday.\n")
            response = await page.client.post(
                "/memory/edit",
                data={"path": "MEMORY.md", "text": "- my rewrite\n", "hash": opened},
            )
            body = await response.text()
            # Saving the merged text with the hash the conflict page carries works.
            merged = memory_md.read_text() + "- my rewrite\n"
            again = await page.client.post(
                "/memory/edit",
                data={"path": "MEMORY.md", "text": merged, "hash": hidden(body, "hash")},
            )
            assert again.status == 200 and memory_md.read_text() == merged
            return response.status, body

    status, body = run(scenario())
    assert status == 409
    assert "changed on disk since you opened it; nothing was written" in body
    assert "Appended by the agent: dentist on Tuesday." in body  # the version on disk
    assert "+- my rewrite" in html.unescape(body)  # the difference
    assert textarea(body) == "- my rewrite\n"  # the owner's text is kept for merging


@pytest.mark.parametrize(
    "path",
    [
        "../outside.md",
        "/etc/passwd",
        "memory/../../outside.md",
        "AGENTS.md",
        ".git/x.md",
        "memory/link.md",
    ],
)
def test_paths_outside_memory_are_neither_read_nor_written(pinch_home: Path, path: str) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> tuple[int, int, int]:
        async with serve_pages(settings) as page:
            outside = settings.workspace_dir.parent / "outside.md"
            outside.write_text("SECRET OUTSIDE\n")
            os.symlink(outside, settings.workspace_dir / "memory" / "link.md")
            view = await page.client.get(f"/memory/file?path={path}")
            assert "SECRET OUTSIDE" not in await view.text()
            edit = await page.client.get(f"/memory/edit?path={path}")
            save = await page.client.post(
                "/memory/edit", data={"path": path, "text": "OVERWRITTEN\n", "hash": "absent"}
            )
            assert outside.read_text() == "SECRET OUTSIDE\n"
            assert "OVERWRITTEN" not in (settings.workspace_dir / "AGENTS.md").read_text()
            return view.status, edit.status, save.status

    view, edit, save = run(scenario())
    assert view == 404 and edit in (403, 404) and save == 400


def test_memory_text_is_shown_escaped_rendered_and_raw(pinch_home: Path) -> None:
    settings = page_settings(pinch_home)
    evil = "# Notes\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n**bold**\n"

    async def scenario() -> tuple[str, str, str]:
        async with serve_pages(settings) as page:
            (settings.workspace_dir / "memory" / "notes.md").write_text(evil)
            rendered = await page.text("/memory/file?path=memory/notes.md")
            raw = await page.text("/memory/file?path=memory/notes.md&raw=1")
            editor = await page.text("/memory/edit?path=memory/notes.md")
            return rendered, raw, editor

    rendered, raw, editor = run(scenario())
    assert "<strong>bold</strong>" in rendered  # Markdown is rendered, raw HTML is not
    for body in (rendered, raw, editor):
        assert "<script>alert" not in body and "<img src=x" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_search_shows_path_lines_score_snippet_origin_and_the_untrusted_badge_for_every_preset(
    pinch_home: Path,
) -> None:
    settings = page_settings(pinch_home)

    async def scenario() -> dict[str, str]:
        async with serve_pages(settings) as page:
            (settings.workspace_dir / "memory" / "2026-01-09.md").write_text(
                "# 2026-01-09\n\n" + UNTRUSTED_LINE
            )
            await asyncio.to_thread(page.runtime.index.sync)
            found = {}
            for preset in sorted(PRESETS):
                found[preset] = await search(page, "zebrafinch", preset)
            found["bad preset"] = await page.text("/memory/search?q=zebrafinch&preset=nope&n=x")
            return found

    pages = run(scenario())
    keyword = pages["keyword"]
    assert "memory/2026-01-09.md" in keyword and "lines 1–3" in keyword
    assert re.search(r"score \d\.\d\d", keyword)
    assert "untrusted</span>" in keyword and "zebrafinch" in keyword
    for preset, body in pages.items():
        assert "Internal Server Error" not in body, preset
        assert "Search memory" in body


def test_only_the_newest_daily_logs_are_listed_with_a_link_to_all(pinch_home: Path) -> None:
    settings = page_settings(pinch_home)
    for day in range(1, 41):
        path = settings.workspace_dir / "memory" / f"2026-01-{day:02d}.md"
        if day > 31:
            path = settings.workspace_dir / "memory" / f"2026-02-{day - 31:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# day {day}\n")
    (settings.workspace_dir / "memory" / "projects.md").write_text("# Projects\n")

    async def scenario() -> tuple[str, str]:
        async with serve_pages(settings) as page:
            return await page.text("/memory"), await page.text("/memory?all=1")

    newest, every = run_async(scenario())
    assert 'Daily logs <span class="muted">(40)</span>' in newest
    assert "memory/2026-02-09.md" in newest and "memory/2026-01-02.md" not in newest
    assert "All 40 daily logs" in newest and "memory/projects.md" in newest
    assert "memory/2026-01-01.md" in every and "All 40" not in every
