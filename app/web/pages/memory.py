"""/memory: the memory files (rendered or raw), editing them with compare-and-swap, search with
every preset, the index's status, and the inbox — what `pinch memory status|search|get` show.

    GET  /memory                      files, inbox, index status (?deep=1: every file checked)
    GET  /memory/file?path=P[&raw=1]  one file, rendered (Markdown, raw HTML off) or raw
    GET  /memory/edit?path=P          the editor (the file's hash travels in a hidden field)
    POST /memory/edit                 save if the file is still what was opened, else show both
    GET  /memory/search?q=…           search (preset, max results, min score)
    GET  /memory/inbox/file?path=P    a received file, as a download
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from app.web import memory_files as files
from app.web.context import WebContext
from app.web.page_support import done, notice_of, owner_time
from memory.errors import MemoryError_, WorkspaceError
from memory.files.workspace import read_confined
from memory.search.presets import PRESETS
from memory.store.backends import store_for
from memory.store.source_listing import SqliteSourceListing


def add_routes(app: web.Application, ctx: WebContext) -> None:
    pages = MemoryPages(ctx)
    app.router.add_get("/memory", pages.index)
    app.router.add_get("/memory/file", pages.view)
    app.router.add_get("/memory/edit", pages.edit)
    app.router.add_post("/memory/edit", pages.save)
    app.router.add_get("/memory/search", pages.search)
    app.router.add_get("/memory/inbox/file", pages.inbox_file)


class MemoryPages:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self._listings: dict[int, SqliteSourceListing] = {}

    def _listing(self, db: Any) -> SqliteSourceListing:
        """One listing per database, so it can answer again at the same index version."""
        listing = self._listings.get(id(db))
        if listing is None or listing.db is not db:
            listing = self._listings[id(db)] = store_for("SourceListings", db)
        return listing

    @property
    def _workspace(self) -> Any:
        return self.ctx.settings.workspace_dir

    @property
    def _extra(self) -> list[str]:
        return list(self.ctx.settings.memory.extra_paths)

    async def _error(self, request: web.Request, message: str, status: int = 400) -> web.Response:
        return await self.ctx.render(
            request, "pages/memory_error.html", status=status, message=message
        )

    async def index(self, request: web.Request) -> web.Response:
        deep = request.query.get("deep") == "1"
        show_all = request.query.get("all") == "1"
        index = self.ctx.runtime.index
        status = await asyncio.to_thread(index.status, deep=deep)
        listed, inbox, problems = await asyncio.gather(
            asyncio.to_thread(
                files.memory_files,
                self._workspace,
                self._extra,
                self._listing(index.db),
                status.generation,
                # thousands of daily logs: the newest, and a link to all
                newest=None if show_all else files.DATED_SHOWN,
            ),
            asyncio.to_thread(files.inbox_files, self._workspace),
            asyncio.to_thread(files.file_problems, self._workspace, self._extra, links=deep),
        )
        groups: dict[str, list[files.FileEntry]] = {g: [] for g in files.GROUPS}
        for entry in listed.files:
            groups[entry.group].append(entry)
        counts = listed.counts
        return await self.ctx.render(
            request,
            "pages/memory.html",
            groups=groups,
            counts=counts,
            show_all=show_all,
            inbox=inbox,
            index_status=status,
            problems={**problems, **status.problems},
            presets=sorted(PRESETS),
            deep=deep,
            notice=notice_of(self.ctx, request),
            when=lambda ts: owner_time(self.ctx, ts),
            size=_size,
        )

    async def view(self, request: web.Request) -> web.Response:
        raw_path = request.query.get("path", "")
        try:
            opened = await asyncio.to_thread(
                files.open_file,
                self._workspace,
                raw_path,
                self._extra,
                allow_hard_links=self.ctx.settings.memory.allow_hard_links,
            )
        except WorkspaceError as exc:
            return await self._error(request, str(exc), 404)
        return await self.ctx.render(
            request,
            "pages/memory_file.html",
            file=opened,
            raw=request.query.get("raw") == "1",
            notice=notice_of(self.ctx, request),
        )

    async def edit(self, request: web.Request) -> web.Response:
        try:
            opened = await asyncio.to_thread(
                files.open_file, self._workspace, request.query.get("path", ""), self._extra
            )
        except WorkspaceError as exc:
            return await self._error(request, str(exc), 404)
        if not opened.editable:
            return await self._error(
                request, f"{opened.path} cannot be edited here: {opened.why_not_editable}.", 403
            )
        return await self.ctx.render(
            request,
            "pages/memory_edit.html",
            file_path=opened.path,
            text=opened.text,
            hash=opened.hash,
            conflict=None,
        )

    async def save(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        path, text, opened_hash = (str(form.get(k, "")) for k in ("path", "text", "hash"))
        writer = self.ctx.runtime.agent.writer  # re-indexes what it wrote
        try:
            rel = await asyncio.to_thread(
                files.save_file, writer, self._extra, path, text, opened_hash
            )
        except files.EditConflict as conflict:
            return await self.ctx.render(
                request,
                "pages/memory_edit.html",
                status=409,
                file_path=conflict.path,
                text=conflict.mine,
                hash=conflict.current_hash,
                conflict=conflict,
            )
        except WorkspaceError as exc:
            return await self._error(request, str(exc))
        raise done(self.ctx, f"/memory/file?path={_q(rel)}", f"Saved {rel}.")

    async def search(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "").strip()
        preset = request.query.get("preset") or None
        if preset is not None and preset not in PRESETS:
            preset = None
        max_results = _number(request.query.get("n"), int, 1, 100)
        min_score = _number(request.query.get("min_score"), float, 0.0, 1.0)
        hits: list[Any] = []
        error = degraded = None
        took_ms = 0.0
        if q:
            index = self.ctx.runtime.index
            started = time.perf_counter()
            try:
                hits = await asyncio.to_thread(
                    index.search, q, preset=preset, max_results=max_results, min_score=min_score
                )
                degraded = await asyncio.to_thread(index.degraded_reason)
            except (MemoryError_, ValueError) as exc:
                error = str(exc)
            took_ms = (time.perf_counter() - started) * 1000
        return await self.ctx.render(
            request,
            "pages/memory_search.html",
            q=q,
            preset=preset or "pinch",
            presets=sorted(PRESETS),
            n=max_results or "",
            min_score="" if min_score is None else min_score,
            hits=hits,
            error=error,
            degraded=degraded,
            took_ms=took_ms,
            viewable=_viewable,
        )

    async def inbox_file(self, request: web.Request) -> web.StreamResponse:
        try:
            rel = files.inbox_target(self._workspace, request.query.get("path", ""))
            data = await asyncio.to_thread(read_confined, self._workspace, rel)
        except WorkspaceError as exc:
            return await self._error(request, str(exc), 404)
        name = rel.rsplit("/", 1)[-1]
        # Never shown inline: a received file is a stranger's bytes (no sniffing, no rendering).
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={
                "Content-Disposition": f"attachment; filename*=UTF-8''{_q(name)}",
                "X-Content-Type-Options": "nosniff",
            },
        )


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="/")


def _viewable(path: str) -> bool:
    """Whether a hit's path is a file the page can open (transcript hits are sessions)."""
    return path.endswith(".md")


def _number(raw: str | None, kind: type, low: float, high: float) -> Any:
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        return None
    return min(max(value, kind(low)), kind(high))


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    if n >= 1000:
        return f"{n / 1e3:.0f} kB"
    return f"{n} B"
